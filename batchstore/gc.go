package batchstore

import (
	"context"
	"errors"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"
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
func (s *Store) Sweep(ctx context.Context, leaseBefore time.Time) (int, error) {
	total := 0
	for {
		n := 0
		err := s.write(ctx, "sweep", func(conn *sqlite.Conn) error {
			seqs, err := pickJobs(conn, `SELECT seq, bytes FROM batch_job
				WHERE `+whereFinished+` AND lease < ? ORDER BY lease, seq LIMIT `+gcBatchSQL,
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

// Evict implements [batch.Store.Evict]: finished jobs go oldest lease first
// (then oldest insert) while the maintained byte total is above maxBytes.
// Neither the total nor the order needs a scan.
func (s *Store) Evict(ctx context.Context, maxBytes int64) (int, error) {
	total := 0
	for {
		n, more := 0, false
		err := s.write(ctx, "evict", func(conn *sqlite.Conn) error {
			bytes, err := countInt(conn, `SELECT bytes FROM batch_stat WHERE id = 1`)
			if err != nil || bytes <= maxBytes {
				return err
			}
			jobs, err := pickJobs(conn, `SELECT seq, bytes FROM batch_job
				WHERE `+whereFinished+` ORDER BY lease, seq LIMIT `+gcBatchSQL)
			if err != nil {
				return err
			}
			for _, j := range jobs {
				if bytes <= maxBytes {
					break
				}
				if err := deleteJob(conn, j.seq); err != nil {
					return err
				}
				bytes -= j.n
				n++
			}
			more = bytes > maxBytes && len(jobs) == gcBatch
			return vacuum(conn, n)
		})
		if err != nil { // the batch rolled back
			return total, errors.Join(err, s.reclaim(ctx, total))
		}
		total += n
		if !more {
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
// would cascade; deleting explicitly keeps it right on a host connection
// that turned them off.
func deleteJob(conn *sqlite.Conn, seq int64) error {
	for _, q := range []string{
		`DELETE FROM batch_result WHERE job_seq = ?`,
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
	return s.read(ctx, "checkpoint", func(conn *sqlite.Conn) error {
		return sqlitex.Execute(conn, `PRAGMA wal_checkpoint(PASSIVE)`, nil)
	})
}

// MarkInFlightFailed implements [batch.Store.MarkInFlightFailed]. The
// store serves one process (the file lock sees to that), so every live job
// is in flight: runner and staleBefore are not needed. Every running target
// fails with the reason as its error (counted done, its error bytes
// counted), whatever its job's status: a job cancelled just before the
// restart stays cancelled, but its in-flight target is failed too. Then
// every live job fails. Both steps walk partial indexes that hold only
// running targets and live jobs.
func (s *Store) MarkInFlightFailed(ctx context.Context, runner, reason string, staleBefore, now time.Time) (int, error) {
	n := 0
	err := s.write(ctx, "mark in-flight jobs failed", func(conn *sqlite.Conn) error {
		jobs, err := pickJobs(conn, `SELECT job_seq, count(*) FROM batch_target
			WHERE status = 'running' GROUP BY job_seq`)
		if err != nil {
			return err
		}
		err = sqlitex.Execute(conn, `UPDATE batch_target SET status = 'failed', error = ?, outcome = ?
			WHERE status = 'running'`, &sqlitex.ExecOptions{Args: []any{reason, string(batch.OutcomeOther)}})
		if err != nil {
			return err
		}
		for _, j := range jobs { // j.n: the job's running targets
			err := sqlitex.Execute(conn, `UPDATE batch_job SET targets_done = targets_done + ?1,
				bytes = bytes + ?1 * ?2 WHERE seq = ?3`,
				&sqlitex.ExecOptions{Args: []any{j.n, len(reason), j.seq}})
			if err != nil {
				return err
			}
		}
		err = sqlitex.Execute(conn, `UPDATE batch_job SET status = 'failed', error = ?, runner = '',
			finished_at = ?, lease = ? WHERE `+whereLive,
			&sqlitex.ExecOptions{Args: []any{reason, now.UnixNano(), now.UnixNano()}})
		n = conn.Changes()
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Stats implements [batch.Store.Stats]: one row of counters that triggers
// keep exact, so it costs the same at any size.
func (s *Store) Stats(ctx context.Context) (st batch.Stats, err error) {
	err = s.read(ctx, "stats", func(conn *sqlite.Conn) error {
		return sqlitex.Execute(conn, `SELECT queued, running, bytes FROM batch_stat WHERE id = 1`,
			&sqlitex.ExecOptions{ResultFunc: func(stmt *sqlite.Stmt) error {
				st = batch.Stats{Queued: stmt.ColumnInt(0), Running: stmt.ColumnInt(1), Bytes: stmt.ColumnInt64(2)}
				return nil
			}})
	})
	return st, err
}
