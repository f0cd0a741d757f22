package batch

import (
	"context"
	"strings"
	"time"
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
// must be recorded with no more than their log lines carry (see [Runner]'s
// logs: for a restricted caller's target, whether it was ok, not its
// outcome).
//
// # Steps
//
//   - Submit: a [Runner.Submit], [Runner.SubmitWith] or [Runner.Retry], in
//     the caller's context (a request's, with its trace). Then
//     TraceContext is asked for the trace context of the context Submit
//     returned, and it is stored with a new job (see [TraceContext]).
//   - Job: this runner claimed a job; the job's steps below run in the
//     context it returns, and it ends with the job's final status, or when
//     this runner stops draining it. It runs in a context of the runner
//     (cancelled by [Runner.Close]), not the submitter's: the submitter's
//     trace, on whichever node, hours before, is the event's Trace.
//   - Fetch and Store: each target's fetch (the FetchFunc gets the context
//     Fetch returned) and the write of its outcome (the Store gets the one
//     Store returned, without the cancel of Close), in the job's context.
//   - Webhook: each delivery attempt of a webhook event, in a context of
//     the runner; the event's Trace is the job's, if the job is still
//     stored.
//   - Reap: each [Store.Reap] the runner makes (at Start, for stale
//     runners, at Close), in the context of that call.
type Observer interface {
	Submit(ctx context.Context, ev SubmitEvent) (context.Context, func(SubmitResult))
	// TraceContext returns the trace context of ctx, a context Submit
	// returned, to be stored with the job; the zero value for none. The
	// runner validates it (see [TraceContext.Valid]) and drops one that is
	// not valid.
	TraceContext(ctx context.Context) TraceContext
	Job(ctx context.Context, ev JobEvent) (context.Context, func(JobResult))
	Fetch(ctx context.Context, ev TargetEvent) (context.Context, func(FetchResult))
	Store(ctx context.Context, ev TargetEvent) (context.Context, func(StoreResult))
	Webhook(ctx context.Context, ev WebhookAttempt) (context.Context, func(WebhookResult))
	Reap(ctx context.Context, ev ReapEvent) (context.Context, func(ReapResult))
}

// TraceContext is a W3C Trace Context (www.w3.org/TR/trace-context): the
// values of the traceparent and tracestate headers, as opaque strings the
// core checks and stores but does not interpret. A job stores the one of
// the request that submitted it, so that its drain, on whichever node
// claims it and however much later, continues that trace.
type TraceContext struct {
	// Parent is a traceparent value: the version, the 32-digit trace id,
	// the 16-digit parent id and the flags, in lowercase hex, joined by
	// dashes (55 characters for version 00).
	Parent string
	// State is a tracestate value, or "". It is kept only with a valid
	// Parent, and dropped if it is not valid itself.
	State string
}

// MaxTraceStateBytes is the longest tracestate a job stores: the length
// the W3C recommendation asks every vendor to propagate.
const MaxTraceStateBytes = 512

// Valid reports whether tc.Parent is a traceparent of version 00 (or of a
// later version, read as 00 is: its first 55 characters, which are what
// is kept) with a trace id and a parent id that are not all zeros.
func (tc TraceContext) Valid() bool {
	return validTraceParent(tc.Parent)
}

// clean returns tc as a job stores it: the zero value for an invalid
// Parent, a later version cut to the fields of version 00, and State
// dropped unless it is valid.
func (tc TraceContext) clean() TraceContext {
	if !validTraceParent(tc.Parent) {
		return TraceContext{}
	}
	tc.Parent = tc.Parent[:55]
	if !validTraceState(tc.State) {
		tc.State = ""
	}
	return tc
}

func validTraceParent(s string) bool {
	if len(s) < 55 || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return false
	}
	version := s[:2]
	if !lowerHex(version) || version == "ff" || (version == "00" && len(s) != 55) ||
		(len(s) > 55 && s[55] != '-') {
		return false
	}
	traceID, parentID, flags := s[3:35], s[36:52], s[53:55]
	return lowerHex(traceID) && lowerHex(parentID) && lowerHex(flags) &&
		strings.Trim(traceID, "0") != "" && strings.Trim(parentID, "0") != ""
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// validTraceState checks a tracestate list: at most 32 members of
// key=value, keys of lowercase letters, digits and _-*/ (one @ for a
// multi-tenant key), values of printable ASCII but "," and "=", not
// ending in a space.
func validTraceState(s string) bool {
	if len(s) > MaxTraceStateBytes {
		return false
	}
	if strings.TrimSpace(s) == "" {
		return s == ""
	}
	n := 0
	for m := range strings.SplitSeq(s, ",") {
		m = strings.Trim(m, " \t")
		if m == "" {
			continue
		}
		n++
		key, value, ok := strings.Cut(m, "=")
		if !ok || n > 32 || !validStateKey(key) || !validStateValue(value) {
			return false
		}
	}
	return true
}

func validStateKey(k string) bool {
	if k == "" || len(k) > 256 {
		return false
	}
	tenant, system, multi := strings.Cut(k, "@")
	if multi && (tenant == "" || system == "" || strings.Contains(system, "@")) {
		return false
	}
	if c := k[0]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_', c == '-', c == '*', c == '/', c == '@':
		default:
			return false
		}
	}
	return true
}

