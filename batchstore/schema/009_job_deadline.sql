-- 009_job_deadline: a job may carry a deadline, when it ends with what it
-- has.
--
-- * batch_job.deadline is the deadline in Unix nanoseconds, NULL for none.
-- * batch_job_deadline serves the sweep's search for queued jobs whose
--   deadline has passed. Partial: only queued jobs with a deadline.
-- * batch_webhook.deadline is the job's deadline in its event, NULL for
--   none; the trigger is the one of 006 with the deadline.
--
-- Adding a column without a default rewrites no row.

ALTER TABLE batch_job ADD COLUMN deadline INTEGER;

CREATE INDEX batch_job_deadline ON batch_job (deadline) WHERE status = 'queued' AND deadline IS NOT NULL;

ALTER TABLE batch_webhook ADD COLUMN deadline INTEGER;

DROP TRIGGER batch_job_webhook;

CREATE TRIGGER batch_job_webhook AFTER UPDATE OF status, runner ON batch_job
WHEN NEW.webhook IS NOT NULL AND NEW.status NOT IN ('queued', 'running') AND NEW.runner = ''
	AND (OLD.status IN ('queued', 'running') OR OLD.runner <> '')
BEGIN
	INSERT OR IGNORE INTO batch_webhook (job_id, caller, url, status, error, targets_total, targets_ok, targets_failed,
		created_at, finished_at, lease, due_since, due_at, deadline)
	VALUES (NEW.id, NEW.caller, NEW.webhook, NEW.status, NEW.error, NEW.targets_total,
		(SELECT count(*) FROM batch_target WHERE job_seq = NEW.seq AND status = 'done'),
		(SELECT count(*) FROM batch_target WHERE job_seq = NEW.seq AND status = 'failed'),
		NEW.created_at, coalesce(NEW.finished_at, NEW.lease), NEW.lease, NEW.lease, NEW.lease, NEW.deadline);
END;
