package batchstore

import (
	"cmp"
	"context"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// Owner-scoped calls: every query names both the job id and the caller, so
// a job of another caller takes the same path as an unknown id.

// Cancel implements [batch.Store.Cancel].
func (s *Store) Cancel(ctx context.Context, p batchdriver.CancelParams) error {
	now := callTime(p.Now)
	return s.write(ctx, "cancel job", func(conn *sqlite.Conn) error {
		seq, status, err := jobState(conn, p.JobID, p.Caller)
		if err != nil {
			return err
		}
		if status.Finished() {
			return batchdriver.ErrFinished
		}
		return sqlitex.Execute(conn, `UPDATE batch_job SET status = 'cancelled', finished_at = ?, lease = ?
			WHERE seq = ?`, &sqlitex.ExecOptions{Args: []any{now.UnixNano(), now.UnixNano(), seq}})
	})
}

// Get implements [batch.Store.Get]. Without results it reads the job row
// and the target rows only: result bodies live in another table, so a
// summary costs the same whatever the results weigh.
func (s *Store) Get(ctx context.Context, p batchdriver.GetParams) (job batchdriver.Job, targets []batchdriver.TargetRecord, err error) {
	caller, jobID, withResults := p.Caller, p.JobID, p.Results
	if p.JobOnly { // one statement, one snapshot: no transaction needed
		err = s.quickRead(ctx, "get job", func(conn *sqlite.Conn) error {
			_, j, found, err := loadJob(conn, qJob, jobID, caller)
			if err != nil || !found {
				return cmp.Or(err, batchdriver.ErrNotFound)
			}
			job = j
			return nil
		})
		if err != nil {
			return batchdriver.Job{}, nil, err
		}
		return job, nil, nil
	}
	q := qTargets
	if withResults {
		q = qTargetsResults
	}
	return s.readJob(ctx, "get job", qJob, q, withResults, jobID, caller)
}

// readJob reads, in one snapshot, the job that jobQuery selects by args
// and its targets by targetQuery, with their results if withResults.
func (s *Store) readJob(ctx context.Context, op, jobQuery, targetQuery string, withResults bool, args ...any) (job batchdriver.Job, targets []batchdriver.TargetRecord, err error) {
	err = s.read(ctx, op, func(conn *sqlite.Conn) error {
		return snapshot(conn, func() error {
			seq, j, found, err := loadJob(conn, jobQuery, args...)
			if err != nil || !found {
				return cmp.Or(err, batchdriver.ErrNotFound)
			}
			job = j
			targets, err = loadTargets(conn, targetQuery, withResults, seq)
			return err
		})
	})
	if err != nil {
		return batchdriver.Job{}, nil, err
	}
	return job, targets, nil
}

// GetTarget implements [batch.Store.GetTarget].
func (s *Store) GetTarget(ctx context.Context, p batchdriver.GetTargetParams) (job batchdriver.Job, target batchdriver.TargetRecord, err error) {
	caller, jobID, idx := p.Caller, p.JobID, p.Idx
	err = s.read(ctx, "get target", func(conn *sqlite.Conn) error {
		return snapshot(conn, func() error {
			seq, j, found, err := loadJob(conn, qJob, jobID, caller)
			if err != nil || !found {
				return cmp.Or(err, batchdriver.ErrNotFound)
			}
			targets, err := loadTargets(conn, qTarget, true, seq, idx)
			if err != nil || len(targets) == 0 {
				return cmp.Or(err, batchdriver.ErrNotFound)
			}
			job, target = j, targets[0]
			return nil
		})
	})
	if err != nil {
		return batchdriver.Job{}, batchdriver.TargetRecord{}, err
	}
	return job, target, nil
}

// List implements [batch.Store.List]: newest by creation time, then by
// insertion. A limit below 1 lists nothing.
func (s *Store) List(ctx context.Context, p batchdriver.ListParams) (jobs []batchdriver.Job, err error) {
	caller, limit := p.Caller, p.Limit
	if limit < 1 {
		return nil, nil
	}
	err = s.read(ctx, "list jobs", func(conn *sqlite.Conn) (err error) {
		// No LIMIT ? and +? (see qJob): the index yields the rows in order,
		// and the walk stops at limit.
		q := `SELECT ` + jobCols + ` FROM batch_job j WHERE j.caller = +?
			ORDER BY j.created_at DESC, j.seq DESC`
		if len(p.Metadata) == 0 {
			jobs, err = walkJobs(conn, q, limit, caller)
			return err
		}
		// A label search walks the caller's jobs, newest first, on the
		// caller's index, and keeps those that match, stopping at limit:
		// it reads at most the caller's kept jobs (the TTL and the byte
		// budget bound them), never another caller's.
		err = sqlitex.Execute(conn, q, &sqlitex.ExecOptions{
			Args: []any{caller},
			ResultFunc: func(stmt *sqlite.Stmt) error {
				if _, j := scanJob(stmt); holds(j.Metadata, p.Metadata) {
					jobs = append(jobs, j)
					if len(jobs) == limit {
						return errStop
					}
				}
				return nil
			},
		})
		if err == errStop {
			err = nil
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return jobs, nil
}

// holds reports whether metadata holds every pair of want.
func holds(metadata, want map[string]string) bool {
	for k, v := range want {
		if got, ok := metadata[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Touch implements [batch.Store.Touch]. It coalesces: a touch that would
// move the lease by less than [batch.LeaseGrain] (or backwards) is a read
// only, so a client polling every second writes about once a minute. The
// write, when due, moves the lease to now.
func (s *Store) Touch(ctx context.Context, p batchdriver.TouchParams) error {
	caller, jobID, now := p.Caller, p.JobID, callTime(p.Now)
	var lease int64
	err := s.read(ctx, "touch job", func(conn *sqlite.Conn) error {
		found := false
		err := sqlitex.Execute(conn, `SELECT lease FROM batch_job WHERE id = ? AND caller = ?`,
			&sqlitex.ExecOptions{
				Args: []any{jobID, caller},
				ResultFunc: func(stmt *sqlite.Stmt) error {
					lease, found = stmt.ColumnInt64(0), true
					return nil
				},
			})
		if err == nil && !found {
			err = batchdriver.ErrNotFound
		}
		return err
	})
	if err != nil {
		return err
	}
	if now.UnixNano()-lease < int64(batchdriver.LeaseGrain) {
		return nil
	}
	return s.write(ctx, "touch job", func(conn *sqlite.Conn) error {
		err := sqlitex.Execute(conn, `UPDATE batch_job SET lease = max(lease, ?) WHERE id = ? AND caller = ?`,
			&sqlitex.ExecOptions{Args: []any{now.UnixNano(), jobID, caller}})
		if err == nil && conn.Changes() == 0 {
			err = batchdriver.ErrNotFound // swept between the read and the write
		}
		return err
	})
}
