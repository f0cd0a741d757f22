-- 017_watch: the jobs some node waits on, so that a node sends the other
-- nodes a job's changes only while one of them waits for it.
--
-- {s} is the store's schema, quoted.
--
-- A node's change feed used to NOTIFY every changed job id, and every
-- node's listener got every payload: the cost of a target grew with the
-- nodes. Now a node whose runner waits on a job (a long-poll) keeps a row
-- here for it, tagged with the node's feed; the other nodes send only the
-- ids that have a row of another tag. gen orders a node's watches of one
-- job, so that a late delete of an ended watch spares a newer one. A row
-- whose node died is deleted by the sweep once it is older than any wait.
--
-- UNLOGGED: a watch lives as long as a wait, a minute at most, so it
-- writes no WAL and its commit waits for no flush. A crash of the database
-- empties it, and the waits then wake at their next poll.

CREATE UNLOGGED TABLE {s}.watch (
	job_id text        NOT NULL,
	tag    text        NOT NULL,
	gen    bigint      NOT NULL,
	since  timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (job_id, tag)
);
CREATE INDEX watch_since ON {s}.watch (since);
