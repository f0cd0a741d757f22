package batchstore

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// Create implements [batch.Store.Create]. Reuse, the caps and the insert
// run in one immediate transaction: it holds the database's write lock from
// its first read, so no concurrent Create can slip in between the checks
// and the insert, in this process or any other.
func (s *Store) Create(ctx context.Context, p batchdriver.CreateParams) (job batchdriver.Job, reused bool, err error) {
	p.Now = callNow(p.Now)
	skipped, err := skippedByIdx(p)
	if err != nil {
		return batchdriver.Job{}, false, err
	}
	err = s.writeSized(ctx, "create job", 256*len(p.Targets), func(conn *sqlite.Conn) error {
		var err error
		job, reused, err = create(conn, p, skipped)
		return err
	})
	if err != nil {
		return batchdriver.Job{}, false, err
	}
	return job, reused, nil
}

func create(conn *sqlite.Conn, nj batchdriver.CreateParams, skipped map[int]batchdriver.TargetFinish) (batchdriver.Job, bool, error) {
	now, lim := nj.Now.UnixNano(), nj.Limits

	// 1. Idempotent reuse, before the caps: the newest job of this caller
	// with this key whose lease is unexpired and that was not cancelled or
	// failed. Rows are few (one key); picking the newest here rather than
	// with ORDER BY … LIMIT 1 keeps the statement from re-preparing (see
	// qJob).
	var job batchdriver.Job
	var seq int64
	found := false
	err := sqlitex.Execute(conn, `SELECT `+jobCols+` FROM batch_job j
		WHERE j.idem_key = ? AND j.caller = ? AND j.status NOT IN ('cancelled', 'failed')
		  AND j.lease > ?`, &sqlitex.ExecOptions{
		Args: []any{nj.IdemKey, nj.Caller.Name, minus(now, lim.TTL)},
		ResultFunc: func(stmt *sqlite.Stmt) error {
			if s, j := scanJob(stmt); !found || s > seq {
				seq, job, found = s, j, true
			}
			return nil
		},
	})
	if err != nil {
		return batchdriver.Job{}, false, fmt.Errorf("find reusable job: %w", err)
	}
	if found {
		err := sqlitex.Execute(conn, `UPDATE batch_job SET lease = ? WHERE seq = ?`,
			&sqlitex.ExecOptions{Args: []any{now, seq}})
		if err != nil {
			return batchdriver.Job{}, false, fmt.Errorf("bump lease: %w", err)
		}
		job.Lease = nj.Now.UTC()
		return job, true, nil
	}

	// 2. The caps: the caller's live jobs first (a partial index holds only
	// live jobs), then all (a maintained counter).
	n, err := countInt(conn, `SELECT count(*) FROM batch_job WHERE caller = ? AND `+whereLive, nj.Caller.Name)
	if err != nil {
		return batchdriver.Job{}, false, fmt.Errorf("count caller's live jobs: %w", err)
	}
	if n >= int64(lim.JobsPerCaller) {
		return batchdriver.Job{}, false, batchdriver.ErrCallerBusy
	}
	if nj.WebhookURL != "" && lim.WebhooksPerCaller > 0 {
		if err := webhookRoom(conn, nj.Caller.Name, lim.WebhooksPerCaller); err != nil {
			return batchdriver.Job{}, false, err
		}
	}
	n, err = countInt(conn, `SELECT queued + running FROM batch_stat WHERE id = 1`)
	if err != nil {
		return batchdriver.Job{}, false, fmt.Errorf("count live jobs: %w", err)
	}
	if n >= int64(lim.JobsTotal) {
		return batchdriver.Job{}, false, batchdriver.ErrBusy
	}

	// 3. The insert.
	var webhook, events any // NULL for none, and for the default events
	if nj.WebhookURL != "" {
		webhook = nj.WebhookURL
		if nj.WebhookEvents != 0 {
			events = int64(nj.WebhookEvents)
		}
	}
	// A skipped target is stored finished, and the queued job's row holds
	// its progress, as a job handed back does (see schema/012).
	var idx []int
	var bytes int64
	for _, f := range nj.Skipped {
		idx = append(idx, f.Idx)
		bytes += int64(len(f.Error))
	}
	err = sqlitex.Execute(conn, `INSERT INTO batch_job
		(id, caller, caller_class, caller_restricted, idem_key, status, targets_total, created_at, lease,
		 retry_of, retry_idx, webhook, trace_parent, trace_state, deadline, metadata, custom_ids,
		 targets_done, bytes, skipped, webhook_events)
		VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, &sqlitex.ExecOptions{
		Args: []any{nj.ID, nj.Caller.Name, nj.Caller.Class, nj.Caller.Restricted, nj.IdemKey,
			len(nj.Targets), now, now, nj.RetryOf, encodeIdx(nj.RetryIdx), webhook, nj.Trace.Parent, nj.Trace.State,
			nanosOrNull(nj.Deadline), encodeMetadata(nj.Metadata), encodeCustomIDs(nj.CustomIDs),
			len(idx), bytes, encodeSkipped(idx), events},
	})
	if err != nil {
		return batchdriver.Job{}, false, fmt.Errorf("insert job: %w", err)
	}
	if nj.WebhookURL != "" && nj.WebhookEvents.Has(batchdriver.HookTargets) {
		// The job's events' row, idle until a target finishes (see
		// schema/012).
		err = sqlitex.Execute(conn, qHookStream, &sqlitex.ExecOptions{
			Args: []any{nj.ID, nj.Caller.Name, nj.WebhookURL, len(nj.Targets), now,
				nanosOrNull(nj.Deadline), encodeMetadata(nj.Metadata), int64(nj.WebhookEvents)},
		})
		if err != nil {
			return batchdriver.Job{}, false, fmt.Errorf("insert webhook events: %w", err)
		}
	}
	seq = conn.LastInsertRowID()
	for i, t := range nj.Targets {
		q, args := `INSERT INTO batch_target (job_seq, idx, url, options, status)
			VALUES (?, ?, ?, ?, 'pending')`, []any{seq, i, t.URL, string(t.Options)}
		if f, ok := skipped[i]; ok {
			q = `INSERT INTO batch_target (job_seq, idx, url, options, status, error, hint, outcome, bytes)
				VALUES (?, ?, ?, ?, 'failed', ?, ?, ?, ?)`
			args = append(args, f.Error, f.Hint, string(f.Outcome), len(f.Error))
		}
		if err := sqlitex.Execute(conn, q, &sqlitex.ExecOptions{Args: args}); err != nil {
			return batchdriver.Job{}, false, fmt.Errorf("insert target %d: %w", i, err)
		}
	}
	return batchdriver.Job{
		ID:            nj.ID,
		Caller:        nj.Caller,
		IdemKey:       nj.IdemKey,
		Status:        batchdriver.JobQueued,
		TargetsTotal:  len(nj.Targets),
		CreatedAt:     nj.Now.UTC(),
		Lease:         nj.Now.UTC(),
		RetryOf:       nj.RetryOf,
		RetryIdx:      slices.Clone(nj.RetryIdx),
		WebhookURL:    nj.WebhookURL,
		WebhookEvents: nj.WebhookEvents,
		Trace:         nj.Trace,
		Deadline:      utcOrZero(nj.Deadline),
		Metadata:      maps.Clone(nj.Metadata),
		CustomIDs:     slices.Clone(nj.CustomIDs),
		TargetsDone:   len(idx),
		Bytes:         bytes,
		Skipped:       idx,
	}, false, nil
}

// skippedByIdx returns the skipped targets of a create by idx, or an error
// for a create that skips every target ([batch.ErrNoTargets]) or whose
// skipped targets are not the job's, in idx order, each once.
func skippedByIdx(p batchdriver.CreateParams) (map[int]batchdriver.TargetFinish, error) {
	if len(p.Skipped) >= len(p.Targets) {
		return nil, batchdriver.ErrNoTargets // nothing to drain
	}
	if len(p.Skipped) == 0 {
		return nil, nil
	}
	m := make(map[int]batchdriver.TargetFinish, len(p.Skipped))
	for i, f := range p.Skipped {
		if f.Idx < 0 || f.Idx >= len(p.Targets) || i > 0 && f.Idx <= p.Skipped[i-1].Idx {
			return nil, fmt.Errorf("batchstore: create: skipped targets must be the job's, in idx order, each once")
		}
		m[f.Idx] = f
	}
	return m, nil
}

// webhookRoom returns [batch.ErrWebhooksBusy] if the caller has max
// pending webhook events: its events in the outbox and its jobs that will
// get one (see schema/005). Both counts read an index of the caller's rows.
func webhookRoom(conn *sqlite.Conn, caller string, max int) error {
	n, err := countInt(conn, qHookPending, caller)
	if err != nil {
		return fmt.Errorf("count caller's pending webhooks: %w", err)
	}
	if n >= int64(max) {
		return batchdriver.ErrWebhooksBusy
	}
	return nil
}

// qHookPending counts a caller's pending webhook events for webhookRoom:
// its jobs with a webhook that are live or held, and the rows of its
// other jobs (a row whose status is ” is a live job's: see schema/013).
const qHookPending = `SELECT (SELECT count(*) FROM batch_webhook WHERE caller = ?1 AND status <> '')
	+ (SELECT count(*) FROM batch_job WHERE caller = ?1
		AND webhook IS NOT NULL AND (status IN ('queued', 'running') OR runner <> ''))`

// countInt runs a query that returns one integer.
func countInt(conn *sqlite.Conn, q string, args ...any) (int64, error) {
	var n int64
	err := sqlitex.Execute(conn, q, &sqlitex.ExecOptions{
		Args: args,
		ResultFunc: func(stmt *sqlite.Stmt) error {
			n = stmt.ColumnInt64(0)
			return nil
		},
	})
	return n, err
}
