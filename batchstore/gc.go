package batchstore

import (
	"context"
	"encoding/json"
	"errors"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// gcBatch is how many jobs one sweep or eviction transaction deletes at
// most, so that a large pass never holds the write lock for long. It is
// written into the SQL as a literal: LIMIT ? would re-prepare (see qJob).
const (
	gcBatch    = 128
	gcBatchSQL = "128"
)

// Sweep implements [batch.Store.Sweep]. It walks the partial index of
// finished jobs by lease, so a pass costs the same with 1k or 100k jobs
// stored, and deletes in transactions of at most gcBatch jobs. If it
// deleted anything it returns the freed pages to the file system.
func (s *Store) Sweep(ctx context.Context, p batchdriver.SweepParams) (int, error) {
	leaseBefore := callTime(p.Now).Add(-p.TTL)
	total := 0
	for {
		n := 0
		err := s.write(ctx, "sweep", func(conn *sqlite.Conn) error {
			seqs, err := pickJobs(conn, `SELECT seq, bytes FROM batch_job
				WHERE `+whereFinished+` AND lease < ? AND `+whereReleased+` ORDER BY lease, seq LIMIT `+gcBatchSQL,
				leaseBefore.UnixNano())
			if err != nil {
				return err
			}
			for _, j := range seqs {
				if err := deleteJob(conn, j.seq); err != nil {
					return err
				}
			}
			n = len(seqs)
			return vacuum(conn, n)
		})
		if err != nil {
			return total, errors.Join(err, s.reclaim(ctx, total))
		}
		total += n
		if n < gcBatch {
			return total, s.reclaim(ctx, total)
		}
	}
}

// jobNum is a job and a number selected with it: its bytes, or a count.
type jobNum struct{ seq, n int64 }

// pickJobs collects the jobs a query selects before any is deleted: rows
// must not be deleted under a statement that is still stepping over them.
func pickJobs(conn *sqlite.Conn, q string, args ...any) ([]jobNum, error) {
	var out []jobNum
	err := sqlitex.Execute(conn, q, &sqlitex.ExecOptions{
		Args: args,
		ResultFunc: func(stmt *sqlite.Stmt) error {
			out = append(out, jobNum{stmt.ColumnInt64(0), stmt.ColumnInt64(1)})
			return nil
		},
	})
	return out, err
}

// deleteJob deletes a job with its targets and results. The foreign keys
// would cascade to the targets; deleting explicitly keeps it right on a
// host connection that turned them off.
func deleteJob(conn *sqlite.Conn, seq int64) error {
	for _, q := range []string{
		`DELETE FROM batch_body WHERE id IN (SELECT result_id FROM batch_target WHERE job_seq = ?)`,
		`DELETE FROM batch_target WHERE job_seq = ?`,
		`DELETE FROM batch_job WHERE seq = ?`,
	} {
		if err := sqlitex.Execute(conn, q, &sqlitex.ExecOptions{Args: []any{seq}}); err != nil {
			return err
		}
	}
	return nil
}

// vacuum releases the free pages at the end of a transaction that deleted
// jobs: with auto_vacuum=INCREMENTAL the file shrinks at the next
// checkpoint. Without it (a host's file created before the store), it does
// nothing.
func vacuum(conn *sqlite.Conn, deleted int) error {
	if deleted == 0 {
		return nil
	}
	return sqlitex.Execute(conn, `PRAGMA incremental_vacuum`, nil)
}

// reclaim checkpoints the WAL after a pass that deleted jobs, so that the
// database file is truncated now rather than at the next automatic
// checkpoint. PASSIVE never waits for readers or writers: if it cannot
// finish, a later checkpoint does.
func (s *Store) reclaim(ctx context.Context, deleted int) error {
	if deleted == 0 {
		return nil
	}
	return s.checkpoint(ctx)
}

// Heartbeat implements [batch.Store.Heartbeat]: one row per runner.
func (s *Store) Heartbeat(ctx context.Context, p batchdriver.HeartbeatParams) error {
	p.Now = callNow(p.Now)
	return s.write(ctx, "heartbeat", func(conn *sqlite.Conn) error {
		return sqlitex.Execute(conn, qHeartbeat, &sqlitex.ExecOptions{Args: []any{p.Runner, p.Now.UnixNano()}})
	})
}

// Reap implements [batch.Store.Reap] in one transaction. The selected jobs
// come from two partial indexes, live jobs and held jobs, so the pass costs
// the same at any store size. Each held job is released as its last drain
// write would release it, with its target in flight failed; the outbox
// trigger writes the events of those with a webhook. The webhook claims of
// p.Runner (AllLive: all) are released in the same transaction.
func (s *Store) Reap(ctx context.Context, p batchdriver.ReapParams) (int, error) {
	p.Now = callNow(p.Now)
	n := 0
	err := s.write(ctx, "reap jobs", func(conn *sqlite.Conn) error {
		jobs, err := reapSelect(conn, p)
		if err != nil {
			return err
		}
		now := p.Now.UnixNano()
		for _, j := range jobs {
			if p.HandBack {
				if j.n != 1 {
					continue // held by no runner: left as it is
				}
				live, err := handBack(conn, j.seq, p, now)
				if err != nil {
					return err
				}
				if live {
					n++
				}
				continue
			}
			err := sqlitex.Execute(conn, `UPDATE batch_target SET status = 'failed', error = ?1, hint = '',
				outcome = ?2, bytes = length(CAST(?1 AS BLOB)) WHERE job_seq = ?3 AND status = 'running'`,
				&sqlitex.ExecOptions{Args: []any{p.Reason, string(batchdriver.OutcomeOther), j.seq}})
			if err != nil {
				return err
			}
			err = sqlitex.Execute(conn, `UPDATE batch_job SET status = 'failed', error = ?, finished_at = ?, lease = ?
				WHERE seq = ? AND `+whereLive, &sqlitex.ExecOptions{Args: []any{p.Reason, now, now, j.seq}})
			if err != nil {
				return err
			}
			n += conn.Changes()
			if j.n == 1 { // held: its progress goes into its row, and it is released
				err := sqlitex.Execute(conn, `UPDATE batch_job SET runner = '',
					targets_done = (SELECT count(*) FROM batch_target t WHERE t.job_seq = ?1 AND t.status IN ('done', 'failed')),
					bytes = (SELECT coalesce(sum(t.bytes), 0) FROM batch_target t WHERE t.job_seq = ?1)
					WHERE seq = ?1`, &sqlitex.ExecOptions{Args: []any{j.seq}})
				if err != nil {
					return err
				}
			}
		}
		if err := releaseHooks(conn, p); err != nil {
			return err
		}
		return reapForget(conn, p)
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// handBack hands a held job back, as [batchdriver.ReapParams.HandBack]
// says, and reports whether it was live. A running job with a pending
// target is queued again, released, its progress in its row; any other is
// released as its last drain write would release it.
func handBack(conn *sqlite.Conn, seq int64, p batchdriver.ReapParams, now int64) (bool, error) {
	q, args := `UPDATE batch_target SET status = 'failed', error = ?1, hint = '',
		outcome = ?2, bytes = length(CAST(?1 AS BLOB)) WHERE job_seq = ?3 AND status = 'running'`,
		[]any{p.Reason, string(batchdriver.OutcomeInterrupted), seq}
	if p.RepeatInFlight {
		// attempts: one more, unless the caller knows the fetch never began.
		q, args = `UPDATE batch_target SET status = 'pending',
			attempts = attempts + NOT EXISTS (SELECT 1 FROM batch_job j, json_each(?2) u WHERE j.seq = ?1 AND u.value = j.id)
			WHERE job_seq = ?1 AND status = 'running'`, []any{seq, unfetchedJSON(p.Unfetched)}
	}
	err := sqlitex.Execute(conn, q, &sqlitex.ExecOptions{Args: args})
	if err != nil {
		return false, err
	}
	var h heldJob
	pending := false
	err = sqlitex.Execute(conn, `SELECT seq, status, runner, targets_total, lease,
		EXISTS (SELECT 1 FROM batch_target t WHERE t.job_seq = j.seq AND t.status = 'pending')
		FROM batch_job j WHERE seq = ?`, &sqlitex.ExecOptions{
		Args: []any{seq},
		ResultFunc: func(stmt *sqlite.Stmt) error {
			h = heldJob{stmt.ColumnInt64(0), batchdriver.JobStatus(stmt.ColumnText(1)), stmt.ColumnText(2),
				stmt.ColumnInt64(3), stmt.ColumnInt64(4), 0}
			pending = stmt.ColumnBool(5)
			return nil
		},
	})
	if err != nil {
		return false, err
	}
	live := h.status.Live()
	if h.status != batchdriver.JobRunning || !pending {
		_, err := release(conn, h, now)
		return live, err
	}
	return true, sqlitex.Execute(conn, `UPDATE batch_job SET status = 'queued', runner = '', lease = max(lease, ?2),
		handed_on = handed_on + 1,
		targets_done = (SELECT count(*) FROM batch_target t WHERE t.job_seq = ?1 AND t.status IN ('done', 'failed')),
		bytes = (SELECT coalesce(sum(t.bytes), 0) FROM batch_target t WHERE t.job_seq = ?1)
		WHERE seq = ?1`, &sqlitex.ExecOptions{Args: []any{seq, now}})
}

// unfetchedJSON is ReapParams.Unfetched as a JSON array, for json_each.
func unfetchedJSON(ids []string) string {
	if len(ids) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(ids) // strings always marshal
	return string(b)
}

// The reaper's selections, each on a partial index (see TestStore_QueryPlans):
// a job, and 1 if it is held.
const (
	qLiveJobs  = `SELECT seq, runner <> '' FROM batch_job WHERE ` + whereLive
	qHeldJobs  = `SELECT seq, 1 FROM batch_job WHERE runner <> ''`
	qHeldBy    = qHeldJobs + ` AND runner = ?`
	qHeldStale = qHeldJobs + ` AND NOT EXISTS
		(SELECT 1 FROM batch_runner r WHERE r.id = batch_job.runner AND r.heartbeat >= ?)`
	// The bytes of the held jobs, whose rows do not carry them yet. CROSS
	// JOIN keeps the held jobs the outer loop: with a wider target row
	// the planner would otherwise scan every target.
	qHeldBytes = `SELECT coalesce(sum(t.bytes), 0) FROM batch_job j CROSS JOIN batch_target t ON t.job_seq = j.seq
		WHERE j.runner <> ''`
	// The bytes of the queued jobs, which the counter leaves out: a job
	// handed back (see handBack) holds its finished targets' bytes in its
	// row; any other queued job holds none.
	qQueuedBytes = `SELECT coalesce(sum(bytes), 0) FROM batch_job WHERE ` + whereLive + ` AND runner = ''`
)

// reapSelect returns the jobs p selects, without duplicates.
func reapSelect(conn *sqlite.Conn, p batchdriver.ReapParams) ([]jobNum, error) {
	type query struct {
		sql  string
		args []any
	}
	var qs []query
	if p.AllLive {
		qs = append(qs, query{qLiveJobs, nil}, query{qHeldJobs, nil})
	}
	if p.Runner != "" {
		qs = append(qs, query{qHeldBy, []any{p.Runner}})
	}
	if p.StaleAfter > 0 {
		qs = append(qs, query{qHeldStale, []any{p.Now.Add(-p.StaleAfter).UnixNano()}})
	}
	seen := map[int64]bool{}
	var out []jobNum
	for _, q := range qs {
		jobs, err := pickJobs(conn, q.sql, q.args...)
		if err != nil {
			return nil, err
		}
		for _, j := range jobs {
			if !seen[j.seq] {
				seen[j.seq] = true
				out = append(out, j)
			}
		}
	}
	return out, nil
}

// reapForget deletes the heartbeats Reap judged stale, and the reaped
// runner's, so that runners that left keep no row.
func reapForget(conn *sqlite.Conn, p batchdriver.ReapParams) error {
	if p.AllLive {
		return sqlitex.Execute(conn, `DELETE FROM batch_runner`, nil)
	}
	if p.Runner != "" {
		err := sqlitex.Execute(conn, `DELETE FROM batch_runner WHERE id = ?`, &sqlitex.ExecOptions{Args: []any{p.Runner}})
		if err != nil {
			return err
		}
	}
	if p.StaleAfter <= 0 {
		return nil
	}
	return sqlitex.Execute(conn, `DELETE FROM batch_runner WHERE heartbeat < ?`,
		&sqlitex.ExecOptions{Args: []any{p.Now.Add(-p.StaleAfter).UnixNano()}})
}

// totalBytes is the store's byte total: the maintained counter of the
// finished jobs' rows plus the bytes of the held jobs' targets, read
// through the held index.
func totalBytes(conn *sqlite.Conn) (int64, error) {
	return countInt(conn, `SELECT (SELECT bytes FROM batch_stat WHERE id = 1) + (`+qHeldBytes+`) + (`+qQueuedBytes+`)`)
}

// Stats implements [batch.Store.Stats]: one row of counters that triggers
// keep exact, and the bytes of the few held jobs, so it costs the same at
// any size.
func (s *Store) Stats(ctx context.Context) (st batchdriver.Stats, err error) {
	err = s.read(ctx, "stats", func(conn *sqlite.Conn) error {
		return snapshot(conn, func() error {
			err := sqlitex.Execute(conn, `SELECT queued, running FROM batch_stat WHERE id = 1`,
				&sqlitex.ExecOptions{ResultFunc: func(stmt *sqlite.Stmt) error {
					st = batchdriver.Stats{Queued: stmt.ColumnInt(0), Running: stmt.ColumnInt(1)}
					return nil
				}})
			if err != nil {
				return err
			}
			st.Bytes, err = totalBytes(conn)
			return err
		})
	})
	return st, err
}

// Capabilities implements [batch.Store.Capabilities]: the file lock keeps
// the store to one process, so a starting runner fails every live job.
func (s *Store) Capabilities() batchdriver.Capabilities {
	return batchdriver.Capabilities{Shared: false}
}
