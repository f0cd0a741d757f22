package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// Owner-scoped calls: every statement names both the job id and the
// caller, so a job of another caller takes the same path as an unknown id.
// Each is one statement, so it reads one snapshot and costs one round
// trip.

// Cancel implements [batch.Store.Cancel]. It works from any node: the
// runner that drains the job sees the cancel in its next drain write,
// which stores the target in flight and releases the job.
func (s *Store) Cancel(ctx context.Context, p batchdriver.CancelParams) error {
	ctx, cancel, err := s.begin(ctx)
	defer cancel()
	if err != nil {
		return s.wrap(ctx, "cancel job", err)
	}
	var n int
	var status *string
	if err := s.pool.QueryRow(ctx, s.q.cancel, p.JobID, p.Caller, s.now(p.Now)).Scan(&n, &status); err != nil {
		return s.wrap(ctx, "cancel job", err)
	}
	switch {
	case n == 1:
		s.feed.changed(p.JobID)
		return nil
	case status == nil:
		return batchdriver.ErrNotFound
	default:
		return batchdriver.ErrFinished
	}
}

// Get implements [batch.Store.Get]: the job and its targets in one
// statement. Without results it never names the result column, whose
// TOASTed bodies are then never read.
func (s *Store) Get(ctx context.Context, p batchdriver.GetParams) (job batchdriver.Job, targets []batchdriver.TargetRecord, err error) {
	ctx, cancel, err := s.begin(ctx)
	defer cancel()
	if err != nil {
		return batchdriver.Job{}, nil, s.wrap(ctx, "get job", err)
	}
	if p.JobOnly {
		job, err := scanJob(s.pool.QueryRow(ctx, s.q.getJob, p.JobID, p.Caller))
		if errors.Is(err, pgx.ErrNoRows) {
			return batchdriver.Job{}, nil, batchdriver.ErrNotFound
		}
		if err != nil {
			return batchdriver.Job{}, nil, s.wrap(ctx, "get job", err)
		}
		return job, nil, nil
	}
	q := s.q.get
	if p.Results {
		q = s.q.getResults
	}
	rows, err := s.pool.Query(ctx, q, p.JobID, p.Caller)
	if err != nil {
		return batchdriver.Job{}, nil, s.wrap(ctx, "get job", err)
	}
	defer rows.Close()
	found := false
	for rows.Next() {
		var j jobRow
		var t targetRow
		if err := rows.Scan(append(j.dest(), t.dest(p.Results)...)...); err != nil {
			return batchdriver.Job{}, nil, s.wrap(ctx, "get job", err)
		}
		job, found = j.job(), true
		rec, ok, err := t.record()
		if err != nil {
			return batchdriver.Job{}, nil, s.wrap(ctx, "get job", err)
		}
		if ok {
			targets = append(targets, rec)
		}
	}
	if err := rows.Err(); err != nil {
		return batchdriver.Job{}, nil, s.wrap(ctx, "get job", err)
	}
	if !found {
		return batchdriver.Job{}, nil, batchdriver.ErrNotFound
	}
	return job, targets, nil
}

// GetTarget implements [batch.Store.GetTarget].
func (s *Store) GetTarget(ctx context.Context, p batchdriver.GetTargetParams) (batchdriver.Job, batchdriver.TargetRecord, error) {
	ctx, cancel, err := s.begin(ctx)
	defer cancel()
	if err != nil {
		return batchdriver.Job{}, batchdriver.TargetRecord{}, s.wrap(ctx, "get target", err)
	}
	var j jobRow
	var t targetRow
	err = s.pool.QueryRow(ctx, s.q.getTarget, p.JobID, p.Caller, p.Idx).Scan(append(j.dest(), t.dest(true)...)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return batchdriver.Job{}, batchdriver.TargetRecord{}, batchdriver.ErrNotFound
	}
	if err != nil {
		return batchdriver.Job{}, batchdriver.TargetRecord{}, s.wrap(ctx, "get target", err)
	}
	rec, ok, err := t.record()
	if err != nil {
		return batchdriver.Job{}, batchdriver.TargetRecord{}, s.wrap(ctx, "get target", err)
	}
	if !ok {
		return batchdriver.Job{}, batchdriver.TargetRecord{}, batchdriver.ErrNotFound
	}
	return j.job(), rec, nil
}

// List implements [batch.Store.List]: newest by creation time, then by
// insertion. A limit below 1 lists nothing.
func (s *Store) List(ctx context.Context, p batchdriver.ListParams) ([]batchdriver.Job, error) {
	if p.Limit < 1 {
		return nil, nil
	}
	ctx, cancel, err := s.begin(ctx)
	defer cancel()
	if err != nil {
		return nil, s.wrap(ctx, "list jobs", err)
	}
	rows, err := s.pool.Query(ctx, s.q.list, p.Caller, p.Limit, encodeMetadata(p.Metadata))
	if err != nil {
		return nil, s.wrap(ctx, "list jobs", err)
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (batchdriver.Job, error) { return scanJob(row) })
	if err != nil {
		return nil, s.wrap(ctx, "list jobs", err)
	}
	return jobs, nil
}

// Touch implements [batch.Store.Touch] in one statement that writes only
// when the lease would move by [batch.LeaseGrain] or more, so a client
// polling every second writes about once a minute. It never moves a lease
// back.
func (s *Store) Touch(ctx context.Context, p batchdriver.TouchParams) error {
	ctx, cancel, err := s.begin(ctx)
	defer cancel()
	if err != nil {
		return s.wrap(ctx, "touch job", err)
	}
	var n int
	if err := s.pool.QueryRow(ctx, s.q.touch, p.JobID, p.Caller, s.now(p.Now), batchdriver.LeaseGrain).Scan(&n); err != nil {
		return s.wrap(ctx, "touch job", err)
	}
	if n == 0 {
		return batchdriver.ErrNotFound
	}
	return nil
}
