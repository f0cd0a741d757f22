-- 007_inspect: the operator console's reads (batch.Inspector).
--
-- {s} is the store's schema, quoted.
--
-- * job_finished orders the finished jobs by finish time, so that the
--   failures of the last hour read the jobs that finished in it and no
--   others, however many finished jobs the store holds. Partial: a live
--   job (finished_at NULL) is not in it. A job enters it once, in the
--   update that finishes it, which changes status and so is not a HOT
--   update anyway: the drain's other writes do not touch it.

CREATE INDEX job_finished ON {s}.job (finished_at) WHERE finished_at IS NOT NULL;
