-- 004_caller_bytes: the byte budget shared per caller (batch.Store.Evict).
--
-- {s} is the store's schema, quoted.
--
-- Eviction takes the oldest-lease released finished job of the caller that
-- holds the most bytes, so it needs each caller's bytes and that caller's
-- oldest job without a scan:
--
-- * caller_bytes holds, per caller, the bytes of its jobs that no runner
--   holds, as stat does for the whole store (a held job's bytes are added
--   from the held index when read). A caller with none has no row, so the
--   table has one row per caller with results stored. Row triggers keep it
--   exact from every change of a job's share (its bytes once released):
--   the release of the drain's last write, a reap, a sweep, an eviction,
--   or any other statement. Their WHEN clauses fire the function only when
--   that share changes, so the drain's other writes pay the clause alone.
--   Each statement that changes a share also moves stat, and locks its row
--   first (the drain's release and a reap in an earlier part of the same
--   statement; sweep and eviction before anything else): the triggers fire
--   at the end of the statement, so caller rows are only ever locked under
--   the stat row's lock, and two transactions cannot deadlock on them. It
--   can be re-derived at any time: sum(job.bytes) WHERE runner = '' by
--   caller.
-- * caller_bytes_most orders the callers by bytes, most first, names in
--   byte order (COLLATE "C", as Go compares them) for equals: the next
--   caller to evict from is its first entry.
-- * job_evict orders each caller's released finished jobs by lease, like
--   job_expiry for the whole store: that caller's next job to go.

CREATE TABLE {s}.caller_bytes (
	caller text   PRIMARY KEY,
	bytes  bigint NOT NULL
);

CREATE INDEX caller_bytes_most ON {s}.caller_bytes (bytes DESC, caller COLLATE "C");
CREATE INDEX job_evict ON {s}.job (caller, lease, seq) WHERE status NOT IN ('queued', 'running') AND runner = '';

INSERT INTO {s}.caller_bytes (caller, bytes)
	SELECT caller, sum(bytes) FROM {s}.job WHERE runner = '' GROUP BY caller HAVING sum(bytes) <> 0;

CREATE FUNCTION {s}.job_caller_bytes() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	who text;
	delta bigint := 0;
BEGIN
	IF TG_OP = 'INSERT' THEN
		who := NEW.caller;
		delta := NEW.bytes;
	ELSIF TG_OP = 'DELETE' THEN
		who := OLD.caller;
		delta := -OLD.bytes;
	ELSE
		who := NEW.caller;
		delta := CASE WHEN NEW.runner = '' THEN NEW.bytes ELSE 0 END - CASE WHEN OLD.runner = '' THEN OLD.bytes ELSE 0 END;
	END IF;
	INSERT INTO {s}.caller_bytes AS c (caller, bytes) VALUES (who, delta)
		ON CONFLICT (caller) DO UPDATE SET bytes = c.bytes + excluded.bytes;
	DELETE FROM {s}.caller_bytes WHERE caller = who AND bytes = 0;
	RETURN NULL;
END
$$;

CREATE TRIGGER job_caller_bytes_insert AFTER INSERT ON {s}.job FOR EACH ROW
	WHEN (NEW.runner = '' AND NEW.bytes <> 0)
	EXECUTE FUNCTION {s}.job_caller_bytes();
CREATE TRIGGER job_caller_bytes_update AFTER UPDATE OF runner, bytes ON {s}.job FOR EACH ROW
	WHEN ((CASE WHEN NEW.runner = '' THEN NEW.bytes ELSE 0 END) <> (CASE WHEN OLD.runner = '' THEN OLD.bytes ELSE 0 END))
	EXECUTE FUNCTION {s}.job_caller_bytes();
CREATE TRIGGER job_caller_bytes_delete AFTER DELETE ON {s}.job FOR EACH ROW
	WHEN (OLD.runner = '' AND OLD.bytes <> 0)
	EXECUTE FUNCTION {s}.job_caller_bytes();
