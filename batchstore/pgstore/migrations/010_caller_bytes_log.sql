-- 010_caller_bytes_log: a caller's byte counter moves by appended deltas,
-- folded in later, so that the releases of one caller on several nodes do
-- not queue for its row.
--
-- {s} is the store's schema, quoted.
--
-- The row triggers of 004 upserted a caller's caller_bytes row in the
-- statement that moved a job's share, and held that row until the commit:
-- one caller's releases on several nodes ran one after the other, the lock
-- wait left at 3 nodes once the counter was in shards (009). They now
-- append the delta to caller_bytes_log instead, which locks no existing
-- row. The store folds the log into caller_bytes (and deletes the rows that
-- reach zero) under the counter's locks, which makes folds run one at a
-- time: an eviction before it picks and after each batch it deletes, and a
-- sweep at the end of its pass, or on its own when there is nothing to
-- sweep, so the log holds at most about a sweep interval of releases.
-- Readers that do not hold the locks (the console's) add the log's deltas
-- to the rows they read. A caller's bytes are its caller_bytes row plus its
-- log rows; the tests re-derive both after every test. A node of an older
-- build that is still running picks from caller_bytes without folding, so
-- its evictions may lag by the deltas not yet folded until it is replaced
-- (a newer schema refuses to open for it).

CREATE TABLE {s}.caller_bytes_log (
	seq    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	caller text   NOT NULL,
	delta  bigint NOT NULL
);

CREATE INDEX caller_bytes_log_caller ON {s}.caller_bytes_log (caller);

CREATE OR REPLACE FUNCTION {s}.job_caller_bytes() RETURNS trigger LANGUAGE plpgsql AS $$
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
	INSERT INTO {s}.caller_bytes_log (caller, delta) VALUES (who, delta);
	RETURN NULL;
END
$$;
