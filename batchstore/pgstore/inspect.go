package pgstore

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

var _ batchdriver.Inspector = (*Store)(nil)

// The operator console's reads ([batch.Inspector]), each on an index or a
// table bounded by the live state (see TestStore_InspectPlans): the newest
// jobs walk the primary key backwards; the running jobs are the partial
// index of live jobs; the failures read the targets of the jobs that
// finished in the window (job_finished, migration 006) and of the held
// jobs; the runners, the outbox and the callers' counters are tables of a
// row per runner, pending event or caller holding bytes. None names the
// result column. $1 is the clock where there is one (see sql.go).
var inspectTemplates = struct {
	recent, running, failures, runners, hooks string
	callers, callerBytes, callerJob, job      string
}{
	recent: `SELECT ` + jobCols + ` FROM {s}.job j ORDER BY j.seq DESC LIMIT $1`,
	running: `SELECT ` + jobCols + ` FROM {s}.job j WHERE j.` + whereLive + ` AND j.status = 'running'
		ORDER BY j.created_at, j.seq LIMIT $1`,
	// $1 is the window's start on the runner's clock, $2 its length on the
	// database's (see Store.timeBound).
	failures: `SELECT t.outcome, count(*) FROM {s}.target t
		WHERE t.job_seq IN (SELECT seq FROM {s}.job WHERE finished_at >= coalesce($1::timestamptz, now() - $2::interval)
			UNION ALL SELECT seq FROM {s}.job WHERE ` + whereHeld + ` AND finished_at IS NULL)
		  AND t.status = 'failed'
		GROUP BY t.outcome`,
	runners: `SELECT id, heartbeat, (extract(epoch FROM ` + clock("1") + ` - heartbeat) * 1000000)::bigint
		FROM {s}.runner ORDER BY id COLLATE "C"`,
	hooks: `SELECT (SELECT count(*) FROM {s}.webhook),
		(SELECT count(*) FROM {s}.webhook WHERE due_at <= ` + clock("1") + `),
		(SELECT count(*) FROM {s}.webhook WHERE runner <> '' AND due_at > ` + clock("1") + `),
		(SELECT (extract(epoch FROM ` + clock("1") + ` - min(due_since)) * 1000000)::bigint
			FROM {s}.webhook WHERE due_at <= ` + clock("1") + `)`,
	// The callers' counters are their caller_bytes rows plus the deltas
	// not yet folded in (010_caller_bytes_log), which the console, holding
	// no lock, adds: the top $1 are among the first $1 + k rows of
	// caller_bytes_most and the k callers with deltas, for the deltas can
	// move at most those k.
	callers: `WITH l AS (
			SELECT caller, sum(delta)::bigint AS delta FROM {s}.caller_bytes_log GROUP BY caller
		), c AS (
			(SELECT caller FROM {s}.caller_bytes ORDER BY bytes DESC, caller COLLATE "C" LIMIT $1 + (SELECT count(*) FROM l))
			UNION
			SELECT caller FROM l
		)
		SELECT c.caller, coalesce(b.bytes, 0) + coalesce(l.delta, 0) AS bytes
		FROM c LEFT JOIN {s}.caller_bytes b ON b.caller = c.caller LEFT JOIN l ON l.caller = c.caller
		WHERE coalesce(b.bytes, 0) + coalesce(l.delta, 0) <> 0
		ORDER BY bytes DESC, c.caller COLLATE "C" LIMIT $1`,
	// The counters of callers $1, and the class of callers $1 as each
	// one's newest job has it (by position in $1, from 1).
	callerBytes: `SELECT caller, bytes FROM (
			SELECT b.caller, b.bytes + coalesce((SELECT sum(g.delta)::bigint FROM {s}.caller_bytes_log g WHERE g.caller = b.caller), 0) AS bytes
			FROM {s}.caller_bytes b WHERE b.caller = ANY ($1::text[])
			UNION ALL
			SELECT g.caller, sum(g.delta)::bigint FROM {s}.caller_bytes_log g
			WHERE g.caller = ANY ($1::text[]) AND NOT EXISTS (SELECT 1 FROM {s}.caller_bytes b WHERE b.caller = g.caller)
			GROUP BY g.caller
		) c WHERE bytes <> 0`,
	callerJob: `SELECT c.i, n.caller_class, n.caller_restricted FROM unnest($1::text[]) WITH ORDINALITY AS c (name, i)
		CROSS JOIN LATERAL (SELECT caller_class, caller_restricted FROM {s}.job WHERE caller = c.name
			ORDER BY created_at DESC, seq DESC LIMIT 1) n`,
	job: `SELECT ` + jobCols + `, ` + targetCols + `
		FROM {s}.job j LEFT JOIN {s}.target t ON t.job_seq = j.seq
		WHERE j.id = $1 ORDER BY t.idx`,
}

