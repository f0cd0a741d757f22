-- 003_webhooks: completion webhooks, an outbox written with the final status.
--
-- {s} is the store's schema, quoted.
--
-- * job.webhook is the job's webhook URL, NULL for none (every job before
--   this migration). The core accepts only a valid UTF-8 http(s) URL, so text
--   holds it.
-- * webhook holds one pending event per job whose webhook has not taken it
--   yet: a snapshot of the job as it finished, and the state of its delivery.
--   A claim (FOR UPDATE SKIP LOCKED, so claims on several nodes never wait
--   for or return each other's rows) sets runner and moves due_at past the
--   claim's lease, so an event whose node died is due again once the lease
--   has passed; a retry clears runner and sets due_at to the next attempt.
--   Delivered and dropped events are deleted, so the table stays small. It
--   has no foreign key: an event outlives the sweep of its job.
-- * A row trigger writes the event in the statement that makes a job with a
--   webhook finished and released: the drain write that releases it, the
--   cancel of a queued job, a reap. Its WHEN clause is evaluated on every
--   drain write (each one sets status and runner) but queues nothing for a
--   job without a webhook, and the drain statement itself is unchanged.
--   Each of those statements also sets lease to the store's now (a reaped
--   cancelled job keeps its cancel time), which stands for the moment the
--   event became due.

ALTER TABLE {s}.job ADD COLUMN webhook text;

CREATE TABLE {s}.webhook (
	job_id         text        PRIMARY KEY,
	url            text        NOT NULL,
	status         text        NOT NULL,
	error          text        NOT NULL,
	targets_total  integer     NOT NULL,
	targets_ok     integer     NOT NULL,
	targets_failed integer     NOT NULL,
	created_at     timestamptz NOT NULL,
	finished_at    timestamptz NOT NULL,
	lease          timestamptz NOT NULL, -- the job's, when it finished
	due_since      timestamptz NOT NULL, -- when the event became due
	due_at         timestamptz NOT NULL, -- when it may be claimed next
	runner         text        NOT NULL DEFAULT '', -- the runner whose claim holds it
	attempts       integer     NOT NULL DEFAULT 0
);

-- The claim: due events, oldest first.
CREATE INDEX webhook_due ON {s}.webhook (due_at, job_id);
-- The reaper's release of a runner's claims: claimed events only.
CREATE INDEX webhook_claimed ON {s}.webhook (runner) WHERE runner <> '';

CREATE FUNCTION {s}.job_webhook() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO {s}.webhook (job_id, url, status, error, targets_total, targets_ok, targets_failed,
		created_at, finished_at, lease, due_since, due_at)
	VALUES (NEW.id, NEW.webhook, NEW.status, NEW.error, NEW.targets_total, NEW.targets_ok, NEW.targets_failed,
		NEW.created_at, coalesce(NEW.finished_at, NEW.lease), NEW.lease, NEW.lease, NEW.lease)
	ON CONFLICT (job_id) DO NOTHING;
	RETURN NULL;
END
$$;

CREATE TRIGGER job_webhook AFTER UPDATE OF status, runner ON {s}.job FOR EACH ROW
	WHEN (NEW.webhook IS NOT NULL AND NEW.status NOT IN ('queued', 'running') AND NEW.runner = ''
		AND (OLD.status IN ('queued', 'running') OR OLD.runner <> ''))
	EXECUTE FUNCTION {s}.job_webhook();
