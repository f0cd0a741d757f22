-- 006_webhook_fairness: webhook events know their caller, for the per-caller
-- caps and round-robin claims, and for the per-caller signing secret.
--
-- * batch_webhook.caller is the name of the job's caller. Events written
--   before this migration take it from their job; an event whose job was
--   swept already keeps '' (it is delivered like any other, and counts
--   against no caller).
-- * batch_webhook_caller serves Create's count of a caller's pending
--   events.
-- * batch_job_webhook_pending holds the jobs that will get an event (the
--   trigger's condition before it fires): Create counts a caller's from it.
-- * The trigger is the one of 004 with the caller.

ALTER TABLE batch_webhook ADD COLUMN caller TEXT NOT NULL DEFAULT '';

UPDATE batch_webhook SET caller = coalesce((SELECT j.caller FROM batch_job j WHERE j.id = batch_webhook.job_id), '');

CREATE INDEX batch_webhook_caller ON batch_webhook (caller);

CREATE INDEX batch_job_webhook_pending ON batch_job (caller)
	WHERE webhook IS NOT NULL AND (status IN ('queued', 'running') OR runner <> '');

DROP TRIGGER batch_job_webhook;

CREATE TRIGGER batch_job_webhook AFTER UPDATE OF status, runner ON batch_job
WHEN NEW.webhook IS NOT NULL AND NEW.status NOT IN ('queued', 'running') AND NEW.runner = ''
	AND (OLD.status IN ('queued', 'running') OR OLD.runner <> '')
BEGIN
	INSERT OR IGNORE INTO batch_webhook (job_id, caller, url, status, error, targets_total, targets_ok, targets_failed,
		created_at, finished_at, lease, due_since, due_at)
	VALUES (NEW.id, NEW.caller, NEW.webhook, NEW.status, NEW.error, NEW.targets_total,
		(SELECT count(*) FROM batch_target WHERE job_seq = NEW.seq AND status = 'done'),
		(SELECT count(*) FROM batch_target WHERE job_seq = NEW.seq AND status = 'failed'),
		NEW.created_at, coalesce(NEW.finished_at, NEW.lease), NEW.lease, NEW.lease, NEW.lease);
END;
