-- 004_webhooks: completion webhooks, an outbox written with the final status.
--
-- * batch_job.webhook is the job's webhook URL, NULL for none (every job
--   before this migration).
-- * batch_webhook holds one pending event per job whose webhook has not
--   taken it yet: a snapshot of the job as it finished, and the state of its
--   delivery. A claim sets runner and moves due_at past the claim's lease,
--   so an event whose runner died is due again once the lease has passed; a
--   retry clears runner and sets due_at to the next attempt. Delivered and
--   dropped events are deleted, so the table stays small. It has no foreign
--   key: an event outlives the sweep of its job.
-- * A trigger writes the event in the statement that makes a job with a
--   webhook finished and released (no runner): the release of the drain's
--   last write, the cancel of a queued job, a reap. The drain's other writes
--   do not touch the job row's status or runner, so the trigger costs them
--   nothing, and at a job's end its WHEN clause is all a job without a
--   webhook pays (see BenchmarkDrain in the package documentation).
--   Each of those statements also sets lease to the store's now (a reaped
--   cancelled job keeps its cancel time), which stands for the moment the
--   event became due.

ALTER TABLE batch_job ADD COLUMN webhook TEXT;

CREATE TABLE batch_webhook (
	job_id         TEXT    PRIMARY KEY,
	url            TEXT    NOT NULL,
	status         TEXT    NOT NULL,
	error          TEXT    NOT NULL,
	targets_total  INTEGER NOT NULL,
	targets_ok     INTEGER NOT NULL,
	targets_failed INTEGER NOT NULL,
	created_at     INTEGER NOT NULL,
	finished_at    INTEGER NOT NULL,
	lease          INTEGER NOT NULL, -- the job's, when it finished
	due_since      INTEGER NOT NULL, -- when the event became due
	due_at         INTEGER NOT NULL, -- when it may be claimed next
	runner         TEXT    NOT NULL DEFAULT '', -- the runner whose claim holds it
	attempts       INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- The claim: due events, oldest first.
CREATE INDEX batch_webhook_due ON batch_webhook (due_at);
-- The reaper's release of a runner's claims. Partial: claimed events only.
CREATE INDEX batch_webhook_claimed ON batch_webhook (runner) WHERE runner <> '';

CREATE TRIGGER batch_job_webhook AFTER UPDATE OF status, runner ON batch_job
WHEN NEW.webhook IS NOT NULL AND NEW.status NOT IN ('queued', 'running') AND NEW.runner = ''
	AND (OLD.status IN ('queued', 'running') OR OLD.runner <> '')
BEGIN
	INSERT OR IGNORE INTO batch_webhook (job_id, url, status, error, targets_total, targets_ok, targets_failed,
		created_at, finished_at, lease, due_since, due_at)
	VALUES (NEW.id, NEW.webhook, NEW.status, NEW.error, NEW.targets_total,
		(SELECT count(*) FROM batch_target WHERE job_seq = NEW.seq AND status = 'done'),
		(SELECT count(*) FROM batch_target WHERE job_seq = NEW.seq AND status = 'failed'),
		NEW.created_at, coalesce(NEW.finished_at, NEW.lease), NEW.lease, NEW.lease, NEW.lease);
END;
