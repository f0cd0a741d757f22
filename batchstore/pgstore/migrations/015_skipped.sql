-- 015_skipped: targets refused at submit and skipped (batch.OnInvalidSkip).
--
-- {s} is the store's schema, quoted.
--
-- * job.skipped lists the idx of the targets its create stored finished,
--   in idx order, NULL for none. Their rows are failed from the start and
--   counted in targets_failed and bytes (and, while no runner holds the
--   job, in the counters), as a job handed back holds its finished
--   targets. The claim and the drain start only the other targets; a job
--   without skipped targets takes the paths it always took (see
--   nextTarget in sql.go), so that the column costs a drain write nothing
--   but its test for NULL.
--
-- Adding a nullable column without a default rewrites no row.

ALTER TABLE {s}.job ADD COLUMN skipped integer[];
