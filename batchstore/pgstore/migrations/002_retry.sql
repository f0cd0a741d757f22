-- 002_retry: a retry's lineage (batch.Runner.Retry). retry_of is the id of
-- the job a retry retries, '' for any other job; retry_idx is, in a retry,
-- each target's idx in that job, in the retry's idx order, and NULL for any
-- other job. Both are written once, at the insert.

ALTER TABLE {s}.job ADD COLUMN retry_of text NOT NULL DEFAULT '';
ALTER TABLE {s}.job ADD COLUMN retry_idx integer[];
