package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// claimTries is how often Claim runs its statement when it found no job
// though one is queued: FOR UPDATE SKIP LOCKED skips the rows that other
// transactions lock at that moment (a concurrent claim, a cancel, a lease
// bump), so "no row" does not mean "no job".
const claimTries = 3

// Claim implements [batch.Store.Claim] in one statement: the oldest queued
// job (by creation time, then insertion order) that no other transaction
// has locked becomes running, held by the runner, with target 0 running,
// and the runner's heartbeat is recorded. FOR UPDATE SKIP LOCKED makes
// concurrent claims, on any node, take different jobs without waiting for
// each other.
func (s *Store) Claim(ctx context.Context, p batchdriver.ClaimParams) (c batchdriver.Claimed, ok bool, err error) {
	ctx, cancel, err := s.begin(ctx)
	defer cancel()
	if err != nil {
		return batchdriver.Claimed{}, false, s.wrap(ctx, "claim job", err)
	}
	for try := 1; ; try++ {
		c, ok, err = s.claim(ctx, p)
		if err != nil {
			return batchdriver.Claimed{}, false, s.wrap(ctx, "claim job", err)
		}
		if ok {
			s.feed.changed(c.Job.ID)
			return c, true, nil
		}
		if try == claimTries {
			return batchdriver.Claimed{}, false, nil
		}
		var queued bool
		if err := s.pool.QueryRow(ctx, s.q.anyQueued).Scan(&queued); err != nil {
			return batchdriver.Claimed{}, false, s.wrap(ctx, "claim job", err)
		}
		if !queued {
			return batchdriver.Claimed{}, false, nil
		}
		select {
		case <-ctx.Done():
			return batchdriver.Claimed{}, false, s.wrap(ctx, "claim job", context.Cause(ctx))
		case <-time.After(time.Duration(try) * time.Millisecond):
		}
	}
}

func (s *Store) claim(ctx context.Context, p batchdriver.ClaimParams) (c batchdriver.Claimed, ok bool, err error) {
	rows, err := s.pool.Query(ctx, s.q.claim, p.Runner, s.now(p.Now))
	if err != nil {
		return c, false, err
	}
	defer rows.Close()
	for rows.Next() {
		var j jobRow
		var t targetRow
		var queued, next int
		if err := rows.Scan(append(j.dest(), &t.idx, &t.url, &t.options, &t.status, &next, &queued)...); err != nil {
			return c, false, err
		}
		rec, _, err := t.record()
		if err != nil {
			return c, false, err
		}
		// A target's row says pending until it is stored.
		if rec.Idx == next {
			rec.Status = batchdriver.TargetRunning
		}
		c.Job, c.Next, c.Queued, ok = j.job(), next, queued, true
		c.Targets = append(c.Targets, rec)
	}
	return c, ok, rows.Err()
}

// FinishTarget implements [batch.Store.FinishTarget] in one statement: it
// stores the target's outcome, and either starts the next target or gives
// the job its final status and releases it, moving its bytes into the
// store's counter. The job's row
// fences the write: it changes only while p.Runner holds the job with this
// target in flight. While the job goes on, its lease moves at most once
// per [batch.LeaseGrain], so most drain writes change no indexed column of
// the job and are HOT updates. The writes of jobs that drain at once share
// one transaction and its commit (see group.go); each returns once the
// commit that holds it has.
func (s *Store) FinishTarget(ctx context.Context, p batchdriver.FinishParams) (batchdriver.Step, error) {
	fin := p.Target
	if !fin.Status.Finished() {
		return batchdriver.Step{}, fmt.Errorf("pgstore: finish target: status must be done or failed, got %q", fin.Status)
	}
	ctx, cancel, err := s.begin(ctx)
	defer cancel()
	if err != nil {
		return batchdriver.Step{}, s.wrap(ctx, "finish target", err)
	}
	okInc, failInc := 0, 1
	if fin.Status == batchdriver.TargetDone {
		okInc, failInc = 1, 0
	}
	args := []any{p.JobID, p.Runner, fin.Idx, okInc, failInc,
		int64(len(fin.Result) + len(fin.Error)), string(fin.Status), []byte(fin.Error), []byte(fin.Hint),
		string(fin.Outcome), s.now(p.Now), batchdriver.LeaseGrain, fin.Result, p.Expire}
	r := &finishReq{ctx: ctx, p: p, args: args}
	if s.off.PGWriteGroups {
		s.finishAlone(r)
		return r.step, r.err
	}
	return s.finishGrouped(r)
}

// finishMissed answers a drain write that matched no row: a job that is
// gone, one that p.Runner no longer holds, or a repeat of a write that was
// applied (the runner still holds the job and the target is stored), which
// gets the job's current step.
func (s *Store) finishMissed(ctx context.Context, p batchdriver.FinishParams) (batchdriver.Step, error) {
	var runner, status string
	var inFlight int
	var target *string
	err := s.pool.QueryRow(ctx, s.q.finishMissed, p.JobID, p.Target.Idx).Scan(&runner, &inFlight, &status, &target)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return batchdriver.Step{}, batchdriver.ErrNotFound
	case err != nil:
		return batchdriver.Step{}, err
	case runner != p.Runner || target == nil || !batchdriver.TargetStatus(*target).Finished():
		return batchdriver.Step{}, batchdriver.ErrNotHeld
	}
	return batchdriver.Step{Status: batchdriver.JobStatus(status), Next: inFlight}, nil
}
