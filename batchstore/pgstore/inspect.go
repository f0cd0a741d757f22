package pgstore

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/siftfetch/batchkit/batch"
)

var _ batch.Inspector = (*Store)(nil)

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
	callers:     `SELECT caller, bytes FROM {s}.caller_bytes ORDER BY bytes DESC, caller COLLATE "C" LIMIT $1`,
	callerBytes: `SELECT coalesce((SELECT bytes FROM {s}.caller_bytes WHERE caller = $1), 0)`,
	callerJob: `SELECT caller_class, caller_restricted FROM {s}.job WHERE caller = $1
		ORDER BY created_at DESC, seq DESC LIMIT 1`,
	job: `SELECT ` + jobCols + `, ` + targetCols + `
		FROM {s}.job j LEFT JOIN {s}.target t ON t.job_seq = j.seq
		WHERE j.id = $1 ORDER BY t.idx`,
}

// inspectSQL returns one of inspectTemplates for the store's schema.
func (s *Store) inspectSQL(q string) string {
	return strings.ReplaceAll(q, "{s}", pgx.Identifier{s.opts.Schema}.Sanitize())
}

// Overview implements [batch.Inspector] in one read-only REPEATABLE READ
// transaction, so that its parts agree with each other.
func (s *Store) Overview(ctx context.Context, p batch.OverviewParams) (ov batch.Overview, err error) {
	ctx, cancel, err := s.begin(ctx)
	defer cancel()
	if err != nil {
		return ov, s.wrap(ctx, "overview", err)
	}
	q := inspectTemplates
	now := s.now(p.Now)
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, s.q.stats).Scan(&ov.Stats.Queued, &ov.Stats.Running, &ov.Stats.Bytes); err != nil {
			return err
		}
		var err error
		if ov.Recent, err = inspectJobs(ctx, tx, s.inspectSQL(q.recent), p.Recent); err != nil {
			return err
		}
		if ov.Running, err = inspectJobs(ctx, tx, s.inspectSQL(q.running), p.Running); err != nil {
			return err
		}
		ov.Failures = map[batch.Outcome]int{}
		abs, age := s.timeBound(p.FailuresSince, p.Now)
		rows, err := tx.Query(ctx, s.inspectSQL(q.failures), abs, age)
		if err != nil {
			return err
		}
		var outcome string
		var n int
		if _, err := pgx.ForEachRow(rows, []any{&outcome, &n}, func() error {
			ov.Failures[batch.Outcome(outcome)] += n
			return nil
		}); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, s.inspectSQL(q.runners), now)
		if err != nil {
			return err
		}
		var id string
		var hb time.Time
		var ageMicros int64
		if _, err := pgx.ForEachRow(rows, []any{&id, &hb, &ageMicros}, func() error {
			ov.Runners = append(ov.Runners, batch.RunnerBeat{ID: id, Heartbeat: hb.UTC(), Age: time.Duration(ageMicros) * time.Microsecond})
			return nil
		}); err != nil {
			return err
		}
		var oldest *int64
		w := &ov.Webhooks
		if err := tx.QueryRow(ctx, s.inspectSQL(q.hooks), now).Scan(&w.Pending, &w.Due, &w.Claimed, &oldest); err != nil {
			return err
		}
		if oldest != nil {
			w.OldestDue = time.Duration(*oldest) * time.Microsecond
		}
		ov.Callers, err = s.inspectCallers(ctx, tx, p.Callers)
		return err
	})
	if err != nil {
		return batch.Overview{}, s.wrap(ctx, "overview", err)
	}
	return ov, nil
}

// inspectJobs reads up to limit jobs of q, a query of jobCols with the
// limit as $1.
func inspectJobs(ctx context.Context, tx pgx.Tx, q string, limit int) ([]batch.Job, error) {
	if limit < 1 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, q, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (batch.Job, error) { return scanJob(row) })
}

// inspectCallers returns the limit callers that hold the most bytes, held
// bytes included: the first limit entries of the counter, and the callers
// of the held jobs (a handful), whose counters are read one by one. Any
// other caller holds no more than the counter's limit-th entry, and comes
// after it by name if it holds as much, so the answer is exact.
func (s *Store) inspectCallers(ctx context.Context, tx pgx.Tx, limit int) ([]batch.CallerBytes, error) {
	if limit < 1 {
		return nil, nil
	}
	held, err := s.heldByCaller(ctx, tx)
	if err != nil {
		return nil, err
	}
	bytes := map[string]int64{}
	rows, err := tx.Query(ctx, s.inspectSQL(inspectTemplates.callers), limit)
	if err != nil {
		return nil, err
	}
	var name string
	var b int64
	if _, err := pgx.ForEachRow(rows, []any{&name, &b}, func() error {
		bytes[name] = b
		return nil
	}); err != nil {
		return nil, err
	}
	for name, b := range held {
		if _, ok := bytes[name]; !ok {
			var c int64
			if err := tx.QueryRow(ctx, s.inspectSQL(inspectTemplates.callerBytes), name).Scan(&c); err != nil {
				return nil, err
			}
			bytes[name] = c
		}
		bytes[name] += b
	}
	var out []batch.CallerBytes
	for name, b := range bytes {
		if b != 0 {
			out = append(out, batch.CallerBytes{Caller: batch.Caller{Name: name}, Bytes: b})
		}
	}
	slices.SortFunc(out, func(a, b batch.CallerBytes) int {
		return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), strings.Compare(a.Caller.Name, b.Caller.Name))
	})
	out = out[:min(len(out), limit)]
	for i := range out {
		c := &out[i].Caller
		err := tx.QueryRow(ctx, s.inspectSQL(inspectTemplates.callerJob), c.Name).Scan(&c.Class, &c.Restricted)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, err
		}
	}
	return out, nil
}

// InspectJob implements [batch.Inspector]: [Store.Get] without the owner
// and without results, in one statement.
func (s *Store) InspectJob(ctx context.Context, jobID string) (job batch.Job, targets []batch.TargetRecord, err error) {
	ctx, cancel, err := s.begin(ctx)
	defer cancel()
	if err != nil {
		return batch.Job{}, nil, s.wrap(ctx, "inspect job", err)
	}
	rows, err := s.pool.Query(ctx, s.inspectSQL(inspectTemplates.job), jobID)
	if err != nil {
		return batch.Job{}, nil, s.wrap(ctx, "inspect job", err)
	}
	defer rows.Close()
	found := false
	for rows.Next() {
		var j jobRow
		var t targetRow
		if err := rows.Scan(append(j.dest(), t.dest(false)...)...); err != nil {
			return batch.Job{}, nil, s.wrap(ctx, "inspect job", err)
		}
		job, found = j.job(), true
		rec, ok, err := t.record()
		if err != nil {
			return batch.Job{}, nil, s.wrap(ctx, "inspect job", err)
		}
		if ok {
			targets = append(targets, rec)
		}
	}
	if err := rows.Err(); err != nil {
		return batch.Job{}, nil, s.wrap(ctx, "inspect job", err)
	}
	if !found {
		return batch.Job{}, nil, batch.ErrNotFound
	}
	return job, targets, nil
}
