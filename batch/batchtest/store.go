package batchtest

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/siftfetch/batchkit/batch"
)

// Store is an in-memory [batch.Store], safe for concurrent use. Every method
// runs under one mutex, which makes each one atomic as the interface
// requires. It passes [TestStore] and is the reference the other stores are
// checked against. Create one with [NewStore].
type Store struct {
	mu    sync.Mutex
	jobs  map[string]*memJob
	bytes int64
}

type memJob struct {
	job     batch.Job
	targets []batch.TargetRecord
}

var _ batch.Store = (*Store)(nil)

// NewStore returns an empty in-memory store.
func NewStore() *Store {
	return &Store{jobs: make(map[string]*memJob)}
}

// copyJob returns a deep copy of j's targets, with or without results.
func (j *memJob) copyTargets(withResults bool) []batch.TargetRecord {
	out := slices.Clone(j.targets)
	for i := range out {
		if withResults {
			out[i].Result = slices.Clone(out[i].Result)
		} else {
			out[i].Result = nil
		}
	}
	return out
}

func ctxErr(ctx context.Context) error { return context.Cause(ctx) }

// Create implements [batch.Store].
func (s *Store) Create(ctx context.Context, nj batch.NewJob, lim batch.Limits) (batch.Job, bool, error) {
	if err := ctxErr(ctx); err != nil {
		return batch.Job{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var reuse *memJob
	callerLive, totalLive := 0, 0
	for _, j := range s.jobs {
		if j.job.Status.Live() {
			totalLive++
			if j.job.Caller.Name == nj.Caller.Name {
				callerLive++
			}
		}
		if j.job.Caller.Name != nj.Caller.Name || j.job.IdemKey != nj.IdemKey ||
			j.job.Status == batch.JobCancelled || j.job.Status == batch.JobFailed ||
			!j.job.Lease.Add(lim.TTL).After(nj.Now) {
			continue
		}
		if reuse == nil || j.job.CreatedAt.After(reuse.job.CreatedAt) {
			reuse = j
		}
	}
	if reuse != nil {
		reuse.job.Lease = nj.Now
		return reuse.job, true, nil
	}
	if callerLive >= lim.JobsPerCaller {
		return batch.Job{}, false, batch.ErrCallerBusy
	}
	if totalLive >= lim.JobsTotal {
		return batch.Job{}, false, batch.ErrBusy
	}
	j := &memJob{job: batch.Job{
		ID:           nj.ID,
		Caller:       nj.Caller,
		IdemKey:      nj.IdemKey,
		Status:       batch.JobQueued,
		TargetsTotal: len(nj.Targets),
		CreatedAt:    nj.Now,
		Lease:        nj.Now,
	}}
	for i, t := range nj.Targets {
		j.targets = append(j.targets, batch.TargetRecord{Idx: i, Target: t, Status: batch.TargetPending})
	}
	s.jobs[nj.ID] = j
	return j.job, false, nil
}

// Claim implements [batch.Store].
func (s *Store) Claim(ctx context.Context, runner string, now time.Time) (batch.Job, []batch.TargetRecord, error) {
	if err := ctxErr(ctx); err != nil {
		return batch.Job{}, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var oldest *memJob
	for _, j := range s.jobs {
		if j.job.Status != batch.JobQueued {
			continue
		}
		if oldest == nil || j.job.CreatedAt.Before(oldest.job.CreatedAt) ||
			j.job.CreatedAt.Equal(oldest.job.CreatedAt) && j.job.ID < oldest.job.ID {
			oldest = j
		}
	}
	if oldest == nil {
		return batch.Job{}, nil, batch.ErrNotFound
	}
	oldest.job.Status = batch.JobRunning
	oldest.job.Runner = runner
	oldest.job.Heartbeat = now
	return oldest.job, oldest.copyTargets(false), nil
}

// StartTarget implements [batch.Store].
func (s *Store) StartTarget(ctx context.Context, jobID string, idx int, now time.Time) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[jobID]
	if !ok || idx < 0 || idx >= len(j.targets) {
		return batch.ErrNotFound
	}
	if j.job.Status != batch.JobRunning || j.targets[idx].Status != batch.TargetPending {
		return batch.ErrFinished
	}
	j.targets[idx].Status = batch.TargetRunning
	j.job.Heartbeat = now
	return nil
}

// FinishTarget implements [batch.Store].
func (s *Store) FinishTarget(ctx context.Context, jobID string, fin batch.TargetFinish, now time.Time) (batch.JobStatus, error) {
	if err := ctxErr(ctx); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[jobID]
	if !ok || fin.Idx < 0 || fin.Idx >= len(j.targets) {
		return "", batch.ErrNotFound
	}
	t := &j.targets[fin.Idx]
	if t.Status != batch.TargetRunning {
		return "", batch.ErrFinished
	}
	t.Status, t.Error, t.Hint, t.Outcome = fin.Status, fin.Error, fin.Hint, fin.Outcome
	t.Result = slices.Clone(fin.Result)
	n := t.Bytes()
	j.job.Bytes += n
	s.bytes += n
	j.job.TargetsDone++
	j.job.Lease = now
	j.job.Heartbeat = now
	return j.job.Status, nil
}

// FinishJob implements [batch.Store].
func (s *Store) FinishJob(ctx context.Context, jobID string, now time.Time) (batch.JobStatus, error) {
	if err := ctxErr(ctx); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[jobID]
	if !ok {
		return "", batch.ErrNotFound
	}
	if j.job.Status != batch.JobRunning {
		return j.job.Status, nil
	}
	okN, failedN := 0, 0
	for _, t := range j.targets {
		switch t.Status {
		case batch.TargetDone:
			okN++
		case batch.TargetFailed:
			failedN++
		}
	}
	j.job.Status = batch.AggregateStatus(okN, failedN)
	j.job.FinishedAt = now
	j.job.Lease = now
	j.job.Runner = ""
	return j.job.Status, nil
}

// withOwned runs fn under the lock on the caller's job, or returns
// ErrNotFound for an unknown or foreign id.
func (s *Store) withOwned(ctx context.Context, caller, jobID string, fn func(j *memJob) error) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[jobID]
	if !ok || j.job.Caller.Name != caller {
		return batch.ErrNotFound
	}
	return fn(j)
}

// Cancel implements [batch.Store].
func (s *Store) Cancel(ctx context.Context, caller, jobID string, now time.Time) error {
	return s.withOwned(ctx, caller, jobID, func(j *memJob) error {
		if j.job.Status.Finished() {
			return batch.ErrFinished
		}
		j.job.Status = batch.JobCancelled
		j.job.FinishedAt = now
		j.job.Lease = now
		return nil
	})
}

// Get implements [batch.Store].
func (s *Store) Get(ctx context.Context, caller, jobID string, withResults bool) (job batch.Job, targets []batch.TargetRecord, err error) {
	err = s.withOwned(ctx, caller, jobID, func(j *memJob) error {
		job, targets = j.job, j.copyTargets(withResults)
		return nil
	})
	return job, targets, err
}

// GetTarget implements [batch.Store].
func (s *Store) GetTarget(ctx context.Context, caller, jobID string, idx int) (job batch.Job, target batch.TargetRecord, err error) {
	err = s.withOwned(ctx, caller, jobID, func(j *memJob) error {
		if idx < 0 || idx >= len(j.targets) {
			return batch.ErrNotFound
		}
		job, target = j.job, j.targets[idx]
		target.Result = slices.Clone(target.Result)
		return nil
	})
	return job, target, err
}

// List implements [batch.Store].
func (s *Store) List(ctx context.Context, caller string, limit int) ([]batch.Job, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []batch.Job
	for _, j := range s.jobs {
		if j.job.Caller.Name == caller {
			out = append(out, j.job)
		}
	}
	slices.SortFunc(out, func(a, b batch.Job) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Touch implements [batch.Store]. It writes every touch; it has nothing to
// gain from coalescing.
func (s *Store) Touch(ctx context.Context, caller, jobID string, now time.Time) error {
	return s.withOwned(ctx, caller, jobID, func(j *memJob) error {
		if now.After(j.job.Lease) {
			j.job.Lease = now
		}
		return nil
	})
}

// remove deletes a job and takes its bytes off the total.
func (s *Store) remove(j *memJob) {
	delete(s.jobs, j.job.ID)
	s.bytes -= j.job.Bytes
}

// Sweep implements [batch.Store].
func (s *Store) Sweep(ctx context.Context, leaseBefore time.Time) (int, error) {
	if err := ctxErr(ctx); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, j := range s.jobs {
		if j.job.Status.Finished() && j.job.Lease.Before(leaseBefore) {
			s.remove(j)
			n++
		}
	}
	return n, nil
}

// Evict implements [batch.Store].
func (s *Store) Evict(ctx context.Context, maxBytes int64) (int, error) {
	if err := ctxErr(ctx); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bytes <= maxBytes {
		return 0, nil
	}
	var finished []*memJob
	for _, j := range s.jobs {
		if j.job.Status.Finished() {
			finished = append(finished, j)
		}
	}
	slices.SortFunc(finished, func(a, b *memJob) int {
		if c := a.job.Lease.Compare(b.job.Lease); c != 0 {
			return c
		}
		return strings.Compare(a.job.ID, b.job.ID)
	})
	n := 0
	for _, j := range finished {
		if s.bytes <= maxBytes {
			break
		}
		s.remove(j)
		n++
	}
	return n, nil
}

// MarkInFlightFailed implements [batch.Store]. The in-memory store serves one
// process, so every live job is in flight.
func (s *Store) MarkInFlightFailed(ctx context.Context, runner, reason string, staleBefore, now time.Time) (int, error) {
	if err := ctxErr(ctx); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, j := range s.jobs {
		for i := range j.targets {
			t := &j.targets[i]
			if t.Status != batch.TargetRunning {
				continue
			}
			t.Status, t.Error, t.Outcome = batch.TargetFailed, reason, batch.OutcomeOther
			j.job.Bytes += t.Bytes()
			s.bytes += t.Bytes()
			j.job.TargetsDone++
		}
		if !j.job.Status.Live() {
			continue
		}
		j.job.Status = batch.JobFailed
		j.job.Error = reason
		j.job.FinishedAt = now
		j.job.Lease = now
		j.job.Runner = ""
		n++
	}
	return n, nil
}

// Stats implements [batch.Store].
func (s *Store) Stats(ctx context.Context) (batch.Stats, error) {
	if err := ctxErr(ctx); err != nil {
		return batch.Stats{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := batch.Stats{Bytes: s.bytes}
	for _, j := range s.jobs {
		switch j.job.Status {
		case batch.JobQueued:
			st.Queued++
		case batch.JobRunning:
			st.Running++
		}
	}
	return st, nil
}
