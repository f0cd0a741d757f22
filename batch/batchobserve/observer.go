package batchobserve

import (
	"context"
	"time"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// Observer observes the lifecycle of jobs: a tracer (batchotel makes one
// for OpenTelemetry) or any other instrumentation the host wants, without
// the core knowing it. Set it as Config.Observer; a runner without one
// makes no call and pays nothing but a nil check per step.
//
// Each step is announced when it begins, with the context it runs in, and
// the observer returns the context the step then runs in (a tracer's
// carries its span; the fetch, the store write and the delivery get it)
// and a function the runner calls once when the step ends, with its
// outcome. An observer's methods are called from many goroutines at once.
// They must be quick and must not panic.
//
// No event carries a target URL, a host, a webhook URL, an idempotency key
// or an error text (which may hold any of them): an observer cannot record
// what it is never given. Caller.Restricted tells which callers' events
// must be recorded with no more than their log lines carry (see batch.Runner's
// logs: for a restricted caller's target, whether it was ok, not its
// outcome).
//
// # Steps
//
//   - Submit: a batch.Runner.Submit, batch.Runner.SubmitWith or batch.Runner.Retry, in
//     the caller's context (a request's, with its trace). Then
//     TraceContext is asked for the trace context of the context Submit
//     returned, and it is stored with a new job (see batchdriver.TraceContext).
//   - Job: this runner claimed a job; the job's steps below run in the
//     context it returns, and it ends with the job's final status, or when
//     this runner stops draining it. It runs in a context of the runner
//     (cancelled by batch.Runner.Close), not the submitter's: the submitter's
//     trace, on whichever node, hours before, is the event's Trace.
//   - Fetch and Store: each target's fetch (the FetchFunc gets the context
//     Fetch returned) and the write of its outcome (the Store gets the one
//     Store returned, without the cancel of Close), in the job's context.
//   - Webhook: each delivery attempt of a webhook event, in a context of
//     the runner; the event's Trace is the job's, if the job is still
//     stored.
//   - Reap: each batchdriver.Store.Reap the runner makes (at Start, for stale
//     runners, at Close), in the context of that call.
type Observer interface {
	Submit(ctx context.Context, ev SubmitEvent) (context.Context, func(SubmitEnd))
	// TraceContext returns the trace context of ctx, a context Submit
	// returned, to be stored with the job; the zero value for none. The
	// runner validates it (see batchdriver.TraceContext.Valid) and drops one that is
	// not valid.
	TraceContext(ctx context.Context) batchdriver.TraceContext
	Job(ctx context.Context, ev JobEvent) (context.Context, func(JobEnd))
	Fetch(ctx context.Context, ev TargetEvent) (context.Context, func(FetchEnd))
	Store(ctx context.Context, ev TargetEvent) (context.Context, func(StoreEnd))
	Webhook(ctx context.Context, ev WebhookAttempt) (context.Context, func(WebhookEnd))
	Reap(ctx context.Context, ev ReapEvent) (context.Context, func(ReapEnd))
}

// SubmitEvent is a submit as it begins.
type SubmitEvent struct {
	Caller batchdriver.Caller
	// Targets is the number of targets submitted; 0 for a retry, whose
	// targets come from the job it retries.
	Targets int
	Webhook bool // the job has a webhook; false for a retry (not known yet)
	// RetryOf is the job a batch.Runner.Retry retries, or "".
	RetryOf string
	// Trace is the trace context the submit was given explicitly
	// (SubmitOptions.Trace), already checked; the zero value for none. An
	// observer uses it as the parent when ctx carries no trace of its own.
	Trace batchdriver.TraceContext
}

// SubmitResult is how a submit ended.
type SubmitEnd struct {
	JobID  string // "" if the submit failed
	Reused bool
	Status batchdriver.JobStatus
	// Err is the submit's error, or nil. An observer must not record its
	// text; it may classify it with errors.Is against the sentinels.
	Err error
}

// JobEvent is a job this runner claimed.
type JobEvent struct {
	JobID        string
	Caller       batchdriver.Caller
	TargetsTotal int
	RetryOf      string
	Webhook      bool
	CreatedAt    time.Time
	// ClaimStart and ClaimEnd bound the batchdriver.Store.Claim that took the job,
	// by time.Now (the claim is made before the job, and its trace, is
	// known).
	ClaimStart, ClaimEnd time.Time
	// Trace is the trace context stored with the job: its submitter's.
	Trace batchdriver.TraceContext
}

// JobResult is how the drain of a job on this runner ended.
type JobEnd struct {
	// Status is the job's final status; JobRunning if this runner stopped
	// draining it before the end (it closed, or lost the job, see
	// Stopped).
	Status batchdriver.JobStatus
	// TargetsDone counts the targets this drain stored.
	TargetsDone int
	// Stopped says why the drain stopped before the job's end: "closed"
	// (the runner closed), "not_held" (the job was reaped or is gone) or
	// "unknown_target" (a store bug); "" when the job finished.
	Stopped string
}

// TargetEvent is one target of a claimed job.
type TargetEvent struct {
	JobID  string
	Caller batchdriver.Caller
	Idx    int
}

// FetchResult is how a target's fetch ended.
type FetchEnd struct {
	// Status is TargetDone or TargetFailed; "" if the fetch was cut short
	// by Close (nothing is stored).
	Status  batchdriver.TargetStatus
	Outcome batchdriver.Outcome
	// Bytes is the size of the result envelope of a done target.
	Bytes int
}

// StoreResult is how the write of a target's outcome ended.
type StoreEnd struct {
	// Attempts counts the store calls it took, 1 when the first took it.
	Attempts int
	// Next is the idx of the target the write started, or -1.
	Next int
	// Status is the job's status after the write (see batchdriver.Step).
	Status batchdriver.JobStatus
	// Err is nil once stored; else batchdriver.ErrNotHeld, batchdriver.ErrNotFound or the last
	// store error of a write that Close cut short. Its text is not to be
	// recorded.
	Err error
}

// WebhookAttempt is one delivery attempt of a job's webhook event. It
// carries neither the URL nor the caller (a delivery's log lines carry the
// job id and the attempt only).
type WebhookAttempt struct {
	JobID   string
	Attempt int
	// Event is the event's type: batch.finished, or batch.target.finished
	// for a per-target event.
	Event string
	// Status is the job's final status, which a batch.finished event
	// reports; "" for a per-target event.
	Status batchdriver.JobStatus
	// Trace is the trace context stored with the job, if the job is still
	// stored; else the zero value.
	Trace batchdriver.TraceContext
}

// WebhookResult is how a delivery attempt ended.
type WebhookEnd struct {
	// Outcome is "delivered", "retry" (failed, tried again later),
	// "dropped" (failed, past Config.WebhookRetryFor) or "closed" (cut
	// short by Close, attempted again later).
	Outcome string
	// RetryIn is the back-off of a retry.
	RetryIn time.Duration
	// Err is the store's error when the outcome could not be stored, else
	// nil. The delivery's own error is never passed (it may hold the URL).
	Err error
}

// ReapEvent is a batchdriver.Store.Reap of the runner.
type ReapEvent struct {
	// Reason is why: "start" (the runner starting fails what it can no
	// longer finish), "stale" (jobs of runners without a heartbeat) or
	// "close".
	Reason string
}

// ReapResult is how a reap ended.
type ReapEnd struct {
	Jobs int // live jobs failed
	Err  error
}
