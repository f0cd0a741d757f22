package batchstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// The drain: a claim starts the first target, and each later write stores
// one target and starts the next (or finishes the job), so a target costs
// one commit. batch_job.runner is the runner that holds the job and the
// target whose status is 'running' the one in flight; the release clears
// the runner and writes the job's progress into its row (see schema/002).

// Claim implements [batch.Store.Claim]: the oldest queued job (by creation
// time, then insertion order) becomes running, held by the runner, and its
// target 0 running; the runner's heartbeat is recorded in the same
// transaction. It first reads the maintained queued count, so that idle
// workers polling an empty queue never take the write lock.
func (s *Store) Claim(ctx context.Context, p batchdriver.ClaimParams) (c batchdriver.Claimed, ok bool, err error) {
	p.Now = callNow(p.Now)
	var queued int64
	err = s.read(ctx, "count queued jobs", func(conn *sqlite.Conn) (err error) {
		queued, err = countInt(conn, `SELECT queued FROM batch_stat WHERE id = 1`)
		return err
	})
	if err != nil || queued == 0 {
		return batchdriver.Claimed{}, false, err
	}
	err = s.write(ctx, "claim job", func(conn *sqlite.Conn) error {
		// A queued job's first pending target is its targets_done: targets
		// finish in idx order, and a job handed back has its progress in
		// its row (see handBack); a new one has 0. A job with skipped
		// targets (see schema/012) has finished targets between pending
		// ones: its first pending target is read from its targets.
		var seq, next int64
		var skips bool
		err := sqlitex.Execute(conn, `SELECT seq, targets_done, skipped IS NOT NULL FROM batch_job WHERE status = 'queued'
			ORDER BY created_at, seq LIMIT 1`, &sqlitex.ExecOptions{ResultFunc: func(stmt *sqlite.Stmt) error {
			seq, next, skips = stmt.ColumnInt64(0), stmt.ColumnInt64(1), stmt.ColumnBool(2)
			return nil
		}})
		if err != nil || seq == 0 { // seq starts at 1: no row
			return err
		}
		if skips {
			if next, err = countInt(conn, qFirstPending, seq); err != nil {
				return err
			}
		}
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{`UPDATE batch_job SET status = 'running', runner = ? WHERE seq = ?`, []any{p.Runner, seq}},
			{`UPDATE batch_target SET status = 'running' WHERE job_seq = ? AND idx = ?`, []any{seq, next}},
			{qHeartbeat, []any{p.Runner, p.Now.UnixNano()}},
		} {
			if err := sqlitex.Execute(conn, q.sql, &sqlitex.ExecOptions{Args: q.args}); err != nil {
				return err
			}
		}
		if _, c.Job, _, err = loadJob(conn, qJobBySeq, seq); err != nil {
			return err
		}
		if c.Targets, err = loadTargets(conn, qTargets, false, seq); err != nil {
			return err
		}
		c.Next = int(next)
		left, err := countInt(conn, `SELECT queued FROM batch_stat WHERE id = 1`)
		c.Queued, ok = int(left), true
		return err
	})
	if err != nil || !ok {
		return batchdriver.Claimed{}, false, err
	}
	return c, true, nil
}

// qFirstPending is the idx of a job's first pending target: a queued job
// has one (a create skips fewer targets than it has, and a hand-back
// releases a job that has none).
const qFirstPending = `SELECT t.idx FROM batch_target t WHERE t.job_seq = +? AND t.status = 'pending' ORDER BY t.idx LIMIT 1`

// qHeartbeat records a runner's heartbeat; it never moves one back.
const qHeartbeat = `INSERT INTO batch_runner (id, heartbeat) VALUES (?1, ?2)
	ON CONFLICT (id) DO UPDATE SET heartbeat = max(heartbeat, excluded.heartbeat)`

// heldJob is what a drain write reads of its job before it writes.
type heldJob struct {
	seq     int64
	status  batchdriver.JobStatus
	runner  string
	total   int64
	lease   int64
	skipped []int                  // the targets skipped at create (see schema/012)
	events  batchdriver.HookEvents // its webhook's; 0 for the default or none
}

