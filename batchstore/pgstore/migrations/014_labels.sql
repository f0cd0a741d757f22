-- 014_labels: the caller's labels of a job and of its targets.
--
-- {s} is the store's schema, quoted.
--
-- * job.metadata is the job's metadata, a JSON object of strings, NULL for
--   none. A label search (List with metadata) reads the caller's jobs by
--   job_list, newest first, and tests containment (@>) on each.
-- * job.custom_ids is the targets' custom ids in idx order ('' for a
--   target without one), NULL when no target has one. It sits in the
--   job's row, as retry_idx does, so that the drain's writes of targets
--   do not carry it.
-- * webhook.metadata is the job's metadata in its event, NULL for none;
--   the trigger function is the one of 011 with the metadata.
--
-- Adding a nullable column without a default rewrites no row.

ALTER TABLE {s}.job ADD COLUMN metadata jsonb;

ALTER TABLE {s}.job ADD COLUMN custom_ids text[];

ALTER TABLE {s}.webhook ADD COLUMN metadata jsonb;

CREATE OR REPLACE FUNCTION {s}.job_webhook() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO {s}.webhook (job_id, caller, url, status, error, targets_total, targets_ok, targets_failed,
		created_at, finished_at, lease, due_since, due_at, deadline, metadata)
	VALUES (NEW.id, NEW.caller, NEW.webhook, NEW.status, NEW.error, NEW.targets_total, NEW.targets_ok, NEW.targets_failed,
		NEW.created_at, coalesce(NEW.finished_at, NEW.lease), NEW.lease, NEW.lease, NEW.lease, NEW.deadline, NEW.metadata)
	ON CONFLICT (job_id) DO NOTHING;
	RETURN NULL;
END
$$;
