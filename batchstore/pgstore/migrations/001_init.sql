-- 001_init: jobs, targets, heartbeats and the byte counter.
--
-- {s} is the store's schema, quoted (see Options.Schema). Statuses are the
-- batch package's strings. Times are timestamptz, written by the database's
-- clock or the runner's (see Options.RunnerClock). Strings that come from
-- outside (target URLs, errors, hints) are bytea: stored byte for byte, NUL
-- and invalid UTF-8 included, which text would refuse.

-- One row per job. seq is the internal key targets reference; id is the
-- runner's job id. A job is held by runner while its target in_flight runs
-- (in_flight is -1 and runner '' otherwise). The progress counters and the
-- bytes are written by every drain write; none of them is indexed, so those
-- updates are HOT and fillfactor leaves room for them.
CREATE TABLE {s}.job (
	seq               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	id                text        NOT NULL UNIQUE,
	caller            text        NOT NULL,
	caller_class      text        NOT NULL DEFAULT '',
	caller_restricted boolean     NOT NULL DEFAULT false,
	idem_key          text        NOT NULL,
	status            text        NOT NULL CHECK (status IN ('queued', 'running', 'done', 'partial', 'failed', 'cancelled')),
	error             text        NOT NULL DEFAULT '',
	targets_total     integer     NOT NULL CHECK (targets_total >= 0),
	targets_ok        integer     NOT NULL DEFAULT 0,
	targets_failed    integer     NOT NULL DEFAULT 0,
	created_at        timestamptz NOT NULL,
	lease             timestamptz NOT NULL,
	finished_at       timestamptz,
	bytes             bigint      NOT NULL DEFAULT 0, -- result and error bytes of its targets
	runner            text        NOT NULL DEFAULT '',
	in_flight         integer     NOT NULL DEFAULT -1,
	CHECK ((runner = '') = (in_flight < 0))
) WITH (fillfactor = 80);

-- Idempotent reuse: a caller's jobs by key.
CREATE INDEX job_reuse ON {s}.job (caller, idem_key);
-- List: a caller's jobs, newest first.
CREATE INDEX job_list ON {s}.job (caller, created_at DESC, seq DESC);
-- The caps and the live counts: live jobs only.
CREATE INDEX job_live ON {s}.job (caller) WHERE status IN ('queued', 'running');
-- Claim: the oldest queued job.
CREATE INDEX job_queue ON {s}.job (created_at, seq) WHERE status = 'queued';
-- The reaper and the bytes not yet in the counter: held jobs only.
CREATE INDEX job_held ON {s}.job (runner) WHERE runner <> '';
-- Sweep and eviction: released finished jobs by lease. A live job's lease
-- bumps never touch it.
CREATE INDEX job_expiry ON {s}.job (lease, seq) WHERE status NOT IN ('queued', 'running') AND runner = '';

-- One row per target. A status summary reads these rows without result,
-- which TOAST keeps out of line once it passes about 2 KB, so a summary
-- costs the same whatever the results weigh. A row is pending until its
-- target is stored; the target in flight is the one job.in_flight names
-- (reads show it as running), so a drain write changes one target row, and
-- none of its indexed columns: a HOT update.
CREATE TABLE {s}.target (
	job_seq bigint  NOT NULL REFERENCES {s}.job (seq) ON DELETE CASCADE,
	idx     integer NOT NULL,
	url     bytea   NOT NULL,
	options text    NOT NULL DEFAULT '', -- JSON of batch.Options; '' when zero
	status  text    NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'done', 'failed')),
	error   bytea   NOT NULL DEFAULT '',
	hint    bytea   NOT NULL DEFAULT '',
	outcome text    NOT NULL DEFAULT '',
	result  bytea, -- the envelope of a done target
	PRIMARY KEY (job_seq, idx)
) WITH (fillfactor = 70);

-- Result envelopes compress better and far faster with lz4 than with pglz
-- (which often gives up on JSON and stores it as it is). A server built
-- without lz4 keeps pglz.
DO $$
BEGIN
	EXECUTE 'ALTER TABLE {s}.target ALTER COLUMN result SET COMPRESSION lz4';
EXCEPTION WHEN feature_not_supported THEN
	NULL;
END
$$;

-- One heartbeat row per runner.
CREATE TABLE {s}.runner (
	id        text        PRIMARY KEY,
	heartbeat timestamptz NOT NULL
) WITH (fillfactor = 50);

-- The byte counter: the bytes of every job that is not held, kept exact by
-- the statements that release, sweep and evict jobs. A held job's bytes,
-- which every drain write moves, are added from the held index, so no
-- target write touches this row. It can be re-derived at any time:
-- sum(job.bytes) WHERE runner = ''.
CREATE TABLE {s}.stat (
	id    integer PRIMARY KEY CHECK (id = 1),
	bytes bigint  NOT NULL
);
INSERT INTO {s}.stat (id, bytes) VALUES (1, 0);
