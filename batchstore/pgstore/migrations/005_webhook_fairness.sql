-- 005_webhook_fairness: webhook events know their caller, for the per-caller
-- caps and round-robin claims, and for the per-caller signing secret.
--
-- {s} is the store's schema, quoted.
--
-- * webhook.caller is the name of the job's caller. Events written before
--   this migration take it from their job; an event whose job was swept
--   already keeps '' (it is delivered like any other, and counts against no
--   caller).
-- * webhook_caller serves the claim's read of each caller's oldest due events
--   and Create's count of a caller's pending events.
-- * job_webhook_pending holds the jobs that will get an event (the
--   trigger's condition before it fires): Create counts a caller's from it.
-- * The trigger function is the one of 003 with the caller.

ALTER TABLE {s}.webhook ADD COLUMN caller text NOT NULL DEFAULT '';

UPDATE {s}.webhook w SET caller = j.caller FROM {s}.job j WHERE j.id = w.job_id;

CREATE INDEX webhook_caller ON {s}.webhook (caller, due_at, job_id);

CREATE INDEX job_webhook_pending ON {s}.job (caller)
	WHERE webhook IS NOT NULL AND (status IN ('queued', 'running') OR runner <> '');

CREATE OR REPLACE FUNCTION {s}.job_webhook() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO {s}.webhook (job_id, caller, url, status, error, targets_total, targets_ok, targets_failed,
		created_at, finished_at, lease, due_since, due_at)
	VALUES (NEW.id, NEW.caller, NEW.webhook, NEW.status, NEW.error, NEW.targets_total, NEW.targets_ok, NEW.targets_failed,
		NEW.created_at, coalesce(NEW.finished_at, NEW.lease), NEW.lease, NEW.lease, NEW.lease)
	ON CONFLICT (job_id) DO NOTHING;
	RETURN NULL;
END
$$;
