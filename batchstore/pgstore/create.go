package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// Create implements [batch.Store.Create]. Reuse, the caps and the insert
// are one READ COMMITTED transaction that no other node can race:
//
//  1. It takes a transaction-scoped advisory lock on the caller, as a
//     statement of its own, so that every statement after it sees what the
//     lock's previous holder committed. Creates of one caller run one at a
//     time from here, on every node: the reuse lookup, the caller's live
//     count and, for a job with a webhook, its pending webhook events
//     cannot go stale before the insert.
//  2. If no job is reused and the caller is under its cap, it takes the
//     global advisory lock, again as a statement of its own, and inserts
//     the job only if the live jobs, counted by the statement after the
//     lock, are under the total cap.
//
// Far from the total cap, step 2 takes the global lock shared, so that
// the creates of every node do not wait for each other's commits, and
// inserts only if the live jobs are under the cap less the server's
// max_connections: the inserts its count cannot see are those of the
// creates in flight beside it, each on a connection of its own, so fewer
// than that. Near the cap it takes the lock exclusive, which waits for
// the shared holders to commit; an insert the shared path refuses commits
// nothing and the create runs again that way.
//
// The locks are released at commit. They are always taken in that order
// (caller, then global), so they cannot deadlock. The statements travel in
// two pipelined round trips. Under REPEATABLE READ or SERIALIZABLE the
// locks would protect nothing (the snapshot would predate the wait), so
// the transaction sets READ COMMITTED itself. SERIALIZABLE with retries
// is slower under contention: BenchmarkCreateCaps compares the two, and
// docs/design/postgres-store.md in the repository says why.
func (s *Store) Create(ctx context.Context, p batchdriver.CreateParams) (job batchdriver.Job, reused bool, err error) {
	if len(p.Skipped) >= len(p.Targets) {
		return batchdriver.Job{}, false, batchdriver.ErrNoTargets // a job without a target to drain could never end
	}
	skip, err := encodeSkipped(p)
	if err != nil {
		return batchdriver.Job{}, false, fmt.Errorf("pgstore: create job: %w", err)
	}
	ctx, cancel, err := s.begin(ctx)
	defer cancel()
	if err != nil {
		return batchdriver.Job{}, false, s.wrap(ctx, "create job", err)
	}
	urls, opts, err := encodeTargets(p.Targets)
	if err != nil {
		return batchdriver.Job{}, false, fmt.Errorf("pgstore: create job: %w", err)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return batchdriver.Job{}, false, s.wrap(ctx, "create job", err)
	}
	defer conn.Release()
	defer rollback(conn) // a no-op after the commit
	exclusive := p.Limits.JobsTotal <= cmp.Or(s.slackForTest, s.capSlack) || s.off.PGSharedCreates
	job, reused, err = s.create(ctx, conn, p, urls, opts, skip, exclusive)
	if errors.Is(err, errNearCap) {
		job, reused, err = s.create(ctx, conn, p, urls, opts, skip, true)
	}
	if err != nil {
		return batchdriver.Job{}, false, s.wrap(ctx, "create job", err)
	}
	if !reused {
		s.feed.changed("")
	}
	return job, reused, nil
}

// errNearCap is create's answer when the shared path found the live jobs
// too near the total cap to insert: it committed nothing.
var errNearCap = errors.New("pgstore: near the total cap")

