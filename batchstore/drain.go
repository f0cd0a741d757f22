package batchstore

import (
	"context"
	"fmt"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"
)

// Claim implements [batch.Store.Claim]: the oldest queued job (by creation
// time, then insertion order) becomes running, held by runner. It first
// reads the maintained queued count, so that idle workers polling an empty
// queue never take the write lock.
func (s *Store) Claim(ctx context.Context, runner string, now time.Time) (job batch.Job, targets []batch.TargetRecord, err error) {
	var queued int64
	err = s.read(ctx, "count queued jobs", func(conn *sqlite.Conn) (err error) {
		queued, err = countInt(conn, `SELECT queued FROM batch_stat WHERE id = 1`)
		return err
	})
	if err != nil {
		return batch.Job{}, nil, err
	}
	if queued == 0 {
		return batch.Job{}, nil, batch.ErrNotFound
	}
	err = s.write(ctx, "claim job", func(conn *sqlite.Conn) error {
		seq, err := countInt(conn, `SELECT seq FROM batch_job WHERE status = 'queued'
			ORDER BY created_at, seq LIMIT 1`)
		if err != nil {
			return err
		}
		if seq == 0 { // seq starts at 1: no row
			return batch.ErrNotFound
		}
		err = sqlitex.Execute(conn, `UPDATE batch_job SET status = 'running', runner = ?, heartbeat = ?
			WHERE seq = ?`, &sqlitex.ExecOptions{Args: []any{runner, now.UnixNano(), seq}})
		if err != nil {
			return err
		}
		if _, job, _, err = loadJob(conn, qJobBySeq, seq); err != nil {
			return err
		}
		targets, err = loadTargets(conn, qTargets, false, seq)
		return err
	})
	if err != nil {
		return batch.Job{}, nil, err
	}
	return job, targets, nil
}

// StartTarget implements [batch.Store.StartTarget]. It also records the
// runner's heartbeat on the job.
func (s *Store) StartTarget(ctx context.Context, jobID string, idx int, now time.Time) error {
	return s.write(ctx, "start target", func(conn *sqlite.Conn) error {
		seq, jobStatus, status, err := targetState(conn, jobID, idx)
		if err != nil {
			return err
		}
		if jobStatus != batch.JobRunning || status != batch.TargetPending {
			return batch.ErrFinished
		}
		err = sqlitex.Execute(conn, `UPDATE batch_target SET status = 'running' WHERE job_seq = ? AND idx = ?`,
			&sqlitex.ExecOptions{Args: []any{seq, idx}})
		if err != nil {
			return err
		}
		return sqlitex.Execute(conn, `UPDATE batch_job SET heartbeat = ? WHERE seq = ?`,
			&sqlitex.ExecOptions{Args: []any{now.UnixNano(), seq}})
	})
}

// targetState reads a job's key and status and one of its targets' status
// in one statement, or returns batch.ErrNotFound for an unknown job or idx.
func targetState(conn *sqlite.Conn, jobID string, idx int) (seq int64, job batch.JobStatus, target batch.TargetStatus, err error) {
	err = sqlitex.Execute(conn, `SELECT j.seq, j.status,
		(SELECT t.status FROM batch_target t WHERE t.job_seq = j.seq AND t.idx = ?)
		FROM batch_job j WHERE j.id = ?`,
		&sqlitex.ExecOptions{
			Args: []any{idx, jobID},
			ResultFunc: func(stmt *sqlite.Stmt) error {
				seq, job, target = stmt.ColumnInt64(0), batch.JobStatus(stmt.ColumnText(1)), batch.TargetStatus(stmt.ColumnText(2))
				return nil
			},
		})
	if err == nil && target == "" { // no job row, or a NULL target
		err = batch.ErrNotFound
	}
	return seq, job, target, err
}

// FinishTarget implements [batch.Store.FinishTarget]. The target row, its
// result row, the job's counters and lease and (by trigger) the store's byte
// total change in one transaction: a result is never half stored.
func (s *Store) FinishTarget(ctx context.Context, jobID string, fin batch.TargetFinish, now time.Time) (status batch.JobStatus, err error) {
	if !fin.Status.Finished() {
		return "", fmt.Errorf("batchstore: finish target: status must be done or failed, got %q", fin.Status)
	}
	err = s.write(ctx, "finish target", func(conn *sqlite.Conn) error {
		seq, jobStatus, ts, err := targetState(conn, jobID, fin.Idx)
		if err != nil {
			return err
		}
		status = jobStatus
		if ts != batch.TargetRunning {
			return batch.ErrFinished
		}
		err = sqlitex.Execute(conn, `UPDATE batch_target SET status = ?, error = ?, hint = ?, outcome = ?
			WHERE job_seq = ? AND idx = ?`, &sqlitex.ExecOptions{
			Args: []any{string(fin.Status), fin.Error, fin.Hint, string(fin.Outcome), seq, fin.Idx},
		})
		if err != nil {
			return err
		}
		n := int64(len(fin.Error))
		if len(fin.Result) > 0 {
			n += int64(len(fin.Result))
			err = sqlitex.Execute(conn, `INSERT INTO batch_result (job_seq, idx, body) VALUES (?, ?, ?)`,
				&sqlitex.ExecOptions{Args: []any{seq, fin.Idx, fin.Result}})
			if err != nil {
				return err
			}
		}
		return sqlitex.Execute(conn, `UPDATE batch_job SET targets_done = targets_done + 1,
			bytes = bytes + ?, lease = ?, heartbeat = ? WHERE seq = ?`,
			&sqlitex.ExecOptions{Args: []any{n, now.UnixNano(), now.UnixNano(), seq}})
	})
	if err != nil {
		return "", err
	}
	return status, nil
}

// FinishJob implements [batch.Store.FinishJob]: the final status of a
// running job is [batch.AggregateStatus] of its done and failed targets,
// and the job no longer names a runner. A job that is not running is left
// as it is.
func (s *Store) FinishJob(ctx context.Context, jobID string, now time.Time) (status batch.JobStatus, err error) {
	err = s.write(ctx, "finish job", func(conn *sqlite.Conn) error {
		var seq int64
		seq, status, err = jobState(conn, jobID, "")
		if err != nil || status != batch.JobRunning {
			return err // a queued job has nothing to aggregate; a finished one stays
		}
		var ok, failed int
		err = sqlitex.Execute(conn, `SELECT count(*) FILTER (WHERE status = 'done'),
			count(*) FILTER (WHERE status = 'failed') FROM batch_target WHERE job_seq = ?`,
			&sqlitex.ExecOptions{
				Args: []any{seq},
				ResultFunc: func(stmt *sqlite.Stmt) error {
					ok, failed = stmt.ColumnInt(0), stmt.ColumnInt(1)
					return nil
				},
			})
		if err != nil {
			return err
		}
		status = batch.AggregateStatus(ok, failed)
		return sqlitex.Execute(conn, `UPDATE batch_job SET status = ?, finished_at = ?, lease = ?, runner = ''
			WHERE seq = ?`, &sqlitex.ExecOptions{Args: []any{string(status), now.UnixNano(), now.UnixNano(), seq}})
	})
	if err != nil {
		return "", err
	}
	return status, nil
}