// inspectSQL returns one of inspectTemplates for the store's schema.
func (s *Store) inspectSQL(q string) string {
	return strings.ReplaceAll(q, "{s}", pgx.Identifier{s.opts.Schema}.Sanitize())
}

// Overview implements [batch.Inspector] in one read-only REPEATABLE READ
// transaction (readTx), so that its parts agree with each other, and in
// two batches: the independent reads in one, then the callers' counters
// and classes that the first answers call for in another.
func (s *Store) Overview(ctx context.Context, p batchdriver.OverviewParams) (ov batchdriver.Overview, err error) {
	ctx, cancel, err := s.begin(ctx)
	defer cancel()
	if err != nil {
		return ov, s.wrap(ctx, "overview", err)
	}
	q := inspectTemplates
	now := s.now(p.Now)
	var abs, age any = time.Time{}, nil // every finished job
	if p.FailureWindow > 0 {
		abs, age = s.timeBound(p.Now, p.FailureWindow)
	}
	err = s.readTx(ctx, func(tx pgx.Tx) error {
		ov.Failures = map[batchdriver.Outcome]int{}
		bytes := map[string]int64{}
		held := map[string]int64{}
		var b pgx.Batch
		b.Queue(s.q.stats).QueryRow(func(row pgx.Row) error {
			return row.Scan(&ov.Stats.Queued, &ov.Stats.Running, &ov.Stats.Bytes)
		})
		queueJobs(&b, s.inspectSQL(q.recent), p.Recent, &ov.Recent)
		queueJobs(&b, s.inspectSQL(q.running), p.Running, &ov.Running)
		b.Queue(s.inspectSQL(q.failures), abs, age).Query(func(rows pgx.Rows) error {
			var outcome string
			var n int
			_, err := pgx.ForEachRow(rows, []any{&outcome, &n}, func() error {
				ov.Failures[batchdriver.Outcome(outcome)] += n
				return nil
			})
			return err
		})
		b.Queue(s.inspectSQL(q.runners), now).Query(func(rows pgx.Rows) error {
			var id string
			var hb time.Time
			var micros int64
			_, err := pgx.ForEachRow(rows, []any{&id, &hb, &micros}, func() error {
				ov.Runners = append(ov.Runners, batchdriver.RunnerBeat{ID: id, Heartbeat: hb.UTC(), Age: time.Duration(micros) * time.Microsecond})
				return nil
			})
			return err
		})
		b.Queue(s.inspectSQL(q.hooks), now).QueryRow(func(row pgx.Row) error {
			var oldest *int64
			w := &ov.Webhooks
			if err := row.Scan(&w.Pending, &w.Due, &w.Claimed, &oldest); err != nil {
				return err
			}
			if oldest != nil {
				w.OldestDue = time.Duration(*oldest) * time.Microsecond
			}
			return nil
		})
		if p.Callers > 0 {
			b.Queue(s.inspectSQL(q.callers), p.Callers).Query(func(rows pgx.Rows) error {
				return collectBytes(rows, bytes)
			})
			b.Queue(s.q.heldByCaller).Query(func(rows pgx.Rows) error { return collectBytes(rows, held) })
		}
		if err := tx.SendBatch(ctx, &b).Close(); err != nil {
			return err
		}
		if p.Callers > 0 {
			var err error
			ov.Callers, err = s.inspectCallers(ctx, tx, p.Callers, bytes, held)
			return err
		}
		return nil
	})
	if err != nil {
		return batchdriver.Overview{}, s.wrap(ctx, "overview", err)
	}
	return ov, nil
}