// create runs one create transaction on conn, taking the global lock
// exclusive or shared (see Create).
func (s *Store) create(ctx context.Context, conn *pgxpool.Conn, p batchdriver.CreateParams, urls [][]byte, opts []string, skip skippedArgs, exclusive bool) (batchdriver.Job, bool, error) {
	now := s.now(p.Now)
	b := &pgx.Batch{}
	b.Queue(beginTx)
	b.Queue(boundTx) // the transaction waits on the store between the two batches
	b.Queue(s.q.lockXact, s.callerKey(p.Caller.Name))
	b.Queue(s.q.reuse, now, p.Caller.Name, p.IdemKey, p.Limits.TTL)
	b.Queue(s.q.callerLive, p.Caller.Name, p.Limits.JobsPerCaller)
	capHooks := p.WebhookURL != "" && p.Limits.WebhooksPerCaller > 0
	if capHooks {
		// Under the caller's lock: no other create of this caller can add
		// to the count; a job's end moves it from a job to an event, and a
		// delivery only lowers it.
		b.Queue(s.q.hookPending, p.Caller.Name)
	}
	br := conn.SendBatch(ctx, b)
	var (
		job      batchdriver.Job
		found    bool
		live     int
		hooks    int
		firstErr error
	)
	for range 3 { // BEGIN, its bound, the lock
		if _, err := br.Exec(); firstErr == nil {
			firstErr = err
		}
	}
	if rows, err := br.Query(); err == nil {
		for rows.Next() {
			if job, err = scanJob(rows); err != nil {
				break
			}
			found = true
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
		if firstErr == nil {
			firstErr = err
		}
	} else if firstErr == nil {
		firstErr = err
	}
	if err := br.QueryRow().Scan(&live); firstErr == nil {
		firstErr = err
	}
	if capHooks {
		if err := br.QueryRow().Scan(&hooks); firstErr == nil {
			firstErr = err
		}
	}
	if err := errors.Join(firstErr, br.Close()); err != nil {
		return batchdriver.Job{}, false, err
	}
	if found {
		if _, err := conn.Exec(ctx, `COMMIT`); err != nil {
			return batchdriver.Job{}, false, err
		}
		return job, true, nil
	}
	if live >= p.Limits.JobsPerCaller {
		return batchdriver.Job{}, false, batchdriver.ErrCallerBusy
	}
	if capHooks && hooks >= p.Limits.WebhooksPerCaller {
		return batchdriver.Job{}, false, batchdriver.ErrWebhooksBusy
	}

	b = &pgx.Batch{}
	slack := 0
	if exclusive {
		b.Queue(s.q.lockXact, s.globalKey)
	} else {
		b.Queue(s.q.lockXactShared, s.globalKey)
		slack = cmp.Or(s.slackForTest, -1) // -1: the server's max_connections
	}
	var webhook *string // NULL for none
	var events *int16   // NULL for none, and for the default events
	if p.WebhookURL != "" {
		webhook = &p.WebhookURL
		if p.WebhookEvents != 0 {
			e := int16(p.WebhookEvents)
			events = &e
		}
	}
	b.Queue(s.q.insert, p.Limits.JobsTotal, p.ID, p.Caller.Name, p.Caller.Class, p.Caller.Restricted,
		p.IdemKey, len(p.Targets), now, urls, opts, webhook, p.RetryOf, retryIdx(p), p.Trace.Parent, p.Trace.State, timeOrNull(p.Deadline),
		encodeMetadata(p.Metadata), p.CustomIDs, skip.idx, skip.errors, skip.hints, skip.outcomes, skip.bytes, events, slack)
	b.Queue(`COMMIT`)
	br = conn.SendBatch(ctx, b)
	_, firstErr = br.Exec()
	inserted := false
	if err := br.QueryRow().Scan(&job.CreatedAt, &job.Lease); err == nil {
		inserted = true
	} else if !errors.Is(err, pgx.ErrNoRows) && firstErr == nil {
		firstErr = err
	}
	if _, err := br.Exec(); firstErr == nil {
		firstErr = err
	}
	if err := errors.Join(firstErr, br.Close()); err != nil {
		return batchdriver.Job{}, false, err
	}
	if !inserted {
		if !exclusive {
			return batchdriver.Job{}, false, errNearCap
		}
		return batchdriver.Job{}, false, batchdriver.ErrBusy
	}
	return batchdriver.Job{
		ID:            p.ID,
		Caller:        p.Caller,
		IdemKey:       p.IdemKey,
		Status:        batchdriver.JobQueued,
		TargetsTotal:  len(p.Targets),
		CreatedAt:     job.CreatedAt.UTC(),
		Lease:         job.Lease.UTC(),
		RetryOf:       p.RetryOf,
		RetryIdx:      slices.Clone(p.RetryIdx),
		WebhookURL:    p.WebhookURL,
		WebhookEvents: p.WebhookEvents,
		Trace:         p.Trace,
		Deadline:      utcOrZero(p.Deadline),
		Metadata:      maps.Clone(p.Metadata),
		CustomIDs:     slices.Clone(p.CustomIDs),
		TargetsDone:   len(skip.idx),
		Bytes:         skip.bytes,
		Skipped:       ints(skip.idx),
	}, false, nil
}

// skippedArgs are the insert's parameters of the skipped targets (see
// migrations/015): their idx, errors, hints and outcomes, NULL for none,
// and the bytes of their errors.
type skippedArgs struct {
	idx           []int32
	errors, hints [][]byte
	outcomes      []string
	bytes         int64
}

// encodeSkipped returns the parameters of p's skipped targets, or an error
// for skipped targets that are not the job's, in idx order, each once.
func encodeSkipped(p batchdriver.CreateParams) (a skippedArgs, err error) {
	for i, f := range p.Skipped {
		if f.Idx < 0 || f.Idx >= len(p.Targets) || i > 0 && f.Idx <= p.Skipped[i-1].Idx {
			return skippedArgs{}, errors.New("skipped targets must be the job's, in idx order, each once")
		}
		a.idx = append(a.idx, int32(f.Idx))
		a.errors = append(a.errors, []byte(f.Error))
		a.hints = append(a.hints, []byte(f.Hint))
		a.outcomes = append(a.outcomes, string(f.Outcome))
		a.bytes += int64(len(f.Error))
	}
	return a, nil
}

// retryIdx is the retry_idx of p: NULL for a job that is no retry.
func retryIdx(p batchdriver.CreateParams) []int32 {
	if p.RetryOf == "" {
		return nil
	}
	idx := make([]int32, len(p.RetryIdx))
	for i, n := range p.RetryIdx {
		idx[i] = int32(n)
	}
	return idx
}

// encodeTargets returns the stored forms of the targets: the URLs as
// bytes, the options verbatim ("" for none).
func encodeTargets(ts []batchdriver.Target) (urls [][]byte, opts []string, err error) {
	urls = make([][]byte, len(ts))
	opts = make([]string, len(ts))
	for i, t := range ts {
		urls[i] = []byte(t.URL)
		opts[i] = string(t.Options)
	}
	return urls, opts, nil
}