func validStateValue(v string) bool {
	if v == "" || len(v) > 256 || v[len(v)-1] == ' ' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e || c == ',' || c == '=' {
			return false
		}
	}
	return true
}

// SubmitEvent is a submit as it begins.
type SubmitEvent struct {
	Caller Caller
	// Targets is the number of targets submitted; 0 for a retry, whose
	// targets come from the job it retries.
	Targets int
	Webhook bool // the job has a webhook; false for a retry (not known yet)
	// RetryOf is the job a [Runner.Retry] retries, or "".
	RetryOf string
	// Trace is the trace context the submit was given explicitly
	// (SubmitOptions.Trace), already checked; the zero value for none. An
	// observer uses it as the parent when ctx carries no trace of its own.
	Trace TraceContext
}

// SubmitResult is how a submit ended.
type SubmitResult struct {
	JobID  string // "" if the submit failed
	Reused bool
	Status JobStatus
	// Err is the submit's error, or nil. An observer must not record its
	// text; it may classify it with errors.Is against the sentinels.
	Err error
}

// JobEvent is a job this runner claimed.
type JobEvent struct {
	JobID        string
	Caller       Caller
	TargetsTotal int
	RetryOf      string
	Webhook      bool
	CreatedAt    time.Time
	// ClaimStart and ClaimEnd bound the [Store.Claim] that took the job,
	// by time.Now (the claim is made before the job, and its trace, is
	// known).
	ClaimStart, ClaimEnd time.Time
	// Trace is the trace context stored with the job: its submitter's.
	Trace TraceContext
}

// JobResult is how the drain of a job on this runner ended.
type JobResult struct {
	// Status is the job's final status; JobRunning if this runner stopped
	// draining it before the end (it closed, or lost the job, see
	// Stopped).
	Status JobStatus
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
	Caller Caller
	Idx    int
}

// FetchResult is how a target's fetch ended.
type FetchResult struct {
	// Status is TargetDone or TargetFailed; "" if the fetch was cut short
	// by Close (nothing is stored).
	Status  TargetStatus
	Outcome Outcome
	// Bytes is the size of the result envelope of a done target.
	Bytes int
}

// StoreResult is how the write of a target's outcome ended.
type StoreResult struct {
	// Attempts counts the store calls it took, 1 when the first took it.
	Attempts int
	// Next is the idx of the target the write started, or -1.
	Next int
	// Status is the job's status after the write (see [Step]).
	Status JobStatus
	// Err is nil once stored; else [ErrNotHeld], [ErrNotFound] or the last
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
	Status  JobStatus // the job's final status, which the event reports
	// Trace is the trace context stored with the job, if the job is still
	// stored; else the zero value.
	Trace TraceContext
}

