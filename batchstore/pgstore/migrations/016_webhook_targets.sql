-- 016_webhook_targets: per-target webhook events.
--
-- {s} is the store's schema, quoted.
--
-- * job.webhook_events is the set of events the job's webhook receives
--   (batchdriver.HookEvents: 1 the completion, 2 the per-target events),
--   NULL for the default, the completion alone.
-- * A job with per-target events has its webhook row from its create on,
--   and the row carries all its events, one at a time: events is the set,
--   sent the targets delivered (targets finish in idx order), ready the
--   targets finished as the drain's statements store them, and upto the
--   end of the targets of the event out, fixed at its first claim (sent
--   for none). Until the job finishes, status is '' and the snapshot
--   columns are empty; due_at is infinity while nothing is to be sent.
--   Every other row has events 1 and the other three at 0: one
--   completion event, as before.
-- * The trigger function is the one of 014, and for a job with per-target
--   events it fills in the row's snapshot instead: the row is due at once
--   if it was idle and has something to send, and deleted if it has
--   nothing (no completion asked for, every finished target sent). It
--   writes the row after the statement that released the job, so the
--   locks go job, then webhook, as in every statement that takes both.
--
-- Adding a nullable column, or one with a constant default, rewrites no
-- row.

ALTER TABLE {s}.job ADD COLUMN webhook_events smallint;

ALTER TABLE {s}.webhook ADD COLUMN events smallint NOT NULL DEFAULT 1;

ALTER TABLE {s}.webhook ADD COLUMN sent integer NOT NULL DEFAULT 0;

ALTER TABLE {s}.webhook ADD COLUMN ready integer NOT NULL DEFAULT 0;

ALTER TABLE {s}.webhook ADD COLUMN upto integer NOT NULL DEFAULT 0;

CREATE OR REPLACE FUNCTION {s}.job_webhook() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF coalesce(NEW.webhook_events, 1) & 2 = 0 THEN
		INSERT INTO {s}.webhook (job_id, caller, url, status, error, targets_total, targets_ok, targets_failed,
			created_at, finished_at, lease, due_since, due_at, deadline, metadata)
		VALUES (NEW.id, NEW.caller, NEW.webhook, NEW.status, NEW.error, NEW.targets_total, NEW.targets_ok, NEW.targets_failed,
			NEW.created_at, coalesce(NEW.finished_at, NEW.lease), NEW.lease, NEW.lease, NEW.lease, NEW.deadline, NEW.metadata)
		ON CONFLICT (job_id) DO NOTHING;
		RETURN NULL;
	END IF;
	DELETE FROM {s}.webhook WHERE job_id = NEW.id AND status = '' AND events & 1 = 0
		AND runner = '' AND due_at = 'infinity' AND sent >= NEW.targets_ok + NEW.targets_failed;
	UPDATE {s}.webhook SET status = NEW.status, error = NEW.error,
		targets_ok = NEW.targets_ok, targets_failed = NEW.targets_failed, ready = NEW.targets_ok + NEW.targets_failed,
		finished_at = coalesce(NEW.finished_at, NEW.lease), lease = NEW.lease,
		due_since = CASE WHEN runner = '' AND due_at = 'infinity' THEN NEW.lease ELSE due_since END,
		due_at = CASE WHEN runner = '' AND due_at = 'infinity' THEN NEW.lease ELSE due_at END
	WHERE job_id = NEW.id AND status = '';
	RETURN NULL;
END
$$;
