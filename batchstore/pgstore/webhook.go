package pgstore

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// The webhook outbox (see migrations/003): a row trigger on job writes a
// job's event in the statement that gives the job its final status and
// releases it, so no drain statement changes. Events are claimed with FOR
// UPDATE SKIP LOCKED under a lease kept in the row, not under a lock held
// for the delivery: a delivery takes seconds, and a node that dies with
// the event claimed leaves it due again once the lease has passed.

// ClaimWebhooks implements [batch.Store.ClaimWebhooks]: one READ COMMITTED
// transaction that takes the outbox's advisory lock, as a statement of its
// own, then claims in one statement. The lock makes claims on all nodes run
// one after the other, so that each counts the claims the others committed
// and the per-caller cap holds across nodes; a claim is one short
// statement, taken when a node's pool has a free slot. On the database's
// clock, due times and ages are the database's.
func (s *Store) ClaimWebhooks(ctx context.Context, p batchdriver.ClaimWebhooksParams) ([]batchdriver.WebhookDelivery, error) {
	if p.Limit < 1 {
		return nil, nil
	}
	ctx, cancel, err := s.begin(ctx)
	defer cancel()
	if err != nil {
		return nil, s.wrap(ctx, "claim webhooks", err)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, s.wrap(ctx, "claim webhooks", err)
	}
	defer conn.Release()
	defer rollback(conn) // a no-op after the commit
	b := &pgx.Batch{}
	b.Queue(`BEGIN ISOLATION LEVEL READ COMMITTED`)
	b.Queue(s.q.lockXact, s.hookKey())
	b.Queue(s.q.hookClaim, s.now(p.Now), p.Limit, p.Runner, p.Lease, p.PerCaller)
	b.Queue(`COMMIT`)
	br := conn.SendBatch(ctx, b)
	var firstErr error
	for range 2 { // BEGIN, the lock
		if _, err := br.Exec(); firstErr == nil {
			firstErr = err
		}
	}
	var ds []batchdriver.WebhookDelivery
	rows, err := br.Query()
	if err == nil {
		ds, err = pgx.CollectRows(rows, scanHook)
	}
	if firstErr == nil {
		firstErr = err
	}
	if _, err := br.Exec(); firstErr == nil {
		firstErr = err
	}
	if err := errors.Join(firstErr, br.Close()); err != nil {
		return nil, s.wrap(ctx, "claim webhooks", err)
	}
	return ds, nil
}

// scanHook reads a row of hookClaim.
func scanHook(row pgx.CollectableRow) (batchdriver.WebhookDelivery, error) {
	var d batchdriver.WebhookDelivery
	var status string
	var ageMicros int64
	var deadline *time.Time
	var metadata *string
	err := row.Scan(&d.JobID, &d.URL, &status, &d.Error, &d.TargetsTotal, &d.TargetsOK, &d.TargetsFailed,
		&d.CreatedAt, &d.FinishedAt, &d.Lease, &d.Attempt, &ageMicros, &d.Caller, &deadline, &metadata)
	d.Metadata = decodeMetadata(metadata)
	if deadline != nil {
		d.Deadline = deadline.UTC()
	}
	d.Status, d.Age = batchdriver.JobStatus(status), time.Duration(ageMicros)*time.Microsecond
	d.CreatedAt, d.FinishedAt, d.Lease = d.CreatedAt.UTC(), d.FinishedAt.UTC(), d.Lease.UTC()
	return d, err
}

// hookKey is the advisory lock key of the outbox's claims.
func (s *Store) hookKey() int64 { return lockKey(s.opts.Schema, "webhook claims") }

// FinishWebhook implements [batch.Store.FinishWebhook] in one statement,
// fenced by the claim's runner and attempt.
func (s *Store) FinishWebhook(ctx context.Context, p batchdriver.FinishWebhookParams) error {
	ctx, cancel, err := s.begin(ctx)
	defer cancel()
	if err != nil {
		return s.wrap(ctx, "finish webhook", err)
	}
	q, args := s.q.hookDone, []any{p.JobID, p.Runner, p.Attempt}
	if p.Retry {
		q, args = s.q.hookRetry, append(args, s.now(p.Now), p.RetryIn)
	}
	tag, err := s.pool.Exec(ctx, q, args...)
	if err != nil {
		return s.wrap(ctx, "finish webhook", err)
	}
	if tag.RowsAffected() == 0 {
		return batchdriver.ErrNotHeld
	}
	return nil
}
