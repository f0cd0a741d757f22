package pgstore

import (
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// hookReady is the drain statements' CTE that makes the webhook row of a
// job with per-target events ($1; j its updated row) know target $3 is
// finished, and due at the clock ($11) if it was idle (see
// migrations/016). For a job without them the key is NULL: it reads no
// row, not even an index page.
var hookReady = `w AS (
			UPDATE {s}.webhook SET ready = greatest(webhook.ready, $3 + 1),
				due_since = CASE WHEN webhook.runner = '' AND webhook.due_at = 'infinity' THEN ` + clock("11") + `
					ELSE webhook.due_since END,
				due_at = CASE WHEN webhook.runner = '' AND webhook.due_at = 'infinity' THEN ` + clock("11") + `
					ELSE webhook.due_at END
			WHERE webhook.job_id = (SELECT $1::text FROM j WHERE j.webhook_events & 2 <> 0)
		)`

// deadlineBytes is what an expired target's error adds to its job's bytes.
var deadlineBytes = strconv.Itoa(len(batchdriver.DeadlineReason))

// The store's SQL. {s} stands for the schema, quoted as an identifier, so
// every statement names its tables in full and none depends on the
// connection's search_path (which a pool or a bouncer may not keep).
// A parameter written {now} is the clock: the
// call's Now, or NULL (and so the transaction's now()) for a call without
// one.
//
// Live and finished are spelled exactly as the partial indexes spell them:
// the planner uses a partial index only when the query implies its
// predicate.
const (
	whereLive     = `status IN ('queued', 'running')`
	whereFinished = `status NOT IN ('queued', 'running')`
	whereHeld     = `runner <> ''`
	whereReleased = `runner = ''`
)

// jobCols are the columns scanJob reads, in order, from job j.
const jobCols = `j.id, j.caller, j.caller_class, j.caller_restricted, j.idem_key,
	j.status, j.error, j.targets_total, j.targets_ok + j.targets_failed,
	j.created_at, j.lease, j.finished_at, j.bytes, j.runner, j.retry_of, j.retry_idx, coalesce(j.webhook, ''),
	j.trace_parent, j.trace_state, j.deadline, j.handed_on, j.metadata::text, j.custom_ids, j.skipped, coalesce(j.webhook_events, 0)`

// targetCols are the columns scanTarget reads from target t of job j; the
// results variants add t.result. A target's row stores pending, done or
// failed; the target in flight is the one job.in_flight names, and it
// reads as running, so that starting a target writes no target row.
const targetCols = `t.idx, t.url, t.options, CASE WHEN t.idx = j.in_flight THEN 'running' ELSE t.status END,
	t.error, t.hint, t.outcome, t.attempts`

// clock is the SQL of the clock parameter $n: see {now}.
func clock(n string) string { return `coalesce($` + n + `::timestamptz, now())` }

// nextTarget is the SQL of the target that follows target after in the
// drain of the job whose columns are named with prefix p ("" or "j."):
// after + 1, unless targets were skipped at create (see migrations/015),
// then the next one not skipped; targets_total when none is left. A job
// without skipped targets never evaluates the subquery.
func nextTarget(p, after string) string {
	return `CASE WHEN ` + p + `skipped IS NULL THEN ` + after + ` + 1
		ELSE coalesce((SELECT min(i) FROM generate_series(` + after + ` + 1, ` + p + `targets_total - 1) AS i
			WHERE i <> ALL (` + p + `skipped)), ` + p + `targets_total) END`
}

// sqlTemplates are the statements with placeholders; render fills them in
// for one schema.
var sqlTemplates = queries{
	// Create, batch 1 (see create.go): the caller's lock, reuse, the caller's
	// live count; batch 2: the global lock (shared far from the cap), then
	// the insert if the live jobs, counted after the lock was granted, are
	// under the cap. $1 of reuse is the clock.
	lockXact:       `SELECT pg_advisory_xact_lock($1)`,
	lockXactShared: `SELECT pg_advisory_xact_lock_shared($1)`,
	reuse: `UPDATE {s}.job j SET lease = ` + clock("1") + `
		WHERE j.seq = (SELECT r.seq FROM {s}.job r
			WHERE r.caller = $2 AND r.idem_key = $3 AND r.status NOT IN ('cancelled', 'failed')
			  AND r.lease > ` + clock("1") + ` - $4::interval
			ORDER BY r.seq DESC LIMIT 1)
		  AND j.status NOT IN ('cancelled', 'failed') AND j.lease > ` + clock("1") + ` - $4::interval
		RETURNING ` + jobCols,
	callerLive: `SELECT count(*) FROM (SELECT 1 FROM {s}.job WHERE caller = $1 AND ` + whereLive + ` LIMIT $2) live`,
	// The skipped targets ($19 their idx, $20 errors, $21 hints, $22
	// outcomes; NULL for none) are stored failed, counted in the job's
	// row ($23 their bytes) and, as the job is released, in the counter
	// (see migrations/015).
	//
	// $25 is what the live jobs must stay under the cap by: 0 under the
	// exclusive lock; on the shared path (see create.go), the server's
	// max_connections, written -1, or a test's stand-in for it.
	insert: `WITH live AS (
			SELECT count(*) AS n FROM (SELECT 1 FROM {s}.job WHERE ` + whereLive + ` LIMIT $1) l
		), j AS (
			INSERT INTO {s}.job (id, caller, caller_class, caller_restricted, idem_key, status, targets_total, created_at, lease,
				webhook, retry_of, retry_idx, trace_parent, trace_state, deadline, metadata, custom_ids,
				skipped, targets_failed, bytes, webhook_events)
			SELECT $2, $3, $4, $5, $6, 'queued', $7, ` + clock("8") + `, ` + clock("8") + `, $11, $12, $13::integer[], $14, $15, $16::timestamptz,
				$17::jsonb, $18::text[], $19::integer[], coalesce(cardinality($19::integer[]), 0), $23::bigint, $24::smallint
			FROM live WHERE live.n < $1 - CASE WHEN $25::integer < 0 THEN current_setting('max_connections')::integer ELSE $25 END
			RETURNING seq, created_at, lease, bytes
		), t AS (
			INSERT INTO {s}.target (job_seq, idx, url, options, status, error, hint, outcome)
			SELECT j.seq, u.i - 1, u.url, u.options, CASE WHEN k.idx IS NULL THEN 'pending' ELSE 'failed' END,
				coalesce(k.error, ''), coalesce(k.hint, ''), coalesce(k.outcome, '')
			FROM j, unnest($9::bytea[], $10::text[]) WITH ORDINALITY AS u (url, options, i)
				LEFT JOIN unnest($19::integer[], $20::bytea[], $21::bytea[], $22::text[]) AS k (idx, error, hint, outcome)
				ON k.idx = u.i - 1
		), c AS (
			UPDATE {s}.stat SET bytes = stat.bytes + j.bytes FROM j WHERE stat.id = 1 AND j.bytes <> 0
		), w AS (
			INSERT INTO {s}.webhook (job_id, caller, url, status, error, targets_total, targets_ok, targets_failed,
				created_at, finished_at, lease, due_since, due_at, deadline, metadata, events)
			SELECT $2, $3, $11, '', '', $7, 0, 0, j.created_at, j.created_at, j.created_at, j.created_at, 'infinity',
				$16::timestamptz, $17::jsonb, $24::smallint
			FROM j WHERE $11 IS NOT NULL AND $24::smallint & 2 <> 0
		)
		SELECT created_at, lease FROM j`,

	// Claim: the oldest queued job, held with its first pending target in
	// flight (target 0, unless the job was handed back: targets finish in
	// idx order, so the finished ones are the first targets_ok +
	// targets_failed; a job with skipped targets reads it from its
	// targets), and the runner's heartbeat, in one statement. A
	// handed-back job's bytes leave the counter again (held: see stats). The queued count is read in the
	// statement's snapshot, which still has the claimed job queued.
	claim: `WITH next AS (
			SELECT seq FROM {s}.job WHERE status = 'queued' ORDER BY created_at, seq LIMIT 1 FOR UPDATE SKIP LOCKED
		), j AS (
			UPDATE {s}.job SET status = 'running', runner = $1, in_flight = CASE WHEN skipped IS NULL
				THEN targets_ok + targets_failed
				ELSE (SELECT min(t.idx) FROM {s}.target t WHERE t.job_seq = job.seq AND t.status = 'pending') END
			FROM next WHERE job.seq = next.seq
			RETURNING job.*
		), held AS (
			UPDATE {s}.stat SET bytes = stat.bytes - (SELECT bytes FROM j)
			WHERE stat.id = 1 AND EXISTS (SELECT 1 FROM j WHERE bytes <> 0)
		), beat AS (
			INSERT INTO {s}.runner AS r (id, heartbeat) SELECT $1, ` + clock("2") + ` FROM j
			ON CONFLICT (id) DO UPDATE SET heartbeat = greatest(r.heartbeat, excluded.heartbeat)
		)
		SELECT ` + jobCols + `, t.idx, t.url, t.options, t.status, j.in_flight,
			(SELECT count(*) FROM {s}.job WHERE status = 'queued') - 1
		FROM j JOIN {s}.target t ON t.job_seq = j.seq ORDER BY t.idx`,
	anyQueued: `SELECT EXISTS (SELECT 1 FROM {s}.job WHERE status = 'queued')`,

	// FinishTarget: one statement stores target $3, and in the job's row
	// starts the next target or releases the job, moving a released job's
	// bytes into the counter: two rows, as a raw write of a result and a
	// counter would change. The job's row is the fence: it matches only
	// while $2 holds the job with $3 in flight, and under READ COMMITTED a
	// concurrent reap or cancel that committed first is seen when the row
	// lock is granted. $12 is the lease grain. There are two statements:
	//
	// step, the write of a target that starts the next one of a running
	// job: the common case, and so the statement every target but a job's
	// last runs. It names only the columns a step changes, none of them
	// status or runner, so that neither job trigger (see 003 and 004) is
	// considered for it, and it touches neither counter: the job stays
	// held, its bytes are not yet the counters'. A write it does not match
	// (the last target, a job cancelled or no longer held) changes nothing
	// and runs as finish.
	step: `WITH j AS (
			UPDATE {s}.job SET
				targets_ok = targets_ok + $4,
				targets_failed = targets_failed + $5,
				bytes = bytes + $6,
				in_flight = ` + nextTarget("", "$3") + `,
				lease = CASE WHEN lease > ` + clock("11") + ` - $12::interval THEN lease
					ELSE greatest(lease, ` + clock("11") + `) END
			WHERE id = $1 AND runner = $2 AND in_flight = $3 AND $3 >= 0
				AND status = 'running' AND ` + nextTarget("", "$3") + ` < targets_total AND NOT $14::boolean
			RETURNING seq, in_flight, webhook_events
		), ` + hookReady + `
		UPDATE {s}.target SET status = $7, error = $8, hint = $9, outcome = $10, result = $13
		FROM j WHERE target.job_seq = j.seq AND target.idx = $3
		RETURNING j.in_flight`,
	// finish, any drain write: the step's, or the one that gives the job
	// its final status and releases it (the last target, a cancelled job's
	// target in flight), moving its bytes into the counter's row 1.
	//
	// $14 is the deadline (FinishParams.Expire): a running job starts no
	// next target, its pending targets (every one after $3 that was not
	// skipped) fail expired in x, and it ends with the deadline as its
	// error. pre locks the job's row first, so that it reads the row the
	// update changes, and reads the next target there (nx).
	finish: `WITH pre AS (
			SELECT seq, CASE WHEN $14::boolean AND status = 'running'
					THEN targets_total - $3 - 1 - (SELECT count(*) FROM unnest(skipped) AS k WHERE k > $3)::integer
					ELSE 0 END AS n,
				` + nextTarget("", "$3") + ` AS nx
			FROM {s}.job WHERE id = $1 AND runner = $2 AND in_flight = $3 AND $3 >= 0 FOR UPDATE
		), j AS (
			UPDATE {s}.job SET
				targets_ok = targets_ok + $4,
				targets_failed = targets_failed + $5 + pre.n,
				bytes = bytes + $6 + pre.n * ` + deadlineBytes + `,
				error = CASE WHEN pre.n > 0 THEN '` + batchdriver.DeadlineReason + `' ELSE error END,
				in_flight = CASE WHEN status = 'running' AND pre.nx < targets_total AND NOT $14 THEN pre.nx ELSE -1 END,
				runner = CASE WHEN status = 'running' AND pre.nx < targets_total AND NOT $14 THEN runner ELSE '' END,
				status = CASE
					WHEN status <> 'running' OR (pre.nx < targets_total AND NOT $14) THEN status
					WHEN targets_failed + $5 + pre.n = 0 AND targets_ok + $4 > 0 THEN 'done'
					WHEN targets_ok + $4 = 0 THEN 'failed'
					ELSE 'partial' END,
				finished_at = CASE WHEN status = 'running' AND pre.nx < targets_total AND NOT $14 THEN finished_at
					ELSE coalesce(finished_at, ` + clock("11") + `) END,
				lease = CASE WHEN status = 'running' AND pre.nx < targets_total AND NOT $14
					AND lease > ` + clock("11") + ` - $12::interval THEN lease
					ELSE greatest(lease, ` + clock("11") + `) END
			FROM pre WHERE job.seq = pre.seq AND id = $1 AND runner = $2 AND in_flight = $3 AND $3 >= 0
			RETURNING job.seq, status, in_flight, bytes, runner, webhook_events
		), ` + hookReady + `, x AS (
			UPDATE {s}.target SET status = 'failed', outcome = '` + string(batchdriver.OutcomeExpired) + `',
				error = convert_to('` + batchdriver.DeadlineReason + `', 'UTF8'), hint = '', result = NULL
			FROM pre WHERE target.job_seq = pre.seq AND pre.n > 0 AND target.idx > $3 AND target.status = 'pending'
		), t AS (
			UPDATE {s}.target SET status = $7, error = $8, hint = $9, outcome = $10, result = $13
			FROM j WHERE target.job_seq = j.seq AND target.idx = $3
		), c AS (
			UPDATE {s}.stat SET bytes = bytes + (SELECT bytes FROM j WHERE runner = '')
			WHERE id = 1 AND EXISTS (SELECT 1 FROM j WHERE runner = '')
		)
		SELECT status, in_flight FROM j`,
	// A drain write that matched nothing: why.
	finishMissed: `SELECT j.runner, j.in_flight, j.status, t.status
		FROM {s}.job j LEFT JOIN {s}.target t ON t.job_seq = j.seq AND t.idx = $2
		WHERE j.id = $1`,

	// Expire (see expire.go): the queued jobs whose deadline is at or
	// before the clock ($1), locked in seq order (a claim holding one is
	// skipped: its drain ends it); their targets, every one pending, fail
	// expired; each job ends failed (partial when a target of it is done,
	// e.g. one handed back) with the deadline as its error. The update names
	// runner, so that the caller's counter follows the new bytes (see
	// migrations/008), and moves them into the store's counter.
	expire: `WITH l AS (
			SELECT seq FROM {s}.job WHERE status = 'queued' AND deadline <= ` + clock("1") + `
			ORDER BY seq FOR UPDATE SKIP LOCKED
		), x AS (
			UPDATE {s}.target SET status = 'failed', outcome = '` + string(batchdriver.OutcomeExpired) + `',
				error = convert_to('` + batchdriver.DeadlineReason + `', 'UTF8'), hint = '', result = NULL
			FROM l WHERE target.job_seq = l.seq AND target.status = 'pending'
			RETURNING target.job_seq
		), n AS (
			SELECT job_seq AS seq, count(*)::integer AS n FROM x GROUP BY job_seq
		), j AS (
			UPDATE {s}.job SET
				targets_failed = targets_failed + n.n,
				bytes = bytes + n.n * ` + deadlineBytes + `,
				error = '` + batchdriver.DeadlineReason + `',
				status = CASE WHEN targets_ok = 0 THEN 'failed' ELSE 'partial' END,
				finished_at = coalesce(finished_at, ` + clock("1") + `),
				lease = greatest(lease, ` + clock("1") + `),
				runner = '', in_flight = -1
			FROM n WHERE job.seq = n.seq
			RETURNING job.id, job.caller, job.status, n.n, job.webhook IS NOT NULL AS webhook, n.n * ` + deadlineBytes + ` AS added
		), c AS (
			UPDATE {s}.stat SET bytes = stat.bytes + (SELECT sum(added) FROM j)
			WHERE stat.id = 1 AND EXISTS (SELECT 1 FROM j)
		)
		SELECT id, caller, status, n, webhook FROM j`,
	// anyExpired is Expire's fast path, without a lock.
	anyExpired: `SELECT EXISTS (SELECT 1 FROM {s}.job WHERE status = 'queued' AND deadline <= ` + clock("1") + `)`,

	// Cancel: the caller's live job; the second column tells an unknown job
	// (NULL) from a finished one.
	cancel: `WITH c AS (
			UPDATE {s}.job SET status = 'cancelled', finished_at = ` + clock("3") + `, lease = ` + clock("3") + `
			WHERE id = $1 AND caller = $2 AND ` + whereLive + ` RETURNING seq
		)
		SELECT (SELECT count(*) FROM c), (SELECT status FROM {s}.job WHERE id = $1 AND caller = $2)`,

	// Reads, owner scoped.
	getJob: `SELECT ` + jobCols + ` FROM {s}.job j WHERE j.id = $1 AND j.caller = $2`,
	get: `SELECT ` + jobCols + `, ` + targetCols + `
		FROM {s}.job j LEFT JOIN {s}.target t ON t.job_seq = j.seq
		WHERE j.id = $1 AND j.caller = $2 ORDER BY t.idx`,
	getResults: `SELECT ` + jobCols + `, ` + targetCols + `, t.result
		FROM {s}.job j LEFT JOIN {s}.target t ON t.job_seq = j.seq
		WHERE j.id = $1 AND j.caller = $2 ORDER BY t.idx`,
	getTarget: `SELECT ` + jobCols + `, ` + targetCols + `, t.result
		FROM {s}.job j LEFT JOIN {s}.target t ON t.job_seq = j.seq AND t.idx = $3
		WHERE j.id = $1 AND j.caller = $2`,
	// $3, when not NULL, is a label search: the metadata pairs every job
	// listed holds.
	list: `SELECT ` + jobCols + ` FROM {s}.job j WHERE j.caller = $1
		  AND ($3::jsonb IS NULL OR j.metadata @> $3::jsonb)
		ORDER BY j.created_at DESC, j.seq DESC LIMIT $2`,
	// Touch writes only when the lease moves by a grain ($4) or more.
	touch: `WITH j AS (
			SELECT seq FROM {s}.job WHERE id = $1 AND caller = $2
		), u AS (
			UPDATE {s}.job SET lease = ` + clock("3") + `
			FROM j WHERE job.seq = j.seq AND job.lease <= ` + clock("3") + ` - $4::interval
		)
		SELECT count(*) FROM j`,

	heartbeat: `INSERT INTO {s}.runner AS r (id, heartbeat) VALUES ($1, ` + clock("2") + `)
		ON CONFLICT (id) DO UPDATE SET heartbeat = greatest(r.heartbeat, excluded.heartbeat)`,

	// Reap (see gc.go): which runners it forgets, then the jobs, then their
	// targets in flight, each a statement of one transaction.
	// With their heartbeats go their host slots (see hostgate.go).
	forgetAll:    `WITH f AS (DELETE FROM {s}.runner) DELETE FROM {s}.host_slot`,
	forgetRunner: `WITH f AS (DELETE FROM {s}.runner WHERE id = $1) DELETE FROM {s}.host_slot WHERE runner = $1`,
	forgetStale: `WITH f AS (DELETE FROM {s}.runner WHERE heartbeat < coalesce($1::timestamptz, now() - $2::interval) RETURNING id)
		DELETE FROM {s}.host_slot WHERE runner IN (SELECT id FROM f)`,
	// reapJobs has {sel} for the selection (see reapSelection); $1 is the
	// clock, $2 the reason, $3 its length.
	// The selected rows are locked in seq order first, so that reaps on
	// several nodes (their sweepers find the same stale runner) cannot
	// deadlock; the update re-checks each row once it holds its lock.
	reapJobs: `WITH l AS (
			SELECT seq, in_flight FROM {s}.job WHERE seq = ANY (ARRAY ({sel})) ORDER BY seq FOR UPDATE
		), r AS (
			UPDATE {s}.job j SET
				status = CASE WHEN j.` + whereLive + ` THEN 'failed' ELSE j.status END,
				error = CASE WHEN j.` + whereLive + ` THEN $2 ELSE j.error END,
				finished_at = CASE WHEN j.` + whereLive + ` THEN ` + clock("1") + ` ELSE j.finished_at END,
				lease = CASE WHEN j.` + whereLive + ` THEN ` + clock("1") + ` ELSE j.lease END,
				targets_failed = j.targets_failed + (j.in_flight >= 0)::integer,
				bytes = j.bytes + CASE WHEN j.in_flight >= 0 THEN $3 ELSE 0 END,
				runner = '', in_flight = -1
			FROM l WHERE j.seq = l.seq AND (j.` + whereLive + ` OR j.` + whereHeld + `)
			RETURNING j.seq, j.id, j.status, j.bytes, l.in_flight
		), c AS (
			UPDATE {s}.stat SET bytes = stat.bytes + (SELECT coalesce(sum(bytes), 0) FROM r WHERE in_flight >= 0)
			WHERE stat.id = 1 AND EXISTS (SELECT 1 FROM r)
		)
		SELECT seq, id, status = 'failed', in_flight FROM r`,
	// reapHandBack is reapJobs for ReapParams.HandBack, with {repeat} for
	// RepeatInFlight (true or false): a held job that is running and has a
	// target left goes back to queued; any other held job is released as
	// its last drain write would release it (the target in flight, unless
	// repeated, counts failed: a job that was running ends failed or
	// partial). The target in flight, unless repeated, is failed by
	// reapTargets; a repeated one was never written (a target's row says
	// pending until it is stored). A job no runner holds is left as it is.
	// Every job it releases moves its bytes into the counter, as a release
	// does, and the claim takes them out again. The last column tells the
	// jobs that were live. $2, the reason, is the error reapTargets writes;
	// l names it only so that the statement has a type for it.
	reapHandBack: `WITH l AS (
			SELECT seq, in_flight, status, $2::text AS reason FROM {s}.job WHERE seq = ANY (ARRAY ({sel})) ORDER BY seq FOR UPDATE
		), r AS (
			UPDATE {s}.job j SET
				status = CASE WHEN j.status <> 'running' THEN j.status
					WHEN {repeat} OR ` + nextTarget("j.", "j.in_flight") + ` < j.targets_total THEN 'queued'
					WHEN j.targets_ok = 0 THEN 'failed'
					ELSE 'partial' END,
				finished_at = CASE WHEN j.status = 'running' AND ({repeat} OR ` + nextTarget("j.", "j.in_flight") + ` < j.targets_total)
					THEN j.finished_at ELSE coalesce(j.finished_at, ` + clock("1") + `) END,
				lease = greatest(j.lease, ` + clock("1") + `),
				targets_failed = j.targets_failed + (NOT {repeat})::integer,
				bytes = j.bytes + CASE WHEN {repeat} THEN 0 ELSE $3 END,
				handed_on = j.handed_on + (j.status = 'running' AND ({repeat} OR ` + nextTarget("j.", "j.in_flight") + ` < j.targets_total))::integer,
				runner = '', in_flight = -1
			FROM l WHERE j.seq = l.seq AND j.` + whereHeld + `
			RETURNING j.seq, j.id, l.status IN ('queued', 'running') AS live, j.bytes, l.in_flight
		), c AS (
			UPDATE {s}.stat SET bytes = stat.bytes + (SELECT sum(bytes) FROM r)
			WHERE stat.id = 1 AND EXISTS (SELECT 1 FROM r)
		)
		SELECT seq, id, live, in_flight FROM r`,
	reapLive:    `SELECT seq FROM {s}.job WHERE ` + whereLive + ` UNION ALL SELECT seq FROM {s}.job WHERE ` + whereHeld,
	reapRunner:  `SELECT seq FROM {s}.job WHERE ` + whereHeld + ` AND runner = $4`,
	reapOrphans: `SELECT seq FROM {s}.job h WHERE h.` + whereHeld + ` AND NOT EXISTS (SELECT 1 FROM {s}.runner r WHERE r.id = h.runner)`,
	// reapRepeat counts one more attempt of the targets a hand-back with
	// RepeatInFlight put back to pending: pairs of job seq ($1) and idx
	// ($2).
	reapRepeat: `UPDATE {s}.target t SET attempts = t.attempts + 1
		FROM unnest($1::bigint[], $2::integer[]) AS f (seq, idx)
		WHERE t.job_seq = f.seq AND t.idx = f.idx`,
	// reapTargets fails the targets that were in flight: pairs of job seq
	// ($1) and idx ($2).
	reapTargets: `UPDATE {s}.target t SET status = 'failed', error = $3, hint = '', outcome = $4, result = NULL
		FROM unnest($1::bigint[], $2::integer[]) AS f (seq, idx)
		WHERE t.job_seq = f.seq AND t.idx = f.idx`,

	// Sweep and Evict (see gc.go) run under the locks of the counter's
	// rows, taken in id order, so that concurrent passes decide one after
	// the other and no release commits meanwhile; their candidates skip
	// rows another transaction has locked (a touch moving the lease). The
	// rows' sum is the counter: every statement here moves row 1, and rows
	// 2 to 16 (migrations/009) hold what builds that spread releases over
	// them added there, and what such a build still running during an
	// upgrade adds.
	lockStat: `SELECT bytes FROM {s}.stat ORDER BY id FOR UPDATE`,
	sweep: `WITH d AS (
			DELETE FROM {s}.job WHERE seq = ANY (ARRAY (
				SELECT seq FROM {s}.job
				WHERE ` + whereFinished + ` AND ` + whereReleased + ` AND lease < coalesce($1::timestamptz, now() - $2::interval)
				ORDER BY lease, seq LIMIT $3 FOR UPDATE SKIP LOCKED))
			RETURNING bytes
		), c AS (
			UPDATE {s}.stat SET bytes = stat.bytes - (SELECT sum(bytes) FROM d)
			WHERE stat.id = 1 AND EXISTS (SELECT 1 FROM d)
		)
		SELECT count(*) FROM d`,
	// The passes' fast paths, without a lock: nothing to sweep, or the
	// store under its budget.
	// (Not EXISTS: the planner expects an EXISTS to find a row early in a
	// sequential scan; ordering by the index finds none at once.)
	oldestExpired: `SELECT seq FROM {s}.job WHERE ` + whereFinished + ` AND ` + whereReleased + `
		AND lease < coalesce($1::timestamptz, now() - $2::interval) ORDER BY lease, seq LIMIT 1`,
	totalBytes: `SELECT (SELECT sum(bytes) FROM {s}.stat) + (SELECT coalesce(sum(bytes), 0) FROM {s}.job WHERE ` + whereHeld + `)`,
	// The eviction's picks (see evict.go): the held jobs' bytes by caller
	// ($1 of evictPick with their bytes $2), the two callers holding the
	// most bytes among those with released bytes, the callers in $3 left
	// out (names in byte order for equals), and a caller's oldest
	// released finished jobs.
	heldByCaller: `SELECT caller, bytes FROM {s}.job WHERE ` + whereHeld,
	// Folding the callers' deltas (010_caller_bytes_log) into their rows,
	// under the counter's locks: the sums, in caller order, then the rows
	// that reached zero.
	foldCallers: `WITH d AS (
			DELETE FROM {s}.caller_bytes_log RETURNING caller, delta
		)
		INSERT INTO {s}.caller_bytes AS c (caller, bytes)
		SELECT caller, sum(delta) FROM d GROUP BY caller HAVING sum(delta) <> 0 ORDER BY caller
		ON CONFLICT (caller) DO UPDATE SET bytes = c.bytes + excluded.bytes`,
	dropZeroCallers: `DELETE FROM {s}.caller_bytes WHERE bytes = 0`,
	anyCallerDeltas: `SELECT EXISTS (SELECT 1 FROM {s}.caller_bytes_log)`,
	evictPick: `WITH h AS (
			SELECT * FROM unnest($1::text[], $2::bigint[]) AS h (caller, bytes)
		), c AS (
			(SELECT caller, bytes FROM {s}.caller_bytes WHERE caller <> ALL ($3::text[])
			 ORDER BY bytes DESC, caller COLLATE "C" LIMIT 2)
			UNION
			SELECT caller, bytes FROM {s}.caller_bytes WHERE caller = ANY ($1::text[]) AND caller <> ALL ($3::text[])
		)
		SELECT c.caller, c.bytes + coalesce(h.bytes, 0) AS held FROM c LEFT JOIN h ON h.caller = c.caller
		ORDER BY held DESC, c.caller COLLATE "C" LIMIT 2`,
	// The callers holding bytes, for the share: the caller_bytes rows (one
	// per caller with released bytes, none at zero once folded: a read of
	// one row per caller, not per job) and the callers of held bytes ($1,
	// distinct) without one.
	evictHolders: `SELECT (SELECT count(*) FROM {s}.caller_bytes) + cardinality($1::text[])
		- (SELECT count(*) FROM {s}.caller_bytes WHERE caller = ANY ($1::text[]))`,
	evictOldest: `SELECT seq, bytes FROM {s}.job WHERE caller = $1 AND ` + whereFinished + ` AND ` + whereReleased + `
		ORDER BY lease, seq LIMIT $2 FOR UPDATE SKIP LOCKED`,
	evict: `WITH d AS (
			DELETE FROM {s}.job WHERE seq = ANY($1) RETURNING bytes
		)
		UPDATE {s}.stat SET bytes = stat.bytes - (SELECT coalesce(sum(bytes), 0) FROM d) WHERE id = 1`,

	stats: `SELECT count(*) FILTER (WHERE status = 'queued'), count(*) FILTER (WHERE status = 'running'),
			(SELECT sum(bytes) FROM {s}.stat) + (SELECT coalesce(sum(bytes), 0) FROM {s}.job WHERE ` + whereHeld + `)
		FROM {s}.job WHERE ` + whereLive,

	// The webhook outbox (see webhook.go and migrations/003, 004). $1 is
	// the clock. The claim runs under the outbox's advisory lock (see
	// webhook.go): claims on all nodes run one after the other, each sees
	// the claims committed before it, and none can return an event another
	// returned while its lease holds, so it needs no row locks of its own
	// (an update that waits for a finish's row lock re-checks due_at). It
	// ranks each caller's due events oldest due first and takes them by
	// rank, so that every caller's first event comes before anyone's
	// second (round-robin); it leaves out the events beyond a caller's cap
	// ($5; 0 for none), counting its events under an unexpired claim
	// (busy), and moves each one's due_at past its lease ($4). The callers
	// are found by a skip scan of webhook_caller (one probe per caller) and
	// each caller's events read from it, at most its room under the cap,
	// so a caller's backlog costs a claim nothing.
	hookClaim: `WITH RECURSIVE callers (caller) AS (
			(SELECT caller FROM {s}.webhook ORDER BY caller LIMIT 1)
			UNION ALL
			SELECT (SELECT w.caller FROM {s}.webhook w WHERE w.caller > c.caller ORDER BY w.caller LIMIT 1)
			FROM callers c WHERE c.caller IS NOT NULL
		), busy AS (
			SELECT caller, count(*) AS n FROM {s}.webhook WHERE runner <> '' AND due_at > ` + clock("1") + ` GROUP BY caller
		), ranked AS (
			SELECT l.job_id, l.due_at, l.rk FROM callers c LEFT JOIN busy b ON b.caller = c.caller
			CROSS JOIN LATERAL (
				SELECT w.job_id, w.due_at, row_number() OVER (ORDER BY w.due_at, w.job_id) AS rk
				FROM {s}.webhook w WHERE w.caller = c.caller AND w.due_at <= ` + clock("1") + `
				ORDER BY w.due_at, w.job_id
				LIMIT CASE WHEN $5::integer > 0 THEN greatest($5::integer - coalesce(b.n, 0), 0) END
			) l
		)
		UPDATE {s}.webhook w SET runner = $3, attempts = w.attempts + 1, due_at = ` + clock("1") + ` + $4::interval,
			upto = CASE WHEN w.events & 2 = 0 OR w.upto > w.sent THEN w.upto ELSE least(w.ready, w.sent + $6) END
		WHERE w.job_id = ANY (ARRAY (SELECT job_id FROM ranked ORDER BY rk, due_at, job_id LIMIT $2))
		  AND w.due_at <= ` + clock("1") + `
		RETURNING w.job_id, w.url, w.status, w.error, w.targets_total, w.targets_ok, w.targets_failed,
			w.created_at, w.finished_at, w.lease, w.attempts,
			(extract(epoch FROM ` + clock("1") + ` - w.due_since) * 1000000)::bigint, w.caller, w.deadline, w.metadata::text,
			w.events, w.sent, w.upto, w.due_since`,
	// The targets of the per-target events a claim returned, read after
	// its commit (see ClaimWebhooks): pairs of job id ($1) and range
	// [$2, $3), with their custom ids.
	hookTargets: `SELECT e.job_id, t.idx, t.status, t.outcome, coalesce(j.custom_ids[t.idx + 1], '')
		FROM unnest($1::text[], $2::integer[], $3::integer[]) AS e (job_id, sent, upto)
		JOIN {s}.job j ON j.id = e.job_id
		JOIN {s}.target t ON t.job_seq = j.seq AND t.idx >= e.sent AND t.idx < e.upto AND t.status IN ('done', 'failed')
		ORDER BY e.job_id, t.idx`,
	// A caller's pending events for Create's cap: its jobs with a webhook
	// that are live or held, and the rows of its other jobs (a row whose
	// status is '' is a live job's: see migrations/016).
	hookPending: `SELECT (SELECT count(*) FROM {s}.webhook WHERE caller = $1 AND status <> '')
		+ (SELECT count(*) FROM {s}.job WHERE caller = $1
			AND webhook IS NOT NULL AND (status IN ('queued', 'running') OR runner <> ''))`,
	// FinishWebhook, fenced by the claim's runner, attempt and cursor ($1
	// to $4): the drop of a job's events, a retry, and a delivery, which
	// moves a row with per-target events on to its next event (due at once
	// when it has one: more targets finished, or the completion) or
	// deletes it after its last event. The delivery's two statements act
	// on disjoint conditions, each re-checked on the row's latest version,
	// so one at most changes the row. It returns the rows changed.
	hookDone: `DELETE FROM {s}.webhook WHERE job_id = $1 AND runner = $2 AND attempts = $3 AND sent = $4`,
	hookRetry: `UPDATE {s}.webhook SET runner = '', due_at = ` + clock("5") + ` + $6::interval
		WHERE job_id = $1 AND runner = $2 AND attempts = $3 AND sent = $4`,
	hookDelivered: `WITH d AS (
			DELETE FROM {s}.webhook WHERE job_id = $1 AND runner = $2 AND attempts = $3 AND sent = $4
				AND (upto <= sent OR (upto >= ready AND status <> '' AND events & 1 = 0))
			RETURNING 1
		), n AS (
			UPDATE {s}.webhook SET sent = upto, attempts = 0, runner = '', due_since = ` + clock("5") + `,
				due_at = CASE WHEN upto < ready OR (status <> '' AND events & 1 <> 0) THEN ` + clock("5") + ` ELSE 'infinity' END
			WHERE job_id = $1 AND runner = $2 AND attempts = $3 AND sent = $4
				AND upto > sent AND NOT (upto >= ready AND status <> '' AND events & 1 = 0)
			RETURNING 1
		)
		SELECT (SELECT count(*) FROM d) + (SELECT count(*) FROM n)`,
	hookRelease: `UPDATE {s}.webhook SET runner = '', due_at = least(due_at, ` + clock("1") + `)
		WHERE runner = $2 AND runner <> ''`,
	hookReleaseAll: `UPDATE {s}.webhook SET runner = '', due_at = least(due_at, ` + clock("1") + `) WHERE runner <> ''`,

	// The host gate (see hostgate.go and migrations/013). hostSweep
	// deletes the keys that hold nothing: no slot, no wait; and, as the
	// sweep's one statement that runs every pass, the change feed's
	// watches whose node died (no wait lasts an hour).
	hostAcquire: `SELECT slot, wait_us FROM {s}.host_acquire($1, $2, $3, $4, $5, $6, $7::timestamptz)`,
	hostRenew:   `SELECT {s}.host_renew($1, $2, $3, $4::timestamptz)`,
	// hostRelease frees slot $1 of host $2, whose next fetch may start $3
	// (> 0) after now; hostFree frees a slot taken under no interval.
	// Apart, each keeps one plan per connection: with $3 in one statement
	// the planner would plan every call anew for the value of $3 > 0.
	hostRelease: `WITH gone AS (DELETE FROM {s}.host_slot WHERE id = $1)
		UPDATE {s}.host SET next_start = greatest(next_start, ` + clock("4") + ` + $3::interval)
		WHERE key = $2`,
	hostFree: `DELETE FROM {s}.host_slot WHERE id = $1`,
	hostBackOff: `INSERT INTO {s}.host AS h (key, backoff_until) VALUES ($1, ` + clock("2") + ` + $3::interval)
		ON CONFLICT (key) DO UPDATE SET backoff_until = greatest(h.backoff_until, excluded.backoff_until)`,
	hostSweep: `WITH gone AS (DELETE FROM {s}.host_slot WHERE lease <= ` + clock("1") + `),
			stale AS (DELETE FROM {s}.watch WHERE since < now() - interval '1 hour')
		DELETE FROM {s}.host h WHERE h.next_start < ` + clock("1") + ` AND h.backoff_until < ` + clock("1") + `
		AND h.wanted_until < ` + clock("1") + `
		AND NOT EXISTS (SELECT 1 FROM {s}.host_slot s WHERE s.key = h.key AND s.lease > ` + clock("1") + `)`,

	// notify sends on channel $1 the changed jobs $2, in payloads $3 (of
	// node $4's tag and one id per line), keeping only those that another
	// node watches, and a queued job ("") if a job is still queued. With
	// them it deletes node $4's rows of the ended watches of jobs $5 at
	// gens $6 that no newer watch has written since, and tells the other
	// nodes which it deleted, 15 ids (of at most 512 bytes) a payload (see
	// feed.go and migrations/017). A notifying transaction gets an xid and
	// a commit record; notifications are hints that polling backs up, so
	// this one commits without waiting for the WAL flush
	// (set_config(…, true) lasts until the statement's own commit). With
	// nothing to send it calls neither.
	notify: `WITH gone AS (
			DELETE FROM {s}.watch w USING unnest($5::text[], $6::bigint[]) AS d (job_id, gen)
			WHERE w.job_id = d.job_id AND w.tag = $4 AND w.gen <= d.gen
			RETURNING w.job_id
		), c AS (
			SELECT p.id, p.k FROM unnest($2::text[], $3::int[]) AS p (id, k)
			WHERE CASE WHEN p.id = '' THEN EXISTS (SELECT 1 FROM {s}.job WHERE status = 'queued')
				ELSE EXISTS (SELECT 1 FROM {s}.watch w WHERE w.job_id = p.id AND w.tag <> $4) END
		), u AS (
			SELECT job_id, (row_number() OVER () - 1) / 15 AS k FROM gone
		)
		SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, $4 || E'\n' || string_agg(c.id, E'\n'))
		FROM c GROUP BY c.k
		UNION ALL
		SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, 'u:' || $4 || E'\n' || string_agg(u.job_id, E'\n'))
		FROM u GROUP BY u.k`,
	// notifyQueued is notify for a queued job alone, on channel $1 in a
	// payload of node $2's tag, in a statement whose one plan serves every
	// call: notify's arrays make the planner plan each call anew.
	notifyQueued: `SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, $2 || E'\n')
		WHERE EXISTS (SELECT 1 FROM {s}.job WHERE status = 'queued')`,
	// watch records that node $2 watches job $1 (see feed.go) and tells
	// the other nodes on channel $4. The table is unlogged, so the commit
	// waits for no WAL flush either way.
	watch: `WITH w AS (
			INSERT INTO {s}.watch AS w (job_id, tag, gen) VALUES ($1, $2, $3)
			ON CONFLICT (job_id, tag) DO UPDATE SET gen = excluded.gen, since = now()
			RETURNING w.job_id
		)
		SELECT set_config('synchronous_commit', 'off', true), pg_notify($4, 'w:' || $2 || E'\n' || w.job_id) FROM w`,
	// watchers lists the other nodes' watches, for a listener that
	// (re)connects.
	watchers: `SELECT job_id, tag FROM {s}.watch WHERE tag <> $1`,
}

// queries holds the store's statements for one schema.
type queries struct {
	lockXact, lockXactShared, reuse, callerLive, insert  string
	claim, anyQueued, step, finish, finishMissed, cancel string
	getJob, get, getResults, getTarget, list, touch      string
	heartbeat                                            string
	forgetAll, forgetRunner, forgetStale, reapJobs       string
	reapHandBack, reapRepeat                             string
	reapLive, reapRunner, reapOrphans, reapTargets       string
	lockStat, oldestExpired, sweep, totalBytes           string
	heldByCaller, evictPick, evictOldest, evict          string
	evictHolders                                         string
	foldCallers, dropZeroCallers, anyCallerDeltas        string
	stats, notify, notifyQueued, watch, watchers         string
	hookClaim, hookDone, hookRetry, hookPending          string
	hookDelivered, hookTargets                           string
	hookRelease, hookReleaseAll                          string
	expire, anyExpired                                   string
	hostAcquire, hostRelease, hostBackOff, hostSweep     string
	hostRenew, hostFree                                  string
}

// render returns the statements for schema.
func (q queries) render(schema string) queries {
	r := strings.NewReplacer("{s}", pgx.Identifier{schema}.Sanitize())
	for _, p := range q.fields() {
		*p = r.Replace(*p)
	}
	return q
}

// fields returns a pointer to every statement of q.
func (q *queries) fields() []*string {
	return []*string{
		&q.lockXact, &q.lockXactShared, &q.reuse, &q.callerLive, &q.insert,
		&q.claim, &q.anyQueued, &q.step, &q.finish, &q.finishMissed, &q.cancel,
		&q.getJob, &q.get, &q.getResults, &q.getTarget, &q.list, &q.touch, &q.heartbeat,
		&q.forgetAll, &q.forgetRunner, &q.forgetStale, &q.reapJobs, &q.reapHandBack, &q.reapRepeat,
		&q.reapLive, &q.reapRunner, &q.reapOrphans, &q.reapTargets,
		&q.lockStat, &q.oldestExpired, &q.sweep, &q.totalBytes,
		&q.heldByCaller, &q.evictPick, &q.evictOldest, &q.evict, &q.evictHolders,
		&q.foldCallers, &q.dropZeroCallers, &q.anyCallerDeltas,
		&q.stats, &q.notify, &q.notifyQueued, &q.watch, &q.watchers,
		&q.hookClaim, &q.hookDone, &q.hookRetry, &q.hookRelease, &q.hookReleaseAll, &q.hookPending, &q.hookDelivered, &q.hookTargets,
		&q.expire, &q.anyExpired,
		&q.hostAcquire, &q.hostRelease, &q.hostBackOff, &q.hostSweep, &q.hostRenew, &q.hostFree,
	}
}
