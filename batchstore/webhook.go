package batchstore

import (
	"cmp"
	"context"
	"slices"
	"time"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// The webhook outbox (see schema/004): a trigger on batch_job writes a job's
// event in the statement that gives the job its final status and releases
// it, so the drain's code paths do not change and a job without a webhook
// pays only the trigger's WHEN clause, once, at its end.

// hookCols are the columns scanHook reads, in order, from batch_webhook.
const hookCols = `job_id, url, status, error, targets_total, targets_ok, targets_failed,
	created_at, finished_at, lease, attempts, due_since, caller, deadline, metadata`

// The outbox's statements. The claim walks batch_webhook_due in due order
// without a LIMIT ? (which would re-prepare, see qJob) and picks the events
// round-robin across callers as it goes (see hookPicker); qHookBusy counts
// each caller's events under an unexpired claim, for the per-caller cap.
const (
	qHookDue   = `SELECT 1 FROM batch_webhook WHERE due_at <= ? LIMIT 1`
	qHookPick  = `SELECT job_id, caller FROM batch_webhook WHERE due_at <= ? ORDER BY due_at, job_id`
	qHookBusy  = `SELECT caller FROM batch_webhook INDEXED BY batch_webhook_claimed WHERE runner <> '' AND due_at > ?`
	qHookClaim = `UPDATE batch_webhook SET runner = ?1, attempts = attempts + 1, due_at = ?2
		WHERE job_id = ?3 RETURNING ` + hookCols
	qHookDone  = `DELETE FROM batch_webhook WHERE job_id = ? AND runner = ? AND attempts = ?`
	qHookRetry = `UPDATE batch_webhook SET runner = '', due_at = ?4 WHERE job_id = ?1 AND runner = ?2 AND attempts = ?3`
	// The reaper's release of claims, due at once.
	qHookRelease    = `UPDATE batch_webhook SET runner = '', due_at = min(due_at, ?1) WHERE runner = ?2 AND runner <> ''`
	qHookReleaseAll = `UPDATE batch_webhook SET runner = '', due_at = min(due_at, ?1) WHERE runner <> ''`
)

// ClaimWebhooks implements [batch.Store.ClaimWebhooks]. It first looks for
// a due event in a point read, so that a runner polling an empty outbox
// never takes the write lock.
func (s *Store) ClaimWebhooks(ctx context.Context, p batchdriver.ClaimWebhooksParams) ([]batchdriver.WebhookDelivery, error) {
	if p.Limit < 1 {
		return nil, nil
	}
	now := callTime(p.Now).UnixNano()
	due := false
	err := s.quickRead(ctx, "claim webhooks", func(conn *sqlite.Conn) error {
		return sqlitex.Execute(conn, qHookDue, &sqlitex.ExecOptions{
			Args:       []any{now},
			ResultFunc: func(*sqlite.Stmt) error { due = true; return nil },
		})
	})
	if err != nil || !due {
		return nil, err
	}
	var ds []batchdriver.WebhookDelivery
	err = s.write(ctx, "claim webhooks", func(conn *sqlite.Conn) error {
		ds = ds[:0]
		pick := newHookPicker(p.Limit, p.PerCaller)
		if p.PerCaller > 0 {
			err := sqlitex.Execute(conn, qHookBusy, &sqlitex.ExecOptions{
				Args:       []any{now},
				ResultFunc: func(stmt *sqlite.Stmt) error { pick.busy[stmt.ColumnText(0)]++; return nil },
			})
			if err != nil {
				return err
			}
		}
		err := sqlitex.Execute(conn, qHookPick, &sqlitex.ExecOptions{
			Args: []any{now},
			ResultFunc: func(stmt *sqlite.Stmt) error {
				if !pick.add(stmt.ColumnText(0), stmt.ColumnText(1)) {
					return errStop
				}
				return nil
			},
		})
		if err != nil && err != errStop {
			return err
		}
		ids := pick.ids()
		for _, id := range ids {
			err := sqlitex.Execute(conn, qHookClaim, &sqlitex.ExecOptions{
				Args: []any{p.Runner, now + int64(p.Lease), id},
				ResultFunc: func(stmt *sqlite.Stmt) error {
					ds = append(ds, scanHook(stmt, now))
					return nil
				},
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ds, nil
}

// hookPicker picks a claim's events round-robin across callers, from the
// due events in due order: every caller's first before anyone's second,
// and none of a caller beyond the per-caller cap (its events under an
// unexpired claim, busy, counted). The walk stops once limit first
// events are picked, since nothing after them comes before them; with
// fewer due callers than limit it reads every due event, which the
// pending cap bounds (webhook_pending_per_caller per caller).
type hookPicker struct {
	limit, perCaller int
	busy             map[string]int // caller → events under an unexpired claim
	rank             map[string]int // caller → its due events seen
	picks            []hookPick
	firsts           int // picks of rank 1
}

type hookPick struct {
	id   string
	rank int
}

func newHookPicker(limit, perCaller int) *hookPicker {
	return &hookPicker{limit: limit, perCaller: perCaller, busy: map[string]int{}, rank: map[string]int{}}
}

// add takes the next due event and reports whether the walk goes on.
func (p *hookPicker) add(id, caller string) bool {
	p.rank[caller]++
	r := p.rank[caller]
	if p.perCaller > 0 && p.busy[caller]+r > p.perCaller {
		return true
	}
	p.picks = append(p.picks, hookPick{id, r})
	if r == 1 {
		p.firsts++
	}
	return p.firsts < p.limit
}

// ids returns the picked events, by rank and then due order, at most limit.
func (p *hookPicker) ids() []string {
	slices.SortStableFunc(p.picks, func(a, b hookPick) int { return cmp.Compare(a.rank, b.rank) })
	ids := make([]string, 0, min(len(p.picks), p.limit))
	for _, pk := range p.picks[:min(len(p.picks), p.limit)] {
		ids = append(ids, pk.id)
	}
	return ids
}

// scanHook reads hookCols; now is the claim's time, for the event's age.
func scanHook(stmt *sqlite.Stmt, now int64) batchdriver.WebhookDelivery {
	return batchdriver.WebhookDelivery{
		JobID:         stmt.ColumnText(0),
		Caller:        stmt.ColumnText(12),
		URL:           stmt.ColumnText(1),
		Status:        batchdriver.JobStatus(stmt.ColumnText(2)),
		Error:         stmt.ColumnText(3),
		TargetsTotal:  stmt.ColumnInt(4),
		TargetsOK:     stmt.ColumnInt(5),
		TargetsFailed: stmt.ColumnInt(6),
		CreatedAt:     timeAt(stmt, 7),
		FinishedAt:    timeAt(stmt, 8),
		Lease:         timeAt(stmt, 9),
		Attempt:       stmt.ColumnInt(10),
		Age:           time.Duration(now - stmt.ColumnInt64(11)),
		Deadline:      timeAt(stmt, 13),
		Metadata:      decodeMetadata(stmt.ColumnText(14)),
	}
}

// FinishWebhook implements [batch.Store.FinishWebhook]: one statement,
// fenced by the claim's runner and attempt.
func (s *Store) FinishWebhook(ctx context.Context, p batchdriver.FinishWebhookParams) error {
	p.Now = callNow(p.Now)
	return s.write(ctx, "finish webhook", func(conn *sqlite.Conn) error {
		q, args := qHookDone, []any{p.JobID, p.Runner, p.Attempt}
		if p.Retry {
			q, args = qHookRetry, append(args, p.Now.UnixNano()+int64(p.RetryIn))
		}
		if err := sqlitex.Execute(conn, q, &sqlitex.ExecOptions{Args: args}); err != nil {
			return err
		}
		if conn.Changes() == 0 {
			return batchdriver.ErrNotHeld
		}
		return nil
	})
}

// releaseHooks releases the webhook claims a reap selects (see
// [batch.Store.Reap]), in its transaction.
func releaseHooks(conn *sqlite.Conn, p batchdriver.ReapParams) error {
	now := p.Now.UnixNano()
	switch {
	case p.AllLive:
		return sqlitex.Execute(conn, qHookReleaseAll, &sqlitex.ExecOptions{Args: []any{now}})
	case p.Runner != "":
		return sqlitex.Execute(conn, qHookRelease, &sqlitex.ExecOptions{Args: []any{now, p.Runner}})
	}
	return nil
}
