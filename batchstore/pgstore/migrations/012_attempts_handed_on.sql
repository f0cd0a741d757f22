-- 012_attempts_handed_on: a target counts its fetches that may have
-- reached the upstream, and a job counts its hand-backs.
--
-- {s} is the store's schema, quoted.
--
-- * target.attempts is 1, and goes up by one each time a hand-back with
--   RepeatInFlight puts the target back to pending after its fetch may
--   have begun.
-- * job.handed_on is 0, and goes up by one each time a hand-back queues
--   the job again.
--
-- Adding a column with a constant default rewrites no row (PostgreSQL 11
-- and later).

ALTER TABLE {s}.target ADD COLUMN attempts integer NOT NULL DEFAULT 1;

ALTER TABLE {s}.job ADD COLUMN handed_on integer NOT NULL DEFAULT 0;
