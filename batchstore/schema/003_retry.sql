-- 003_retry: a retry's lineage (batch.Runner.Retry).
--
-- retry_of is the id of the job a retry retries, '' for any other job;
-- retry_idx is, in a retry, each target's idx in that job, in the retry's
-- idx order, as decimal numbers joined by commas ("1,4,5"), and '' for any
-- other job. Both are written once, at the insert, and only read after.

ALTER TABLE batch_job ADD COLUMN retry_of TEXT NOT NULL DEFAULT '';
ALTER TABLE batch_job ADD COLUMN retry_idx TEXT NOT NULL DEFAULT '';
