package batchstore

import (
	"context"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// The deadline (see schema/009): a job whose deadline has passed ends with
// what it has. The drain's last write ends a held job (FinishParams.Expire);
// Expire ends the queued ones.

// expirePending fails the job's pending targets as expired and, if there
// were any, gives the job the deadline as its error, before release gives it its final status
// (and so its webhook event the error). It returns how many it expired.
func expirePending(conn *sqlite.Conn, seq int64) (int, error) {
	err := sqlitex.Execute(conn, `UPDATE batch_target SET status = 'failed', outcome = ?1, error = ?2, bytes = length(?2)
		WHERE job_seq = ?3 AND status = 'pending'`, &sqlitex.ExecOptions{
		Args: []any{string(batchdriver.OutcomeExpired), batchdriver.DeadlineReason, seq},
	})
	if err != nil {
		return 0, err
	}
	n := conn.Changes()
	if n == 0 { // the deadline came with the last target: nothing ended early
		return 0, nil
	}
	err = sqlitex.Execute(conn, `UPDATE batch_job SET error = ? WHERE seq = ?`,
		&sqlitex.ExecOptions{Args: []any{batchdriver.DeadlineReason, seq}})
	return n, err
}

// Expire implements [batch.Store.Expire] in one immediate transaction. It
// walks the partial index of queued jobs with a deadline.
func (s *Store) Expire(ctx context.Context, p batchdriver.ExpireParams) (ended []batchdriver.Expired, err error) {
	now := callTime(p.Now).UnixNano()
	err = s.write(ctx, "expire", func(conn *sqlite.Conn) error {
		ended = ended[:0]
		var jobs []heldJob
		err := sqlitex.Execute(conn, `SELECT seq, id, caller, webhook IS NOT NULL, lease FROM batch_job
			WHERE status = 'queued' AND deadline IS NOT NULL AND deadline <= ? ORDER BY deadline, seq`,
			&sqlitex.ExecOptions{
				Args: []any{now},
				ResultFunc: func(stmt *sqlite.Stmt) error {
					jobs = append(jobs, heldJob{seq: stmt.ColumnInt64(0), status: batchdriver.JobRunning, lease: stmt.ColumnInt64(4)})
					ended = append(ended, batchdriver.Expired{JobID: stmt.ColumnText(1), Caller: stmt.ColumnText(2),
						Webhook: stmt.ColumnBool(3)})
					return nil
				},
			})
		if err != nil {
			return err
		}
		for i, h := range jobs {
			n, err := expirePending(conn, h.seq)
			if err != nil {
				return err
			}
			final, err := release(conn, h, now) // its running status makes release aggregate
			if err != nil {
				return err
			}
			ended[i].Targets, ended[i].Status = n, final
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ended, nil
}
