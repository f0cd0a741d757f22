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
	created_at, finished_at, lease, attempts, due_since, caller, deadline, metadata, events, sent, upto`

// A job with per-target events has one row for all its events (see
// schema/013): idle, due at hookNever, while it has nothing to send;
// made due by the drain's writes (qHookReady) and the trigger at the
// job's end; moved on to its next event by a delivery (qHookNext).
const (
	hookNever   = `9223372036854775807`
	qHookStream = `INSERT INTO batch_webhook (job_id, caller, url, status, error, targets_total, targets_ok, targets_failed,
		created_at, finished_at, lease, due_since, due_at, deadline, metadata, events)
		VALUES (?1, ?2, ?3, '', '', ?4, 0, 0, ?5, 0, 0, ?5, ` + hookNever + `, ?6, ?7, ?8)`
	qHookReady = `UPDATE batch_webhook SET ready = max(ready, ?2),
		due_since = iif(runner = '' AND due_at = ` + hookNever + `, ?3, due_since),
		due_at = iif(runner = '' AND due_at = ` + hookNever + `, ?3, due_at)
		WHERE job_id = ?1`
	qHookNext = `UPDATE batch_webhook SET sent = upto, attempts = 0, runner = '', due_since = ?5,
		due_at = iif(upto < ready OR (status <> '' AND events & 1 <> 0), ?5, ` + hookNever + `)
		WHERE job_id = ?1 AND runner = ?2 AND attempts = ?3 AND sent = ?4 AND upto > sent`
	// A finished job's idle row has nothing left to send.
	qHookGone = `DELETE FROM batch_webhook WHERE job_id = ? AND runner = '' AND due_at = ` + hookNever + ` AND status <> ''`
	// The targets of an event: the job's custom ids, then its finished
	// targets in the event's range.
	qHookJob     = `SELECT seq, custom_ids FROM batch_job WHERE id = ?`
	qHookTargets = `SELECT idx, status, outcome FROM batch_target
		WHERE job_seq = +?1 AND idx >= +?2 AND idx < +?3 AND status IN ('done', 'failed') ORDER BY idx`
)

// The outbox's statements. The claim walks batch_webhook_due in due order
// without a LIMIT ? (which would re-prepare, see qJob) and picks the events
// round-robin across callers as it goes (see hookPicker); qHookBusy counts
// each caller's events under an unexpired claim, for the per-caller cap.
const (
	qHookDue  = `SELECT 1 FROM batch_webhook WHERE due_at <= ? LIMIT 1`
	qHookPick = `SELECT job_id, caller FROM batch_webhook WHERE due_at <= ? ORDER BY due_at, job_id`
	qHookBusy = `SELECT caller FROM batch_webhook INDEXED BY batch_webhook_claimed WHERE runner <> '' AND due_at > ?`
	// A claim of a row with per-target events fixes the event's targets
	// at its first attempt: upto, unless an event is out already.
	qHookClaim = `UPDATE batch_webhook SET runner = ?1, attempts = attempts + 1, due_at = ?2,
		upto = iif(events & 2 = 0 OR upto > sent, upto, min(ready, sent + ?4))
		WHERE job_id = ?3 RETURNING ` + hookCols
	qHookDone  = `DELETE FROM batch_webhook WHERE job_id = ? AND runner = ? AND attempts = ? AND sent = ?`
	qHookRetry = `UPDATE batch_webhook SET runner = '', due_at = ?5 WHERE job_id = ?1 AND runner = ?2 AND attempts = ?3 AND sent = ?4`
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
			var d batchdriver.WebhookDelivery
			upto := 0
			err := sqlitex.Execute(conn, qHookClaim, &sqlitex.ExecOptions{
				Args: []any{p.Runner, now + int64(p.Lease), id, batchdriver.MaxEventTargets},
				ResultFunc: func(stmt *sqlite.Stmt) error {
					d, upto = scanHook(stmt, now)
					return nil
				},
			})
			if err == nil && d.Event == batchdriver.HookTargets {
				d.Targets, err = hookTargets(conn, d.JobID, d.Cursor, upto)
			}
			if err != nil {
				return err
			}
			if d.JobID != "" {
				ds = append(ds, d)
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
// A per-target event's upto is where its targets end; its snapshot
// columns, those of a job that may have finished, are left out.
func scanHook(stmt *sqlite.Stmt, now int64) (d batchdriver.WebhookDelivery, upto int) {
	d = batchdriver.WebhookDelivery{
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
		Event:         batchdriver.HookFinished,
		Cursor:        stmt.ColumnInt(16),
		Since:         timeAt(stmt, 11),
	}
	events, upto := batchdriver.HookEvents(stmt.ColumnInt(15)), stmt.ColumnInt(17)
	if events.Has(batchdriver.HookTargets) && upto > d.Cursor {
		d.Event, d.Status, d.Error, d.TargetsOK, d.TargetsFailed = batchdriver.HookTargets, "", "", 0, 0
		d.FinishedAt, d.Lease = time.Time{}, time.Time{}
	}
	return d, upto
}

// hookTargets reads the finished targets from..upto-1 of job id, with
// their custom ids; none (not nil) once the job is gone.
func hookTargets(conn *sqlite.Conn, id string, from, upto int) ([]batchdriver.WebhookTarget, error) {
	out := []batchdriver.WebhookTarget{}
	var seq int64
	var ids []string
	err := sqlitex.Execute(conn, qHookJob, &sqlitex.ExecOptions{
		Args: []any{id},
		ResultFunc: func(stmt *sqlite.Stmt) error {
			seq, ids = stmt.ColumnInt64(0), decodeCustomIDs(stmt.ColumnText(1))
			return nil
		},
	})
	if err != nil || seq == 0 {
		return out, err
	}
	err = sqlitex.Execute(conn, qHookTargets, &sqlitex.ExecOptions{
		Args: []any{seq, from, upto},
		ResultFunc: func(stmt *sqlite.Stmt) error {
			t := batchdriver.WebhookTarget{Idx: stmt.ColumnInt(0),
				Status: batchdriver.TargetStatus(stmt.ColumnText(1)), Outcome: batchdriver.Outcome(stmt.ColumnText(2))}
			if t.Idx < len(ids) {
				t.CustomID = ids[t.Idx]
			}
			out = append(out, t)
			return nil
		},
	})
	return out, err
}

// FinishWebhook implements [batch.Store.FinishWebhook], fenced by the
// claim's runner, attempt and cursor: a retry, or the delivery of a
// per-target event, which moves the job's row on to its next event (and
// deletes it when it has none left), or else the row's delete.
func (s *Store) FinishWebhook(ctx context.Context, p batchdriver.FinishWebhookParams) error {
	p.Now = callNow(p.Now)
	now := p.Now.UnixNano()
	return s.write(ctx, "finish webhook", func(conn *sqlite.Conn) error {
		exec := func(q string, args ...any) (int, error) {
			err := sqlitex.Execute(conn, q, &sqlitex.ExecOptions{Args: args})
			return conn.Changes(), err
		}
		fence := []any{p.JobID, p.Runner, p.Attempt, p.Cursor}
		var n int
		var err error
		switch {
		case p.Retry:
			n, err = exec(qHookRetry, append(fence, now+int64(p.RetryIn))...)
		case p.Drop:
			n, err = exec(qHookDone, fence...)
		default:
			if n, err = exec(qHookNext, append(fence, now)...); err == nil && n == 1 {
				_, err = exec(qHookGone, p.JobID)
			} else if err == nil {
				n, err = exec(qHookDone, fence...)
			}
		}
		if err == nil && n == 0 {
			err = batchdriver.ErrNotHeld
		}
		return err
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
