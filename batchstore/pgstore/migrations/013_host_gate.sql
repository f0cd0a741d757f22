-- 013_host_gate: the per-host limits that every runner sharing the store
-- keeps (batchdriver.HostGate): how many fetches to one host run at once,
-- how far apart their starts are, and a host's request to wait.
--
-- {s} is the store's schema, quoted.
--
-- A host is known by its key, a hash of its name and port that the runner
-- makes: no host name is stored. host has one row per key seen lately
-- (the sweep deletes the idle ones); host_slot one row per fetch in
-- flight, held until its release, its lease's end, or until a reap
-- forgets its runner.
--
-- Both tables are UNLOGGED: the gate's state lives as long as the fetches
-- and waits it describes, seconds to a minute, so it writes no WAL and a
-- gate call's commit waits for no flush. A crash of the database empties
-- them (a standby has them empty): the slots of the fetches in flight
-- and the back-offs are forgotten, and the hosts see at most one round
-- of fetches more than the limits allow.

CREATE UNLOGGED TABLE {s}.host (
	key           text PRIMARY KEY,
	next_start    timestamptz NOT NULL DEFAULT '-infinity',
	backoff_until timestamptz NOT NULL DEFAULT '-infinity',
	wanted_until  timestamptz NOT NULL DEFAULT '-infinity',
	wanted_by     text        NOT NULL DEFAULT ''
);

CREATE UNLOGGED TABLE {s}.host_slot (
	id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	key    text NOT NULL,
	runner text NOT NULL,
	lease  timestamptz NOT NULL
);
CREATE INDEX host_slot_key ON {s}.host_slot (key, lease);
CREATE INDEX host_slot_runner ON {s}.host_slot (runner);

-- host_acquire takes a slot of p_key in one round trip. The host row's
-- lock orders the acquires of one key; each statement after it takes a
-- new snapshot (a volatile function's statements do, under READ
-- COMMITTED), so the count sees every slot committed before the lock was
-- granted. It returns the slot's id, or 0 and the microseconds to wait (0
-- when the slots are full or reserved). A runner refused because the
-- slots are full, while no other runner holds the reservation
-- (wanted_by, until wanted_until), takes it for p_want; taking a slot
-- ends its own. Slots whose lease ended count for nothing; the sweep
-- deletes them.
CREATE FUNCTION {s}.host_acquire(p_key text, p_runner text, p_limit integer,
	p_interval interval, p_lease interval, p_want interval, p_now timestamptz)
RETURNS TABLE (slot bigint, wait_us bigint) LANGUAGE plpgsql AS $$
DECLARE
	t timestamptz := coalesce(p_now, now());
	h record;
	held integer;
	reserved boolean;
BEGIN
	SELECT next_start, backoff_until, wanted_until, wanted_by INTO h FROM {s}.host WHERE key = p_key FOR UPDATE;
	IF NOT FOUND THEN
		INSERT INTO {s}.host (key) VALUES (p_key) ON CONFLICT (key) DO NOTHING;
		SELECT next_start, backoff_until, wanted_until, wanted_by INTO h FROM {s}.host WHERE key = p_key FOR UPDATE;
	END IF;
	IF h.backoff_until > t THEN
		RETURN QUERY SELECT 0::bigint, (extract(epoch FROM h.backoff_until - t) * 1000000)::bigint;
		RETURN;
	END IF;
	IF p_limit > 0 THEN
		reserved := h.wanted_until > t AND h.wanted_by <> p_runner;
		SELECT count(*) INTO held FROM {s}.host_slot s WHERE s.key = p_key AND s.lease > t;
		IF held >= p_limit OR reserved THEN
			IF NOT reserved THEN
				UPDATE {s}.host SET wanted_until = t + p_want, wanted_by = p_runner WHERE key = p_key;
			END IF;
			RETURN QUERY SELECT 0::bigint, 0::bigint;
			RETURN;
		END IF;
	END IF;
	IF h.next_start > t THEN
		RETURN QUERY SELECT 0::bigint, (extract(epoch FROM h.next_start - t) * 1000000)::bigint;
		RETURN;
	END IF;
	IF p_interval > interval '0' OR h.wanted_by = p_runner THEN
		UPDATE {s}.host SET next_start = greatest(next_start, t + p_interval),
			wanted_until = CASE WHEN wanted_by = p_runner THEN '-infinity' ELSE wanted_until END,
			wanted_by = CASE WHEN wanted_by = p_runner THEN '' ELSE wanted_by END
			WHERE key = p_key;
	END IF;
	RETURN QUERY INSERT INTO {s}.host_slot (key, runner, lease) VALUES (p_key, p_runner, t + p_lease)
		RETURNING id, 0::bigint;
END
$$;

-- host_renew extends a slot's lease, unless another runner than its
-- holder holds its key's reservation: then it frees the slot. It reports
-- whether the slot is still held.
CREATE FUNCTION {s}.host_renew(p_key text, p_slot bigint, p_lease interval, p_now timestamptz)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
	t timestamptz := coalesce(p_now, now());
BEGIN
	IF EXISTS (SELECT 1 FROM {s}.host h JOIN {s}.host_slot s ON s.key = h.key
		WHERE h.key = p_key AND s.id = p_slot AND h.wanted_until > t AND h.wanted_by <> s.runner) THEN
		DELETE FROM {s}.host_slot WHERE id = p_slot;
		RETURN false;
	END IF;
	UPDATE {s}.host_slot SET lease = t + p_lease WHERE id = p_slot AND lease > t;
	RETURN FOUND;
END
$$;