// WebhookResult is how a delivery attempt ended.
type WebhookResult struct {
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

// ReapEvent is a [Store.Reap] of the runner.
type ReapEvent struct {
	// Reason is why: "start" (the runner starting fails what it can no
	// longer finish), "stale" (jobs of runners without a heartbeat) or
	// "close".
	Reason string
}

// ReapResult is how a reap ended.
type ReapResult struct {
	Jobs int // live jobs failed
	Err  error
}

// The no-op ends a runner without an Observer uses: package values, so
// that no step allocates.
var (
	endSubmitNop  = func(SubmitResult) {}
	endJobNop     = func(JobResult) {}
	endFetchNop   = func(FetchResult) {}
	endStoreNop   = func(StoreResult) {}
	endWebhookNop = func(WebhookResult) {}
	endReapNop    = func(ReapResult) {}
)

func (r *Runner) observeSubmit(ctx context.Context, ev SubmitEvent) (context.Context, func(SubmitResult)) {
	if r.obs == nil {
		return ctx, endSubmitNop
	}
	return r.obs.Submit(ctx, ev)
}

// traceOf is the trace context a job created in ctx stores: the
// observer's, else the one the submit was given.
func (r *Runner) traceOf(ctx context.Context, given TraceContext) TraceContext {
	if r.obs == nil {
		return given
	}
	if tc := r.obs.TraceContext(ctx).clean(); tc.Valid() {
		return tc
	}
	return given
}

func (r *Runner) observeJob(ctx context.Context, c Claimed, claimStart, claimEnd time.Time) (context.Context, func(JobResult)) {
	if r.obs == nil {
		return ctx, endJobNop
	}
	j := c.Job
	return r.obs.Job(ctx, JobEvent{
		JobID: j.ID, Caller: j.Caller, TargetsTotal: j.TargetsTotal, RetryOf: j.RetryOf,
		Webhook: j.WebhookURL != "", CreatedAt: j.CreatedAt,
		ClaimStart: claimStart, ClaimEnd: claimEnd, Trace: j.Trace.clean(),
	})
}

func (r *Runner) observeFetch(ctx context.Context, job Job, idx int) (context.Context, func(FetchResult)) {
	if r.obs == nil {
		return ctx, endFetchNop
	}
	return r.obs.Fetch(ctx, TargetEvent{JobID: job.ID, Caller: job.Caller, Idx: idx})
}

func (r *Runner) observeStore(ctx context.Context, job Job, idx int) (context.Context, func(StoreResult)) {
	if r.obs == nil {
		return ctx, endStoreNop
	}
	return r.obs.Store(ctx, TargetEvent{JobID: job.ID, Caller: job.Caller, Idx: idx})
}

func (r *Runner) observeWebhook(ctx context.Context, d WebhookDelivery) (context.Context, func(WebhookResult)) {
	if r.obs == nil {
		return ctx, endWebhookNop
	}
	ev := WebhookAttempt{JobID: d.JobID, Attempt: d.Attempt, Status: d.Status}
	// The outbox does not keep the trace; the job does, until it is swept.
	sctx, cancel := storeCtx()
	j, _, err := r.store.Get(sctx, GetParams{Caller: d.Caller, JobID: d.JobID, JobOnly: true})
	cancel()
	if err == nil {
		ev.Trace = j.Trace.clean()
	}
	return r.obs.Webhook(ctx, ev)
}

func (r *Runner) observeReap(ctx context.Context, reason string) (context.Context, func(ReapResult)) {
	if r.obs == nil {
		return ctx, endReapNop
	}
	return r.obs.Reap(ctx, ReapEvent{Reason: reason})
}
