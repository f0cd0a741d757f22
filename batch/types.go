package batch

import "github.com/siftfetch/batchkit/batch/batchdriver"

// The types below are defined in [batchdriver], the store contract, because
// stores read and write them too. They are the same types here.

// Caller is who submits a job: a Name (ownership, caps, idempotency), a
// Class (the host partitions its caches by it) and a Restricted flag (no
// error details in log lines). The fetcher receives the caller as stored.
type Caller = batchdriver.Caller

// Target is one URL to fetch and its options.
type Target = batchdriver.Target

// JobStatus is where a job is: queued → running → done | partial | failed |
// cancelled.
type JobStatus = batchdriver.JobStatus

// Job statuses.
const (
	JobQueued    = batchdriver.JobQueued
	JobRunning   = batchdriver.JobRunning
	JobDone      = batchdriver.JobDone      // every target ok
	JobPartial   = batchdriver.JobPartial   // some targets ok, some failed
	JobFailed    = batchdriver.JobFailed    // every target failed, or failed by a restart
	JobCancelled = batchdriver.JobCancelled // cancelled by its owner
)

// TargetStatus is where a target is: pending → running → done | failed.
type TargetStatus = batchdriver.TargetStatus

// Target statuses.
const (
	TargetPending = batchdriver.TargetPending
	TargetRunning = batchdriver.TargetRunning
	TargetDone    = batchdriver.TargetDone
	TargetFailed  = batchdriver.TargetFailed
)

// Outcome classifies how a target ended. The set is fixed (it is a metrics
// label); an unknown outcome counts as [OutcomeOther].
type Outcome = batchdriver.Outcome

// Target outcomes.
const (
	OutcomeOK          = batchdriver.OutcomeOK
	OutcomeBlocked     = batchdriver.OutcomeBlocked
	OutcomeTimeout     = batchdriver.OutcomeTimeout
	OutcomeBusy        = batchdriver.OutcomeBusy
	OutcomeUpstream4xx = batchdriver.OutcomeUpstream4xx
	OutcomeUpstream5xx = batchdriver.OutcomeUpstream5xx
	OutcomeUnsupported = batchdriver.OutcomeUnsupported
	OutcomeTooLong     = batchdriver.OutcomeTooLong
	OutcomeCancel      = batchdriver.OutcomeCancel
	OutcomeExpired     = batchdriver.OutcomeExpired // the job's deadline passed first
	OutcomeOther       = batchdriver.OutcomeOther
	OutcomeInterrupted = batchdriver.OutcomeInterrupted
	OutcomeRobots      = batchdriver.OutcomeRobots // the host's robots rules refuse the target
	// OutcomeInvalid: refused at submit as malformed and skipped (see
	// [OnInvalidSkip]); never fetched, not retryable.
	OutcomeInvalid = batchdriver.OutcomeInvalid
)

// TraceContext is a W3C trace context (traceparent and tracestate) stored
// with a job, so that its drain continues the submitter's trace.
type TraceContext = batchdriver.TraceContext

// Errors a store decides; they match with [errors.Is].
var (
	// ErrNoTargets: a submit with an empty target list.
	ErrNoTargets = batchdriver.ErrNoTargets
	// ErrCallerBusy: the caller already has Config.JobsPerCaller live jobs.
	ErrCallerBusy = batchdriver.ErrCallerBusy
	// ErrBusy: there are already Config.JobsTotal live jobs.
	ErrBusy = batchdriver.ErrBusy
	// ErrNotFound: no such job or target for this caller. A job owned by
	// another caller is not found.
	ErrNotFound = batchdriver.ErrNotFound
	// ErrFinished: the job has already finished (cancel of a finished job).
	ErrFinished = batchdriver.ErrFinished
	// ErrUnavailable: the store cannot serve the call now (a lock wait ran
	// out, the disk is full, the database is closed); it may succeed later.
	ErrUnavailable = batchdriver.ErrUnavailable
	// ErrWebhooksBusy: a submit with a webhook by a caller that has
	// Config.WebhookPendingPerCaller webhook events pending already.
	ErrWebhooksBusy = batchdriver.ErrWebhooksBusy
)
