-- 002_one_write_per_target: the Store v2 write path.
--
-- A completed target costs one write: storing target i and starting target
-- i+1 (or finishing the job) is one transaction, and it writes the target
-- rows and the result body but not the job row. For that:
--
-- * A job is held by the runner in batch_job.runner while one of its
--   targets runs, and runner is '' otherwise; the target in flight is the
--   one whose status is 'running'. Held jobs have their own partial index,
--   which changes only at the claim and at the release, and the partial
--   index batch_target_running (written twice per target) goes.
-- * batch_target.bytes is what the target adds to the byte budget. While a
--   job is held, its row's targets_done and bytes are 0 and reads derive
--   them from its targets; the release (the last target's write, or a
--   reap) writes them once. The lease of a held job is bumped at most once
--   per lease grain.
-- * Heartbeats are one row per runner in batch_runner, written once per
--   interval, instead of a column of every job written at every target.
-- * Result bodies move to batch_body, keyed by rowid: appending one writes
--   the table's last leaf and its overflow pages, and no second index.
--   batch_target.result_id points at the body.
-- * batch_stat.bytes counts the bytes of the job rows of finished jobs, so
--   no target write touches it; the store total is that plus the bytes of
--   the held jobs' targets (a handful of jobs, on the held index). The
--   triggers keep it exact, and it can be re-derived from the rows.

ALTER TABLE batch_job DROP COLUMN heartbeat;
ALTER TABLE batch_target ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
UPDATE batch_target SET bytes = length(error)
	+ coalesce((SELECT length(r.body) FROM batch_result r WHERE r.job_seq = batch_target.job_seq AND r.idx = batch_target.idx), 0);
UPDATE batch_job SET runner = ''
	WHERE NOT EXISTS (SELECT 1 FROM batch_target t WHERE t.job_seq = batch_job.seq AND t.status = 'running');
UPDATE batch_job SET targets_done = 0, bytes = 0 WHERE runner <> '';

DROP INDEX batch_target_running;
-- The reaper: jobs held by a runner. Partial: a handful of rows.
CREATE INDEX batch_job_held ON batch_job (runner) WHERE runner <> '';

-- One heartbeat per runner (Unix nanoseconds).
CREATE TABLE batch_runner (
	id        TEXT    PRIMARY KEY,
	heartbeat INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE batch_body (
	id   INTEGER PRIMARY KEY,
	body BLOB    NOT NULL
);
ALTER TABLE batch_target ADD COLUMN result_id INTEGER; -- batch_body.id of a done target
INSERT INTO batch_body (id, body) SELECT rowid, body FROM batch_result;
UPDATE batch_target SET result_id = (
	SELECT r.rowid FROM batch_result r WHERE r.job_seq = batch_target.job_seq AND r.idx = batch_target.idx);
DROP TABLE batch_result;

DROP TRIGGER batch_job_stat_insert;
DROP TRIGGER batch_job_stat_update;
DROP TRIGGER batch_job_stat_delete;

CREATE TRIGGER batch_job_stat_insert AFTER INSERT ON batch_job BEGIN
	UPDATE batch_stat SET
		bytes = bytes + iif(NEW.status IN ('queued', 'running'), 0, NEW.bytes),
		queued = queued + (NEW.status = 'queued'),
		running = running + (NEW.status = 'running')
	WHERE id = 1;
END;

-- The WHEN clause keeps the hot path (bytes of a running job) off the row.
CREATE TRIGGER batch_job_stat_update AFTER UPDATE OF status, bytes ON batch_job
WHEN OLD.status IS NOT NEW.status OR (OLD.bytes IS NOT NEW.bytes AND NEW.status NOT IN ('queued', 'running'))
BEGIN
	UPDATE batch_stat SET
		bytes = bytes + iif(NEW.status IN ('queued', 'running'), 0, NEW.bytes)
		              - iif(OLD.status IN ('queued', 'running'), 0, OLD.bytes),
		queued = queued + (NEW.status = 'queued') - (OLD.status = 'queued'),
		running = running + (NEW.status = 'running') - (OLD.status = 'running')
	WHERE id = 1;
END;

CREATE TRIGGER batch_job_stat_delete AFTER DELETE ON batch_job BEGIN
	UPDATE batch_stat SET
		bytes = bytes - iif(OLD.status IN ('queued', 'running'), 0, OLD.bytes),
		queued = queued - (OLD.status = 'queued'),
		running = running - (OLD.status = 'running')
	WHERE id = 1;
END;

UPDATE batch_stat SET
	bytes = (SELECT coalesce(sum(bytes), 0) FROM batch_job WHERE status NOT IN ('queued', 'running')),
	queued = (SELECT count(*) FROM batch_job WHERE status = 'queued'),
	running = (SELECT count(*) FROM batch_job WHERE status = 'running')
WHERE id = 1;