func loadHeld(conn *sqlite.Conn, jobID string) (h heldJob, found bool, err error) {
	err = sqlitex.Execute(conn, qHeld, &sqlitex.ExecOptions{
		Args: []any{jobID},
		ResultFunc: func(stmt *sqlite.Stmt) error {
			h = heldJob{seq: stmt.ColumnInt64(0), status: batchdriver.JobStatus(stmt.ColumnText(1)), runner: stmt.ColumnText(2),
				total: stmt.ColumnInt64(3), lease: stmt.ColumnInt64(4), skipped: decodeIdx(stmt.ColumnText(5)),
				events: batchdriver.HookEvents(stmt.ColumnInt(6))}
			found = true
			return nil
		},
	})
	return h, found, err
}

const qHeld = `SELECT seq, status, runner, targets_total, lease, skipped, coalesce(webhook_events, 0) FROM batch_job WHERE id = ?`

// nextAfter is the idx of the target that follows idx in the drain: the
// next one that was not skipped at create, or total when none is left.
func (h heldJob) nextAfter(idx int) int {
	next := idx + 1
	for _, s := range h.skipped { // in idx order
		if s == next {
			next++
		}
	}
	return next
}

// qFinishTarget stores the outcome of target ?1, which must be running,
// and starts target ?9 (-1: none), which must be pending. It changes two
// rows, or one without a next target; any other count means ?1 was not in
// flight.
const qFinishTarget = `UPDATE batch_target SET
	status = iif(idx = ?1, ?3, 'running'),
	error = iif(idx = ?1, ?4, error),
	hint = iif(idx = ?1, ?5, hint),
	outcome = iif(idx = ?1, ?6, outcome),
	result_id = iif(idx = ?1, ?7, result_id),
	bytes = iif(idx = ?1, ?8, bytes)
	WHERE job_seq = ?2 AND idx IN (?1, ?9) AND status = iif(idx = ?1, 'running', 'pending')`

// errNotInFlight rolls back a drain write whose target is not the one in
// flight; FinishTarget then tells a repeat from a stray write.
var errNotInFlight = errors.New("batchstore: target not in flight")

// FinishTarget implements [batch.Store.FinishTarget] in one immediate
// transaction: the target's row and result and the next target's row (or,
// at the end, the job's row with its final status and progress) change
// together, so a result is never half stored and a held job never has two
// targets, or none, in flight. While the job goes on its row is not
// written, but for a lease bump at most once per [batch.LeaseGrain].
func (s *Store) FinishTarget(ctx context.Context, p batchdriver.FinishParams) (step batchdriver.Step, err error) {
	p.Now = callNow(p.Now)
	fin := p.Target
	if !fin.Status.Finished() {
		return batchdriver.Step{}, fmt.Errorf("batchstore: finish target: status must be done or failed, got %q", fin.Status)
	}
	err = s.writeSized(ctx, "finish target", len(fin.Result)+len(fin.Error), func(conn *sqlite.Conn) error {
		h, found, err := loadHeld(conn, p.JobID)
		switch {
		case err != nil:
			return err
		case !found:
			return batchdriver.ErrNotFound
		case h.runner != p.Runner || fin.Idx < 0 || int64(fin.Idx) >= h.total:
			return batchdriver.ErrNotHeld
		}
		now := p.Now.UnixNano()
		var resultID any // NULL for a failed target
		n := int64(len(fin.Error))
		if fin.Status == batchdriver.TargetDone {
			err := sqlitex.Execute(conn, `INSERT INTO batch_body (body) VALUES (?)`,
				&sqlitex.ExecOptions{Args: []any{fin.Result}})
			if err != nil {
				return err
			}
			resultID, n = conn.LastInsertRowID(), n+int64(len(fin.Result))
		}
		next := h.nextAfter(fin.Idx)
		if h.status != batchdriver.JobRunning || int64(next) >= h.total || p.Expire {
			next = -1 // cancelled, the last target, or past the deadline: the job ends with this write
		}
		// One statement stores target i and starts the next, target i+1
		// unless skipped: the two rows sit side by side in the primary key.
		err = sqlitex.Execute(conn, qFinishTarget, &sqlitex.ExecOptions{
			Args: []any{fin.Idx, h.seq, string(fin.Status), fin.Error, fin.Hint, string(fin.Outcome), resultID, n, next},
		})
		if err != nil {
			return err
		}
		if want := 1 + min(next+1, 1); conn.Changes() != want {
			return errNotInFlight // rolls back the body too
		}
		if h.events.Has(batchdriver.HookTargets) {
			err := sqlitex.Execute(conn, qHookReady, &sqlitex.ExecOptions{Args: []any{p.JobID, fin.Idx + 1, now}})
			if err != nil {
				return err
			}
		}
		if next >= 0 {
			step = batchdriver.Step{Status: batchdriver.JobRunning, Next: next}
			if now-h.lease < int64(batchdriver.LeaseGrain) {
				return nil
			}
			return sqlitex.Execute(conn, `UPDATE batch_job SET lease = ? WHERE seq = ?`,
				&sqlitex.ExecOptions{Args: []any{now, h.seq}})
		}
		if p.Expire && h.status == batchdriver.JobRunning {
			if _, err := expirePending(conn, h.seq); err != nil {
				return err
			}
		}
		final, err := release(conn, h, now)
		step = batchdriver.Step{Status: final, Next: -1}
		return err
	})
	if errors.Is(err, errNotInFlight) {
		return s.repeatedStep(ctx, p)
	}
	if err != nil {
		return batchdriver.Step{}, err
	}
	return step, nil
}

