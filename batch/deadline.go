package batch

import (
	"context"
	"fmt"
	"log/slog"
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