// queueJobs queues q, a query of jobCols with the limit as $1, into
// *into; a limit below 1 queues nothing.
func queueJobs(b *pgx.Batch, q string, limit int, into *[]batchdriver.Job) {
	if limit < 1 {
		return
	}
	b.Queue(q, limit).Query(func(rows pgx.Rows) error {
		jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (batchdriver.Job, error) { return scanJob(row) })
		*into = jobs
		return err
	})
}

// collectBytes adds rows of (caller, bytes) to m.
func collectBytes(rows pgx.Rows, m map[string]int64) error {
	var name string
	var n int64
	_, err := pgx.ForEachRow(rows, []any{&name, &n}, func() error {
		m[name] += n
		return nil
	})
	return err
}

// inspectCallers returns the limit callers that hold the most bytes, held
// bytes included, from the counter's first limit entries (bytes) and the
// held jobs' bytes by caller (held, a handful of jobs): the counters of the
// held callers that are not among those entries are read, then each
// caller's class. Any other caller holds no more than the counter's
// limit-th entry, and comes after it by name if it holds as much, so the
// answer is exact.
func (s *Store) inspectCallers(ctx context.Context, tx pgx.Tx, limit int, bytes, held map[string]int64) ([]batchdriver.CallerBytes, error) {
	var missing []string
	for name := range held {
		if _, ok := bytes[name]; !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		rows, err := tx.Query(ctx, s.inspectSQL(inspectTemplates.callerBytes), missing)
		if err != nil {
			return nil, err
		}
		if err := collectBytes(rows, bytes); err != nil {
			return nil, err
		}
	}
	for name, b := range held {
		bytes[name] += b
	}
	out := batchdriver.TopCallers(bytes, limit)
	if len(out) == 0 {
		return nil, nil
	}
	names := make([]string, len(out))
	for i, c := range out {
		names[i] = c.Caller.Name
		out[i].Caller.Restricted = true // until a job of its says otherwise
	}
	rows, err := tx.Query(ctx, s.inspectSQL(inspectTemplates.callerJob), names)
	if err != nil {
		return nil, err
	}
	var i int
	var class string
	var restricted bool
	if _, err := pgx.ForEachRow(rows, []any{&i, &class, &restricted}, func() error {
		if i >= 1 && i <= len(out) {
			out[i-1].Caller.Class, out[i-1].Caller.Restricted = class, restricted
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return out, nil
}

// InspectJob implements [batch.Inspector]: [Store.Get] without the owner
// and without results, in one statement.
func (s *Store) InspectJob(ctx context.Context, jobID string) (job batchdriver.Job, targets []batchdriver.TargetRecord, err error) {
	ctx, cancel, err := s.begin(ctx)
	defer cancel()
	if err != nil {
		return batchdriver.Job{}, nil, s.wrap(ctx, "inspect job", err)
	}
	rows, err := s.pool.Query(ctx, s.inspectSQL(inspectTemplates.job), jobID)
	if err != nil {
		return batchdriver.Job{}, nil, s.wrap(ctx, "inspect job", err)
	}
	defer rows.Close()
	found := false
	for rows.Next() {
		var j jobRow
		var t targetRow
		if err := rows.Scan(append(j.dest(), t.dest(false)...)...); err != nil {
			return batchdriver.Job{}, nil, s.wrap(ctx, "inspect job", err)
		}
		job, found = j.job(), true
		rec, ok, err := t.record()
		if err != nil {
			return batchdriver.Job{}, nil, s.wrap(ctx, "inspect job", err)
		}
		if ok {
			targets = append(targets, rec)
		}
	}
	if err := rows.Err(); err != nil {
		return batchdriver.Job{}, nil, s.wrap(ctx, "inspect job", err)
	}
	if !found {
		return batchdriver.Job{}, nil, batchdriver.ErrNotFound
	}
	return job, targets, nil
}
