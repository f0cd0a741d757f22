-- 001_init: jobs, targets, results and the maintained counters.
--
-- Times are Unix nanoseconds (INTEGER); NULL means "not set".
-- Statuses are the batch package's strings.
-- PRAGMA auto_vacuum cannot be set inside a transaction, so migrate.go sets
-- it (on an empty file) before this file runs.

-- One row per job. seq is the internal key the other tables reference; id is
-- the runner's job id (a uuid string).
CREATE TABLE batch_job (
	seq               INTEGER PRIMARY KEY,
	id                TEXT    NOT NULL UNIQUE,
	caller            TEXT    NOT NULL,
	caller_class      TEXT    NOT NULL DEFAULT '',
	caller_restricted INTEGER NOT NULL DEFAULT 0,
	idem_key          TEXT    NOT NULL,
	status            TEXT    NOT NULL,
	error             TEXT    NOT NULL DEFAULT '',
	targets_total     INTEGER NOT NULL,
	targets_done      INTEGER NOT NULL DEFAULT 0,
	created_at        INTEGER NOT NULL,
	lease             INTEGER NOT NULL,
	finished_at       INTEGER,
	bytes             INTEGER NOT NULL DEFAULT 0,
	runner            TEXT    NOT NULL DEFAULT '',
	heartbeat         INTEGER
);

-- Idempotent reuse: a caller's jobs by key.
CREATE INDEX batch_job_idem ON batch_job (idem_key, caller);
-- List: a caller's jobs, newest first.
CREATE INDEX batch_job_caller ON batch_job (caller, created_at);
-- Per-caller live count (the caps). Partial: holds live jobs only.
CREATE INDEX batch_job_live ON batch_job (caller, status) WHERE status IN ('queued', 'running');
-- Claim: the oldest queued job. Partial: holds queued jobs only.
CREATE INDEX batch_job_queue ON batch_job (created_at) WHERE status = 'queued';
-- Sweep and Evict: finished jobs by lease. Partial: live jobs (whose lease
-- moves on every finished target) never touch it.
CREATE INDEX batch_job_expiry ON batch_job (lease) WHERE status NOT IN ('queued', 'running');

-- One row per target, clustered by (job_seq, idx): a status summary reads
-- exactly these rows and nothing else. Result bodies live in batch_result.
CREATE TABLE batch_target (
	job_seq INTEGER NOT NULL REFERENCES batch_job (seq) ON DELETE CASCADE,
	idx     INTEGER NOT NULL,
	url     TEXT    NOT NULL,
	options TEXT    NOT NULL DEFAULT '', -- JSON of batch.Options; '' when zero
	status  TEXT    NOT NULL,
	error   TEXT    NOT NULL DEFAULT '',
	hint    TEXT    NOT NULL DEFAULT '',
	outcome TEXT    NOT NULL DEFAULT '',
	PRIMARY KEY (job_seq, idx)
) WITHOUT ROWID;

-- The restart hook: the running targets. Partial: a handful of rows.
CREATE INDEX batch_target_running ON batch_target (job_seq) WHERE status = 'running';

-- Result envelopes of done targets, away from the pages a summary reads.
-- A rowid table (large rows belong in one), keyed by its primary-key index.
CREATE TABLE batch_result (
	job_seq INTEGER NOT NULL REFERENCES batch_job (seq) ON DELETE CASCADE,
	idx     INTEGER NOT NULL,
	body    BLOB    NOT NULL,
	PRIMARY KEY (job_seq, idx)
);

-- Store-wide counters, kept exact by the triggers below so that no code path
-- can forget them and no read needs a scan: bytes is the sum of
-- batch_job.bytes (result and error bytes); queued and running count jobs.
CREATE TABLE batch_stat (
	id      INTEGER PRIMARY KEY CHECK (id = 1),
	bytes   INTEGER NOT NULL,
	queued  INTEGER NOT NULL,
	running INTEGER NOT NULL
);
INSERT INTO batch_stat (id, bytes, queued, running) VALUES (1, 0, 0, 0);

CREATE TRIGGER batch_job_stat_insert AFTER INSERT ON batch_job BEGIN
	UPDATE batch_stat SET
		bytes = bytes + NEW.bytes,
		queued = queued + (NEW.status = 'queued'),
		running = running + (NEW.status = 'running')
	WHERE id = 1;
END;

CREATE TRIGGER batch_job_stat_update AFTER UPDATE OF status, bytes ON batch_job BEGIN
	UPDATE batch_stat SET
		bytes = bytes + NEW.bytes - OLD.bytes,
		queued = queued + (NEW.status = 'queued') - (OLD.status = 'queued'),
		running = running + (NEW.status = 'running') - (OLD.status = 'running')
	WHERE id = 1;
END;

CREATE TRIGGER batch_job_stat_delete AFTER DELETE ON batch_job BEGIN
	UPDATE batch_stat SET
		bytes = bytes - OLD.bytes,
		queued = queued - (OLD.status = 'queued'),
		running = running - (OLD.status = 'running')
	WHERE id = 1;
END;