// release ends a held job's drain in its row: a running job gets its final
// status from its targets (a cancelled one stays cancelled), its progress
// is written, and it is no longer held.
func release(conn *sqlite.Conn, h heldJob, now int64) (batchdriver.JobStatus, error) {
	var ok, failed int
	var bytes int64
	err := sqlitex.Execute(conn, `SELECT count(*) FILTER (WHERE status = 'done'),
		count(*) FILTER (WHERE status = 'failed'), coalesce(sum(bytes), 0) FROM batch_target WHERE job_seq = ?`,
		&sqlitex.ExecOptions{
			Args: []any{h.seq},
			ResultFunc: func(stmt *sqlite.Stmt) error {
				ok, failed, bytes = stmt.ColumnInt(0), stmt.ColumnInt(1), stmt.ColumnInt64(2)
				return nil
			},
		})
	if err != nil {
		return "", err
	}
	final := h.status
	if final == batchdriver.JobRunning {
		final = batchdriver.AggregateStatus(ok, failed)
	}
	err = sqlitex.Execute(conn, `UPDATE batch_job SET status = ?1, targets_done = ?2, bytes = ?3,
		lease = max(lease, ?4), finished_at = coalesce(finished_at, ?4), runner = '' WHERE seq = ?5`,
		&sqlitex.ExecOptions{Args: []any{string(final), ok + failed, bytes, now, h.seq}})
	return final, err
}

// repeatedStep answers a drain write for a target that is not the one in
// flight: a repeat of a write that was applied (the runner still holds the
// job and the target is finished) gets the current step; anything else is
// refused. It runs after the write rolled back, in a snapshot of its own.
func (s *Store) repeatedStep(ctx context.Context, p batchdriver.FinishParams) (step batchdriver.Step, err error) {
	err = s.read(ctx, "finish target", func(conn *sqlite.Conn) error {
		return snapshot(conn, func() error {
			h, found, err := loadHeld(conn, p.JobID)
			if err != nil || !found {
				return cmp.Or(err, batchdriver.ErrNotFound)
			}
			if h.runner != p.Runner {
				return batchdriver.ErrNotHeld
			}
			var status string
			next := int64(-1)
			err = sqlitex.Execute(conn, `SELECT status, idx FROM batch_target WHERE job_seq = ? AND (idx = ? OR status = 'running')`,
				&sqlitex.ExecOptions{
					Args: []any{h.seq, p.Target.Idx},
					ResultFunc: func(stmt *sqlite.Stmt) error {
						if stmt.ColumnInt(1) == p.Target.Idx {
							status = stmt.ColumnText(0)
						}
						if stmt.ColumnText(0) == string(batchdriver.TargetRunning) {
							next = stmt.ColumnInt64(1)
						}
						return nil
					},
				})
			if err != nil {
				return err
			}
			if !batchdriver.TargetStatus(status).Finished() {
				return batchdriver.ErrNotHeld
			}
			step = batchdriver.Step{Status: h.status, Next: int(next)}
			return nil
		})
	})
	if err != nil {
		return batchdriver.Step{}, err
	}
	return step, nil
}
