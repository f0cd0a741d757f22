-- 012_skipped: targets refused at submit and skipped (batch.OnInvalidSkip).
--
-- * batch_job.skipped lists the idx of the targets its create stored
--   finished, comma-separated in idx order as retry_idx is, NULL for none.
--   Their rows are failed from the start, and the job's row holds their
--   progress (targets_done, bytes) while it is queued, as a job handed back
--   does (see 010). The claim and the drain start only pending targets; a
--   job without skipped targets takes the paths it always took, so that
--   the column costs a drain write nothing but its test for NULL.
--
-- Adding a column without a default rewrites no row.

ALTER TABLE batch_job ADD COLUMN skipped TEXT;
