-- 005_caller_bytes: the byte budget shared per caller (batch.Store.Evict).
--
-- Eviction takes the oldest-lease finished job of the caller that holds
-- the most bytes, so it needs each caller's bytes and that caller's oldest
-- finished job without a scan:
--
-- * batch_caller holds, per caller, the bytes of its finished jobs' rows
--   (as batch_stat.bytes does for the whole store: a held job's row has 0
--   bytes until its release). A caller with none has no row, so the table
--   has one row per caller with results stored. The triggers below keep it
--   exact from the same row changes as batch_stat; the drain's target
--   writes do not touch the job row, so they cost it nothing. It can be
--   re-derived from the rows at any time.
-- * batch_caller_bytes orders the callers by bytes, most first: the
--   eviction's next caller is its first entry.
-- * batch_job_evict orders a caller's finished jobs by lease (then seq,
--   the rowid): that caller's next job to go. Partial like batch_job_expiry,
--   so a live job's lease bumps never touch it.

CREATE TABLE batch_caller (
	caller TEXT    PRIMARY KEY,
	bytes  INTEGER NOT NULL
) WITHOUT ROWID;

CREATE INDEX batch_caller_bytes ON batch_caller (bytes DESC, caller);
CREATE INDEX batch_job_evict ON batch_job (caller, lease) WHERE status NOT IN ('queued', 'running');

INSERT INTO batch_caller (caller, bytes)
	SELECT caller, sum(bytes) FROM batch_job WHERE status NOT IN ('queued', 'running')
	GROUP BY caller HAVING sum(bytes) <> 0;

-- A job row's share of its caller's bytes: its bytes once it is finished.
-- Each trigger adds the change to the caller's row and drops a row that
-- reaches 0. The WHEN clauses match batch_stat's: only a change of that
-- share fires them.
CREATE TRIGGER batch_job_caller_insert AFTER INSERT ON batch_job
WHEN NEW.status NOT IN ('queued', 'running') AND NEW.bytes <> 0
BEGIN
	INSERT INTO batch_caller (caller, bytes) VALUES (NEW.caller, NEW.bytes)
		ON CONFLICT (caller) DO UPDATE SET bytes = bytes + excluded.bytes;
	DELETE FROM batch_caller WHERE caller = NEW.caller AND bytes = 0;
END;

CREATE TRIGGER batch_job_caller_update AFTER UPDATE OF status, bytes ON batch_job
WHEN iif(NEW.status IN ('queued', 'running'), 0, NEW.bytes) <> iif(OLD.status IN ('queued', 'running'), 0, OLD.bytes)
BEGIN
	INSERT INTO batch_caller (caller, bytes) VALUES (NEW.caller,
		iif(NEW.status IN ('queued', 'running'), 0, NEW.bytes) - iif(OLD.status IN ('queued', 'running'), 0, OLD.bytes))
		ON CONFLICT (caller) DO UPDATE SET bytes = bytes + excluded.bytes;
	DELETE FROM batch_caller WHERE caller = NEW.caller AND bytes = 0;
END;

CREATE TRIGGER batch_job_caller_delete AFTER DELETE ON batch_job
WHEN OLD.status NOT IN ('queued', 'running') AND OLD.bytes <> 0
BEGIN
	UPDATE batch_caller SET bytes = bytes - OLD.bytes WHERE caller = OLD.caller;
	DELETE FROM batch_caller WHERE caller = OLD.caller AND bytes = 0;
END;
