package pgstore

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
	b.Queue(beginTx)
	b.Queue(s.q.lockXact, s.hookKey())
	b.Queue(s.q.hookClaim, s.now(p.Now), p.Limit, p.Runner, p.Lease, p.PerCaller, batchdriver.MaxEventTargets)
	b.Queue(`COMMIT`)
	br := conn.SendBatch(ctx, b)
	var firstErr error
	for range 2 { // BEGIN, the lock
		if _, err := br.Exec(); firstErr == nil {
			firstErr = err
		}
	}
	var hs []claimedHook
	rows, err := br.Query()
	if err == nil {
		hs, err = pgx.CollectRows(rows, scanHook)
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
	ds, err := s.hookTargets(ctx, hs)
	if err != nil {
		return nil, s.wrap(ctx, "claim webhooks", err)
	}
	return ds, nil
}

// claimedHook is a claimed event and, for a per-target event, where its
// targets end.
type claimedHook struct {
	d    batchdriver.WebhookDelivery
	upto int
}

// hookTargets returns the claimed events with the targets of the
// per-target ones, read in one statement after the claim's commit. Not in
// the claim: a claim that waited for a drain write's row lock sees the
// event's row as that write left it (its upto counts the target stored),
// but would read the targets in the snapshot of its start. A finished
// target never changes, so a read after the commit sees every one the
// event counts.
func (s *Store) hookTargets(ctx context.Context, hs []claimedHook) ([]batchdriver.WebhookDelivery, error) {
	ds := make([]batchdriver.WebhookDelivery, len(hs))
	var ids []string
	var from, upto []int32
	at := map[string]int{} // job id → its event in ds
	for i, h := range hs {
		ds[i] = h.d
		if h.d.Event == batchdriver.HookTargets {
			ids, from, upto = append(ids, h.d.JobID), append(from, int32(h.d.Cursor)), append(upto, int32(h.upto))
			at[h.d.JobID] = i
			ds[i].Targets = []batchdriver.WebhookTarget{}
		}
	}
	if len(ids) == 0 {
		return ds, nil
	}
	rows, err := s.pool.Query(ctx, s.q.hookTargets, ids, from, upto)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id, status, outcome, custom string
		var idx int
		if err := rows.Scan(&id, &idx, &status, &outcome, &custom); err != nil {
			return nil, err
		}
		d := &ds[at[id]]
		d.Targets = append(d.Targets, batchdriver.WebhookTarget{Idx: idx, CustomID: custom,
			Status: batchdriver.TargetStatus(status), Outcome: batchdriver.Outcome(outcome)})
	}
	return ds, rows.Err()
}

// scanHook reads a row of hookClaim. A per-target event leaves out the
// snapshot columns, those of a job that may have finished; hookTargets
// reads its targets.
func scanHook(row pgx.CollectableRow) (claimedHook, error) {
	var d batchdriver.WebhookDelivery
	var status string
	var ageMicros int64
	var deadline *time.Time
	var metadata *string
	var events int16
	var upto int
	err := row.Scan(&d.JobID, &d.URL, &status, &d.Error, &d.TargetsTotal, &d.TargetsOK, &d.TargetsFailed,
		&d.CreatedAt, &d.FinishedAt, &d.Lease, &d.Attempt, &ageMicros, &d.Caller, &deadline, &metadata,
		&events, &d.Cursor, &upto, &d.Since)
	if err != nil {
		return claimedHook{}, err
	}
	d.Metadata = decodeMetadata(metadata)
	if deadline != nil {
		d.Deadline = deadline.UTC()
	}
	d.Status, d.Age = batchdriver.JobStatus(status), time.Duration(ageMicros)*time.Microsecond
	d.CreatedAt, d.FinishedAt, d.Lease, d.Since = d.CreatedAt.UTC(), d.FinishedAt.UTC(), d.Lease.UTC(), d.Since.UTC()
	d.Event = batchdriver.HookFinished
	if batchdriver.HookEvents(events).Has(batchdriver.HookTargets) && upto > d.Cursor {
		d.Event, d.Status, d.Error, d.TargetsOK, d.TargetsFailed = batchdriver.HookTargets, "", "", 0, 0
		d.FinishedAt, d.Lease = time.Time{}, time.Time{}
	}
	return claimedHook{d, upto}, nil
}

// hookKey is the advisory lock key of the outbox's claims.
func (s *Store) hookKey() int64 { return lockKey(s.opts.Schema, "webhook claims") }

// FinishWebhook implements [batch.Store.FinishWebhook] in one statement,
// fenced by the claim's runner, attempt and cursor.
func (s *Store) FinishWebhook(ctx context.Context, p batchdriver.FinishWebhookParams) error {
	ctx, cancel, err := s.begin(ctx)
	defer cancel()
	if err != nil {
		return s.wrap(ctx, "finish webhook", err)
	}
	fence := []any{p.JobID, p.Runner, p.Attempt, p.Cursor}
	var n int64
	switch {
	case p.Retry:
		var tag pgconn.CommandTag
		tag, err = s.pool.Exec(ctx, s.q.hookRetry, append(fence, s.now(p.Now), p.RetryIn)...)
		n = tag.RowsAffected()
	case p.Drop:
		var tag pgconn.CommandTag
		tag, err = s.pool.Exec(ctx, s.q.hookDone, fence...)
		n = tag.RowsAffected()
	default:
		err = s.pool.QueryRow(ctx, s.q.hookDelivered, append(fence, s.now(p.Now))...).Scan(&n)
	}
	if err != nil {
		return s.wrap(ctx, "finish webhook", err)
	}
	if n == 0 {
		return batchdriver.ErrNotHeld
	}
	return nil
}
