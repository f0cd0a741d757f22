-- 008_inspect: the operator console's reads (batch.Inspector).
--
-- * batch_job_finished orders the finished jobs by finish time, so that the
--   failures of the last hour read the jobs that finished in it and no
--   others, however many finished jobs the file holds. Partial: a live
--   job (finished_at NULL) is not in it, and a job enters it once, in the
--   write that finishes it (the drain's last write, a cancel or a reap).

CREATE INDEX batch_job_finished ON batch_job (finished_at) WHERE finished_at IS NOT NULL;
