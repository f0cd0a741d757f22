package batch

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// DeadlineReason is the error of a job that its deadline ended, and of
// each target that ended with [OutcomeExpired].
const DeadlineReason = batchdriver.DeadlineReason

// errJobDeadline is the cause of a fetch context that the job's deadline
// ended.
var errJobDeadline = fmt.Errorf("%s: the job's deadline passed", DeadlineReason)

// deadline is the deadline of a submit with opts: its own (checked
// against Config.MaxDeadline), or Config.MaxDeadline from now, or none.
func (r *Runner) deadline(opts SubmitOptions) (time.Time, error) {
	now := r.cfg.Now()
	maxIn := time.Duration(r.cfg.MaxDeadline)
	d := opts.Deadline
	switch {
	case d.IsZero() && opts.DeadlineIn < 0:
		return time.Time{}, fmt.Errorf("%w: a duration must be positive, got %s", ErrInvalidDeadline, opts.DeadlineIn)
	case d.IsZero() && opts.DeadlineIn > 0:
		d = now.Add(opts.DeadlineIn)
	case d.IsZero() && maxIn > 0:
		return now.Add(maxIn).UTC(), nil
	case d.IsZero():
		return time.Time{}, nil
	}
	if !d.After(now) {
		return time.Time{}, fmt.Errorf("%w: it is not in the future", ErrInvalidDeadline)
	}
	if maxIn > 0 && d.Sub(now) > maxIn {
		return time.Time{}, fmt.Errorf("%w: at most %s from now", ErrDeadlineTooFar, maxIn)
	}
	return d.UTC(), nil
}

// MaxDeadline is the configured cap on a submit's deadline, 0 for none.
func (r *Runner) MaxDeadline() time.Duration { return time.Duration(r.cfg.MaxDeadline) }

// pastDeadline reports whether job's deadline has passed by the runner's
// clock.
func (r *Runner) pastDeadline(job batchdriver.Job) bool {
	return !job.Deadline.IsZero() && !r.cfg.Now().Before(job.Deadline)
}

// withDeadline returns ctx ended (with cause errJobDeadline) at job's
// deadline, which it measures on the runner's clock and waits for on the
// wall clock.
func (r *Runner) withDeadline(ctx context.Context, job batchdriver.Job) (context.Context, context.CancelFunc) {
	if job.Deadline.IsZero() {
		return ctx, func() {}
	}
	return context.WithDeadlineCause(ctx, time.Now().Add(job.Deadline.Sub(r.cfg.Now())), errJobDeadline)
}

// expireQueued ends the queued jobs whose deadline has passed, as one
// collection pass does.
func (r *Runner) expireQueued(ctx context.Context, now time.Time) (int, error) {
	began := time.Now()
	ended, err := r.store.Expire(ctx, batchdriver.ExpireParams{Now: r.at(now)})
	r.recordStoreCall("expire", began, err)
	if err != nil {
		return 0, fmt.Errorf("expire: %w", err)
	}
	hooks := false
	for _, e := range ended {
		r.metrics.job(string(e.Status))
		r.metrics.expired(e.Targets)
		hooks = hooks || e.Webhook
		r.waiters.notify(e.JobID)
		r.log.LogAttrs(ctx, slog.LevelInfo, "batch job ended at its deadline",
			slog.String("job_id", e.JobID), slog.String("caller", e.Caller),
			slog.String("status", string(e.Status)), slog.Int("expired", e.Targets))
	}
	if hooks {
		r.wakeWebhooks()
	}
	return len(ended), nil
}

func utcOrZero(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}

// maxQueuedDeadlines caps the deadlines the timer keeps: past it, the
// latest are left to the collection pass, so that jobs another runner
// claimed, whose entries stay until their deadline, cannot grow it.
const maxQueuedDeadlines = 4096

// queuedDeadlines are the deadlines of the jobs this runner queued (a
// submit or a retry here) and no worker of its has claimed yet. The
// deadline timer ends them at their deadline, so that a job every worker
// is too busy to claim does not wait for the next collection pass. A job
// another runner claims stays until its deadline passes: the [Store.Expire]
// then finds nothing, as a running job is its runner's to end. Jobs queued
// elsewhere, or queued again by a hand-back, are that runner's timer's, or
// the collection pass's.
type queuedDeadlines struct {
	mu   sync.Mutex
	m    map[string]time.Time // job id: its deadline
	wake chan struct{}        // a token: the earliest deadline may have moved
}

// add records job id's deadline, if it has one.
func (q *queuedDeadlines) add(id string, deadline time.Time) {
	if deadline.IsZero() {
		return
	}
	q.mu.Lock()
	if len(q.m) >= maxQueuedDeadlines {
		latest := ""
		for k, d := range q.m {
			if latest == "" || d.After(q.m[latest]) {
				latest = k
			}
		}
		if !deadline.Before(q.m[latest]) {
			q.mu.Unlock()
			return // the collection pass ends it
		}
		delete(q.m, latest)
	}
	q.m[id] = deadline
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default: // the timer already has a wake-up pending
	}
}

// forget drops job id, claimed here: its drain ends it at its deadline.
func (q *queuedDeadlines) forget(id string) {
	q.mu.Lock()
	delete(q.m, id)
	q.mu.Unlock()
}

// earliest returns the earliest deadline recorded, false if none.
func (q *queuedDeadlines) earliest() (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var first time.Time
	for _, d := range q.m {
		if first.IsZero() || d.Before(first) {
			first = d
		}
	}
	return first, !first.IsZero()
}

// due drops the deadlines at or before now and reports whether there were
// any.
func (q *queuedDeadlines) due(now time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	any := false
	for id, d := range q.m {
		if !now.Before(d) {
			delete(q.m, id)
			any = true
		}
	}
	return any
}

// deadlines is the deadline timer: it sleeps until the earliest deadline
// of the jobs queued here and then runs [Store.Expire], which ends every
// queued job past its deadline, whichever runner queued it. It makes no
// store call while no deadline has passed. On a host clock (Config.Now)
// it looks again every PollInterval, since that clock may move other than
// the wall clock does.
func (r *Runner) deadlines() {
	defer r.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		var fire <-chan time.Time
		if next, ok := r.queued.earliest(); ok {
			now := r.cfg.Now()
			wait := next.Sub(now)
			if wait <= 0 {
				r.expireDue(now)
				continue
			}
			if r.hostClock {
				wait = min(wait, time.Duration(r.cfg.PollInterval))
			}
			timer.Reset(wait)
			fire = timer.C
		}
		select {
		case <-r.stop:
			return
		case <-r.queued.wake:
			timer.Stop()
		case <-fire:
		}
	}
}

// expireDue ends the queued jobs past their deadline at now. A store
// failure is logged and left to the collection pass, which expires the
// same jobs on its next run.
func (r *Runner) expireDue(now time.Time) {
	if !r.queued.due(now) {
		return
	}
	ctx, cancel := storeCtx()
	defer cancel()
	if _, err := r.expireQueued(ctx, now); err != nil {
		r.log.LogAttrs(ctx, storeErrLevel(err), "batch expire failed", storeErrAttrs(err)...)
	}
}
