-- 011_job_deadline: a job may carry a deadline, when it ends with what it
-- has.
--
-- {s} is the store's schema, quoted.
--
-- * job.deadline is the deadline, NULL for none.
-- * job_deadline serves Expire's search for queued jobs whose deadline has
--   passed. Partial: only queued jobs with a deadline.
-- * webhook.deadline is the job's deadline in its event, NULL for none;
--   the trigger function is the one of 005 with the deadline.
--
-- Adding a nullable column without a default rewrites no row.

ALTER TABLE {s}.job ADD COLUMN deadline timestamptz;

CREATE INDEX job_deadline ON {s}.job (deadline) WHERE status = 'queued' AND deadline IS NOT NULL;

ALTER TABLE {s}.webhook ADD COLUMN deadline timestamptz;

CREATE OR REPLACE FUNCTION {s}.job_webhook() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO {s}.webhook (job_id, caller, url, status, error, targets_total, targets_ok, targets_failed,
		created_at, finished_at, lease, due_since, due_at, deadline)
	VALUES (NEW.id, NEW.caller, NEW.webhook, NEW.status, NEW.error, NEW.targets_total, NEW.targets_ok, NEW.targets_failed,
		NEW.created_at, coalesce(NEW.finished_at, NEW.lease), NEW.lease, NEW.lease, NEW.lease, NEW.deadline)
	ON CONFLICT (job_id) DO NOTHING;
	RETURN NULL;
END
$$;
