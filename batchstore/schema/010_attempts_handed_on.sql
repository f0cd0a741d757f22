-- 010_attempts_handed_on: a target counts its fetches that may have
-- reached the upstream, and a job counts its hand-backs.
--
-- * batch_target.attempts is 1, and goes up by one each time a hand-back
--   with RepeatInFlight puts the target back to pending after its fetch
--   may have begun.
-- * batch_job.handed_on is 0, and goes up by one each time a hand-back
--   queues the job again.
--
-- Adding a column with a constant default rewrites no row: every target
-- stored so far was fetched at most once, and no job was handed on more
-- than the store can tell.

ALTER TABLE batch_target ADD COLUMN attempts INTEGER NOT NULL DEFAULT 1;

ALTER TABLE batch_job ADD COLUMN handed_on INTEGER NOT NULL DEFAULT 0;
