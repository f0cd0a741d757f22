-- 013_webhook_targets: per-target webhook events.
--
-- * batch_job.webhook_events is the set of events the job's webhook
--   receives (batchdriver.HookEvents: 1 the completion, 2 the per-target
--   events), NULL for the default, the completion alone.
-- * A job with per-target events has its batch_webhook row from its
--   create on, and the row carries all its events, one at a time:
--   events is the set, sent the targets delivered (targets finish in idx
--   order), ready the targets finished as the drain's writes store them,
--   and upto the end of the targets of the event out, fixed at its first
--   claim (sent for none). Until the job finishes, status is '' and the
--   snapshot columns are empty; due_at is 9223372036854775807 (never)
--   while nothing is to be sent. Every other row has events 1 and the
--   other three at 0: one completion event, as before.
-- * The trigger is the one of 011, and for a job with per-target events
--   it fills in the row's snapshot instead: the row is due at once if it
--   was idle and has something to send, and deleted if it has nothing
--   (no completion asked for, every finished target sent).
--
-- Adding a column without a default, or with a constant one, rewrites no
-- row.

ALTER TABLE batch_job ADD COLUMN webhook_events INTEGER;

ALTER TABLE batch_webhook ADD COLUMN events INTEGER NOT NULL DEFAULT 1;

ALTER TABLE batch_webhook ADD COLUMN sent INTEGER NOT NULL DEFAULT 0;

ALTER TABLE batch_webhook ADD COLUMN ready INTEGER NOT NULL DEFAULT 0;

ALTER TABLE batch_webhook ADD COLUMN upto INTEGER NOT NULL DEFAULT 0;

DROP TRIGGER batch_job_webhook;

CREATE TRIGGER batch_job_webhook AFTER UPDATE OF status, runner ON batch_job
WHEN NEW.webhook IS NOT NULL AND NEW.status NOT IN ('queued', 'running') AND NEW.runner = ''
	AND (OLD.status IN ('queued', 'running') OR OLD.runner <> '')
BEGIN
	INSERT OR IGNORE INTO batch_webhook (job_id, caller, url, status, error, targets_total, targets_ok, targets_failed,
		created_at, finished_at, lease, due_since, due_at, deadline, metadata)
	SELECT NEW.id, NEW.caller, NEW.webhook, NEW.status, NEW.error, NEW.targets_total,
		(SELECT count(*) FROM batch_target WHERE job_seq = NEW.seq AND status = 'done'),
		(SELECT count(*) FROM batch_target WHERE job_seq = NEW.seq AND status = 'failed'),
		NEW.created_at, coalesce(NEW.finished_at, NEW.lease), NEW.lease, NEW.lease, NEW.lease, NEW.deadline, NEW.metadata
	WHERE coalesce(NEW.webhook_events, 1) & 2 = 0;

	DELETE FROM batch_webhook WHERE job_id = NEW.id AND coalesce(NEW.webhook_events, 1) & 2 <> 0
		AND status = '' AND events & 1 = 0 AND runner = '' AND due_at = 9223372036854775807
		AND sent >= (SELECT count(*) FROM batch_target WHERE job_seq = NEW.seq AND status IN ('done', 'failed'));

	UPDATE batch_webhook SET status = NEW.status, error = NEW.error,
		targets_ok = (SELECT count(*) FROM batch_target WHERE job_seq = NEW.seq AND status = 'done'),
		targets_failed = (SELECT count(*) FROM batch_target WHERE job_seq = NEW.seq AND status = 'failed'),
		ready = (SELECT count(*) FROM batch_target WHERE job_seq = NEW.seq AND status IN ('done', 'failed')),
		finished_at = coalesce(NEW.finished_at, NEW.lease), lease = NEW.lease,
		due_since = iif(runner = '' AND due_at = 9223372036854775807, NEW.lease, due_since),
		due_at = iif(runner = '' AND due_at = 9223372036854775807, NEW.lease, due_at)
	WHERE job_id = NEW.id AND coalesce(NEW.webhook_events, 1) & 2 <> 0 AND status = '';
END;
