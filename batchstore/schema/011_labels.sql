-- 011_labels: the caller's labels of a job and of its targets.
--
-- * batch_job.metadata is the job's metadata, a JSON object of strings,
--   NULL for none.
-- * batch_job.custom_ids is the targets' custom ids, a JSON array of
--   strings in idx order ("" for a target without one), NULL when no
--   target has one. It sits in the job's row, as retry_idx does, so that
--   the drain's writes of targets do not carry it.
-- * batch_webhook.metadata is the job's metadata in its event, NULL for
--   none; the trigger is the one of 009 with the metadata.
--
-- Adding a column without a default rewrites no row.

ALTER TABLE batch_job ADD COLUMN metadata TEXT;

ALTER TABLE batch_job ADD COLUMN custom_ids TEXT;

ALTER TABLE batch_webhook ADD COLUMN metadata TEXT;

DROP TRIGGER batch_job_webhook;

CREATE TRIGGER batch_job_webhook AFTER UPDATE OF status, runner ON batch_job
WHEN NEW.webhook IS NOT NULL AND NEW.status NOT IN ('queued', 'running') AND NEW.runner = ''
	AND (OLD.status IN ('queued', 'running') OR OLD.runner <> '')
BEGIN
	INSERT OR IGNORE INTO batch_webhook (job_id, caller, url, status, error, targets_total, targets_ok, targets_failed,
		created_at, finished_at, lease, due_since, due_at, deadline, metadata)
	VALUES (NEW.id, NEW.caller, NEW.webhook, NEW.status, NEW.error, NEW.targets_total,
		(SELECT count(*) FROM batch_target WHERE job_seq = NEW.seq AND status = 'done'),
		(SELECT count(*) FROM batch_target WHERE job_seq = NEW.seq AND status = 'failed'),
		NEW.created_at, coalesce(NEW.finished_at, NEW.lease), NEW.lease, NEW.lease, NEW.lease, NEW.deadline, NEW.metadata);
END;
