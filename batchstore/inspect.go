package batchstore

import (
	"context"
	"math"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

var _ batchdriver.Inspector = (*Store)(nil)

// The operator console's reads ([batch.Inspector]), each on an index or a
// table bounded by the live state (see TestStore_InspectPlans): the newest
// jobs walk the rowid backwards; the running jobs are the partial index of
// live jobs; the failures read the targets of the jobs that finished in the
// window (batch_job_finished, migration 007) and of the held jobs; the
// runners, the outbox and the callers' counters are tables of a row per
// runner, pending event or caller holding bytes. None reads a result body.
const (
	qInspectRecent  = `SELECT ` + jobCols + ` FROM batch_job j ORDER BY j.seq DESC`
	qInspectRunning = `SELECT ` + jobCols + ` FROM batch_job j INDEXED BY batch_job_live
		WHERE j.` + whereLive + ` AND j.status = 'running' ORDER BY j.created_at, j.seq`
	qInspectFailures = `SELECT t.outcome, count(*) FROM batch_target t
		WHERE t.job_seq IN (SELECT seq FROM batch_job WHERE finished_at >= ?
			UNION ALL SELECT seq FROM batch_job WHERE runner <> '' AND finished_at IS NULL)
		  AND t.status = 'failed'
		GROUP BY t.outcome`
	qInspectRunners = `SELECT id, heartbeat FROM batch_runner ORDER BY id`
	qInspectHooks   = `SELECT (SELECT count(*) FROM batch_webhook),
		(SELECT count(*) FROM batch_webhook WHERE due_at <= ?1),
		(SELECT count(*) FROM batch_webhook WHERE runner <> '' AND due_at > ?1),
		(SELECT min(due_since) FROM batch_webhook WHERE due_at <= ?1)`
	qInspectCallers   = `SELECT caller, bytes FROM batch_caller ORDER BY bytes DESC, caller`
	qInspectCallerJob = `SELECT caller_class, caller_restricted FROM batch_job
		WHERE caller = +? ORDER BY created_at DESC, seq DESC`
	qInspectJob = `SELECT ` + jobCols + ` FROM batch_job j WHERE j.id = ?`
)

// Overview implements [batch.Inspector] in one read transaction, so that
// its parts agree with each other.
func (s *Store) Overview(ctx context.Context, p batchdriver.OverviewParams) (ov batchdriver.Overview, err error) {
	at := callTime(p.Now)
	now := at.UnixNano()
	since := int64(math.MinInt64)
	if p.FailureWindow > 0 {
		since = at.Add(-p.FailureWindow).UnixNano()
	}
	err = s.read(ctx, "overview", func(conn *sqlite.Conn) error {
		return snapshot(conn, func() error {
			err := sqlitex.Execute(conn, `SELECT queued, running FROM batch_stat WHERE id = 1`,
				&sqlitex.ExecOptions{ResultFunc: func(stmt *sqlite.Stmt) error {
					ov.Stats.Queued, ov.Stats.Running = stmt.ColumnInt(0), stmt.ColumnInt(1)
					return nil
				}})
			if err != nil {
				return err
			}
			if ov.Stats.Bytes, err = totalBytes(conn); err != nil {
				return err
			}
			if ov.Recent, err = walkJobs(conn, qInspectRecent, p.Recent); err != nil {
				return err
			}
			if ov.Running, err = walkJobs(conn, qInspectRunning, p.Running); err != nil {
				return err
			}
			ov.Failures = map[batchdriver.Outcome]int{}
			err = sqlitex.Execute(conn, qInspectFailures, &sqlitex.ExecOptions{
				Args: []any{since},
				ResultFunc: func(stmt *sqlite.Stmt) error {
					ov.Failures[batchdriver.Outcome(stmt.ColumnText(0))] += stmt.ColumnInt(1)
					return nil
				},
			})
			if err != nil {
				return err
			}
			err = sqlitex.Execute(conn, qInspectRunners, &sqlitex.ExecOptions{
				ResultFunc: func(stmt *sqlite.Stmt) error {
					hb := timeAt(stmt, 1)
					ov.Runners = append(ov.Runners, batchdriver.RunnerBeat{ID: stmt.ColumnText(0), Heartbeat: hb, Age: at.Sub(hb)})
					return nil
				},
			})
			if err != nil {
				return err
			}
			err = sqlitex.Execute(conn, qInspectHooks, &sqlitex.ExecOptions{
				Args: []any{now},
				ResultFunc: func(stmt *sqlite.Stmt) error {
					ov.Webhooks = batchdriver.WebhookBacklog{
						Pending: stmt.ColumnInt(0), Due: stmt.ColumnInt(1), Claimed: stmt.ColumnInt(2),
					}
					if !stmt.ColumnIsNull(3) {
						ov.Webhooks.OldestDue = at.Sub(timeAt(stmt, 3))
					}
					return nil
				},
			})
			if err != nil {
				return err
			}
			ov.Callers, err = inspectCallers(conn, p.Callers)
			return err
		})
	})
	if err != nil {
		return batchdriver.Overview{}, err
	}
	return ov, nil
}

// walkJobs reads up to limit jobs of q (with args), a query of jobCols whose walk
// stops at the limit (no LIMIT ?: see qJob).
func walkJobs(conn *sqlite.Conn, q string, limit int, args ...any) ([]batchdriver.Job, error) {
	if limit < 1 {
		return nil, nil
	}
	var jobs []batchdriver.Job
	err := sqlitex.Execute(conn, q, &sqlitex.ExecOptions{
		Args: args,
		ResultFunc: func(stmt *sqlite.Stmt) error {
			_, j := scanJob(stmt)
			jobs = append(jobs, j)
			if len(jobs) == limit {
				return errStop
			}
			return nil
		},
	})
	if err == errStop {
		err = nil
	}
	return jobs, err
}

// inspectCallers returns the limit callers that hold the most bytes, held
// bytes included: the first limit entries of the counter, and the callers
// of the held jobs (a handful), whose counters are read one by one. Any
// other caller holds no more than the counter's limit-th entry, and comes
// after it by name if it holds as much, so the answer is exact.
func inspectCallers(conn *sqlite.Conn, limit int) ([]batchdriver.CallerBytes, error) {
	if limit < 1 {
		return nil, nil
	}
	held, err := heldByCaller(conn)
	if err != nil {
		return nil, err
	}
	bytes := map[string]int64{}
	n := 0
	err = sqlitex.Execute(conn, qInspectCallers, &sqlitex.ExecOptions{
		ResultFunc: func(stmt *sqlite.Stmt) error {
			bytes[stmt.ColumnText(0)] = stmt.ColumnInt64(1)
			if n++; n == limit {
				return errStop
			}
			return nil
		},
	})
	if err != nil && err != errStop {
		return nil, err
	}
	for name, b := range held {
		if _, ok := bytes[name]; !ok {
			c, err := countInt(conn, qCallerBytes, name)
			if err != nil {
				return nil, err
			}
			bytes[name] = c
		}
		bytes[name] += b
	}
	out := batchdriver.TopCallers(bytes, limit)
	for i := range out {
		out[i].Caller.Restricted = true // until a job of its says otherwise
		err := sqlitex.Execute(conn, qInspectCallerJob, &sqlitex.ExecOptions{
			Args: []any{out[i].Caller.Name},
			ResultFunc: func(stmt *sqlite.Stmt) error {
				out[i].Caller.Class, out[i].Caller.Restricted = stmt.ColumnText(0), stmt.ColumnBool(1)
				return errStop
			},
		})
		if err != nil && err != errStop {
			return nil, err
		}
	}
	return out, nil
}

// InspectJob implements [batch.Inspector]: [Store.Get] without the owner
// and without results.
func (s *Store) InspectJob(ctx context.Context, jobID string) (batchdriver.Job, []batchdriver.TargetRecord, error) {
	return s.readJob(ctx, "inspect job", qInspectJob, qTargets, false, jobID)
}
