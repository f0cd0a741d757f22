package batchdriver

import (
	"context"
	"time"
)

// Job is a job's metadata as a [Store] holds it. It never carries results.
type Job struct {
	ID     string
	Caller Caller
	// IdemKey is the idempotency key (computed by the runner). It is stored as a hash
	// of the caller and target list and must never be logged.
	IdemKey      string
	Status       JobStatus
	Error        string // why the job failed as a whole, e.g. "restart"
	TargetsTotal int
	TargetsDone  int // targets that are done or failed
	CreatedAt    time.Time
	// Lease is when the lease was last bumped; the job expires at Lease+TTL.
	Lease      time.Time
	FinishedAt time.Time // zero while the job is live
	Bytes      int64     // stored result and error bytes of this job
	// Runner is the id of the runner that holds the job while one of its
	// targets is in flight, and "" otherwise.
	Runner string
	// RetryOf is the id of the job this one retries (see batch.Runner.Retry),
	// or "". RetryIdx then holds, for each target, its idx in that job.
	RetryOf  string
	RetryIdx []int
	// WebhookURL receives the job's batch.EventJobFinished event; "" for none.
	// Like the target URLs it is the owner's only and never logged.
	WebhookURL string
	// WebhookEvents are the events its webhook receives; 0 for the
	// default, [HookFinished] alone.
	WebhookEvents HookEvents
	// Trace is the trace context of the request that submitted the job
	// (see [TraceContext]); the zero value for none.
	Trace TraceContext
	// Deadline is when the job ends with what it has (see [Store.Expire]
	// and FinishParams.Expire); the zero time for none.
	Deadline time.Time
	// HandedOn counts the times [Store.Reap] with HandBack queued the job
	// again for another runner to continue: 0 for a job that one runner
	// drained.
	HandedOn int
	// Metadata is the caller's labels of the job, as given to Create; nil
	// for none. Like the URLs they are the owner's only and never logged.
	Metadata map[string]string
	// CustomIDs are the caller's ids of the targets, one per target in idx
	// order ("" for a target without one), as given to Create; nil when no
	// target has one.
	CustomIDs []string
	// Skipped are the idx of the targets that Create stored finished
	// (CreateParams.Skipped), in order; nil for none.
	Skipped []int
}

// TargetRecord is one stored target.
type TargetRecord struct {
	Idx    int
	Target Target
	Status TargetStatus
	// Result is the envelope of a done target. Reads that do not ask for
	// results leave it nil.
	Result  []byte
	Error   string
	Hint    string
	Outcome Outcome // "" until the target finishes
	// Attempts counts the fetches of the target that may have reached its
	// upstream, the one in flight or stored included: 1 for a target
	// fetched once (or not yet), more when a hand-back with RepeatInFlight
	// put it back to pending after its fetch may have begun (see
	// ReapParams.Unfetched). Claim's targets may leave it 0.
	Attempts int
}

// Bytes is what a finished target adds to its job's byte count.
func (t TargetRecord) Bytes() int64 { return int64(len(t.Result) + len(t.Error)) }

// Limits are the caps and the lease TTL that [Store.Create] enforces.
type Limits struct {
	JobsPerCaller int
	JobsTotal     int
	TTL           time.Duration
	// WebhooksPerCaller caps the caller's pending webhook events for a
	// create with a WebhookURL (see [Store.Create]); 0 means no cap.
	WebhooksPerCaller int
}

// TargetFinish is the outcome of one target that [Store.FinishTarget] writes.
type TargetFinish struct {
	Idx     int
	Status  TargetStatus // TargetDone or TargetFailed
	Result  []byte       // envelope, for a done target
	Error   string       // for a failed target
	Hint    string
	Outcome Outcome
}

// Stats are store-wide counts.
type Stats struct {
	Queued  int   // jobs queued
	Running int   // jobs running
	Bytes   int64 // stored result and error bytes over all jobs, exact
}

// LeaseGrain is how far a lease must move before [Store.Touch] has to write
// it: a store may skip a touch that would move the lease by less, so that
// polling is not a write storm.
const LeaseGrain = time.Minute

// Capabilities say what a [Store] supports; the runner and the conformance
// suites read them.
type Capabilities struct {
	// Shared reports that runners in several processes may share the store
	// at once, each draining its own claims. A store that serves one process
	// (Shared false) holds only jobs of that process, so a starting runner
	// fails every live job in it, queued ones too, as a restart; such a
	// store has one runner at a time. A shared store lets a starting runner
	// fail only its own in-flight jobs and stale ones, and leaves queued
	// jobs to whoever claims them.
	Shared bool
}

// The parameters of the [Store] methods. Each is a struct so that a field
// can be added without breaking every implementation.
//
// The clock: Now is the instant a call happens at. nil, what the runner
// passes unless the host set Config.Now, means the store's own clock:
// time.Now for a store that serves one process, the database's clock for a
// shared store, so that the nodes' clocks need not agree. A non-nil Now is
// that instant, and every store honours it for every time the call writes
// or compares: it is how a test clock (Config.Now, or a conformance
// suite's fake time) reaches the store, and in a cluster every node's
// Config.Now must then agree. A store that reads its own clock reads it
// once per call, so that the times one call writes agree, and says in its
// documentation which clock that is.
//
// Now is a pointer, as in River's driver parameters, rather than a
// time.Time whose zero means "the store's clock": "no time" is then a
// value of its own, not an instant (the zero time.Time) that a computed
// time could hit by accident, and it is exactly a SQL NULL, so that a
// database store passes it as one parameter, coalesce($n, now()), with no
// test of its own at each statement.
//
// Bounds are durations, taken from Now whichever clock that is
// (SweepParams.TTL, ReapParams.StaleAfter, ClaimWebhooksParams.Lease,
// FinishWebhookParams.RetryIn), never absolute times that a store would
// have to turn back into ages.
type (
	// CreateParams is a new job for [Store.Create].
	CreateParams struct {
		ID      string
		Caller  Caller
		IdemKey string
		Targets []Target
		// WebhookURL is stored with the job (see [Job]); "" for none.
		WebhookURL string
		// WebhookEvents is stored with the job (see [Job]); 0 for the
		// default. With [HookTargets], the job has a pending event from
		// the create on (see The webhook outbox).
		WebhookEvents HookEvents
		Limits        Limits
		// Now is the instant of the call; nil means the store's own clock
		// (time.Now, or a shared store's database's). The Now of every
		// parameter struct means the same: see the clock note on the
		// parameter types.
		Now *time.Time
		// RetryOf and RetryIdx are stored with the job as given: a retry's
		// lineage (see [Job]). RetryIdx has one entry per target, or is
		// nil when RetryOf is "".
		RetryOf  string
		RetryIdx []int
		// Trace is stored with the job as given (see [Job]); its strings
		// are valid or empty.
		Trace TraceContext
		// Deadline is stored with the job as given (see [Job]); the zero
		// time for none. A store keeps it to the microsecond at least.
		Deadline time.Time
		// Metadata and CustomIDs are stored with the job as given (see
		// [Job]); nil for none. CustomIDs has one entry per target, or is
		// nil. The runner has checked them; a store keeps them verbatim.
		// A reused job keeps its own (the runner puts them in the IdemKey).
		Metadata  map[string]string
		CustomIDs []string
		// Skipped are targets refused at submit, each stored finished as
		// given (failed, with its error, hint and outcome), counted done
		// and its error bytes counted, and never started: the drain takes
		// the other targets in idx order (see [Store.Claim] and
		// [Store.FinishTarget]). They are in idx order, one per idx at most,
		// and fewer than the targets, or nil for none; the job's
		// Job.Skipped lists their idx.
		Skipped []TargetFinish
	}
	// ClaimParams name the claiming runner for [Store.Claim].
	ClaimParams struct {
		Runner string
		Now    *time.Time
	}
	// FinishParams carry one target's outcome for [Store.FinishTarget].
	FinishParams struct {
		JobID  string
		Runner string // the runner that claimed the job
		Target TargetFinish
		// Expire says the job's deadline has passed: if the job is still
		// running, the write starts no next target, ends every pending
		// target failed with outcome [OutcomeExpired] and error
		// [DeadlineReason] (counted done, its error bytes counted), and
		// gives the job its final status from its targets, with error
		// [DeadlineReason] if it ended any. The runner decides it, by its
		// clock.
		Expire bool
		Now    *time.Time
	}
	// ExpireParams bound [Store.Expire].
	ExpireParams struct {
		// Now: queued jobs whose deadline is at or before Now end.
		Now *time.Time
	}
	// CancelParams select the caller's job for [Store.Cancel].
	CancelParams struct {
		Caller string
		JobID  string
		Now    *time.Time
	}
	// GetParams select the caller's job for [Store.Get].
	GetParams struct {
		Caller string
		JobID  string
		// Results loads each done target's result envelope.
		Results bool
		// JobOnly returns the job without its targets: the cheap read of a
		// poll that only wants to know whether anything changed.
		JobOnly bool
	}
	// GetTargetParams select one target of the caller's job for
	// [Store.GetTarget].
	GetTargetParams struct {
		Caller string
		JobID  string
		Idx    int
	}
	// ListParams select the caller's newest jobs for [Store.List].
	ListParams struct {
		Caller string
		Limit  int
		// Metadata, if not empty, keeps only the jobs whose metadata holds
		// every one of its pairs (key and value equal, byte for byte).
		Metadata map[string]string
	}
	// TouchParams select the caller's job for [Store.Touch].
	TouchParams struct {
		Caller string
		JobID  string
		Now    *time.Time
	}
	// SweepParams bound [Store.Sweep].
	SweepParams struct {
		// TTL: finished jobs whose lease is older than TTL at Now (before
		// Now minus TTL) are deleted.
		TTL time.Duration
		Now *time.Time
	}
	// EvictParams bound [Store.Evict].
	EvictParams struct {
		MaxBytes int64
	}
	// HeartbeatParams name the runner for [Store.Heartbeat].
	HeartbeatParams struct {
		Runner string
		Now    *time.Time
	}
	// ReapParams select the jobs [Store.Reap] fails. Each set field adds
	// jobs to the selection.
	ReapParams struct {
		// AllLive selects every queued and running job and every job with a
		// target in flight, whoever holds it: the start of a runner on a
		// store that is not Shared.
		AllLive bool
		// Runner selects the jobs this runner holds.
		Runner string
		// StaleAfter, if positive, selects the jobs held by a runner whose
		// last heartbeat is older than StaleAfter at Now (before Now minus
		// StaleAfter), or that has none.
		StaleAfter time.Duration
		// Reason is the error the failed jobs and targets get, e.g.
		// "restart".
		Reason string
		// HandBack hands the selected jobs on instead of failing them: a
		// held job that is still running goes back to queued, released
		// (its runner's next drain write gets [ErrNotHeld]), with its
		// finished targets as they are and its pending targets pending,
		// so that a later [Store.Claim], by any runner, continues it
		// under the same id from its first pending target. Its target in
		// flight fails with p.Reason as its error and outcome
		// [OutcomeInterrupted] (counted done), unless RepeatInFlight; a
		// job left with no pending target then gets its final status from
		// its targets (see [AggregateStatus]), as its last drain write
		// would have given it. A selected job that no runner holds is left
		// as it is, and a cancelled one is released as without HandBack,
		// its target in flight interrupted. Each job queued again has its
		// HandedOn go up by one. Reap then counts the jobs it handed back
		// or finished.
		HandBack bool
		// RepeatInFlight, with HandBack, puts the target in flight back to
		// pending instead of failing it: the next claim starts it again.
		// It is for a target whose fetch never began, or for a host whose
		// fetches are safe to repeat. The target's Attempts goes up by one,
		// as its fetch may have reached the upstream, unless its job is in
		// Unfetched.
		RepeatInFlight bool
		// Unfetched, with RepeatInFlight, names the jobs whose target in
		// flight the caller knows was never handed to a fetcher (a closing
		// runner's own): putting it back to pending leaves its Attempts
		// as they are. A reap of another runner's jobs cannot know, and
		// leaves it nil.
		Unfetched []string
		Now       *time.Time
	}
	// ClaimWebhooksParams bound [Store.ClaimWebhooks].
	ClaimWebhooksParams struct {
		Runner string
		// Limit is how many events one claim returns at most.
		Limit int
		// PerCaller caps the events of one caller that are claimed at
		// once: the claim returns none of a caller whose claimed events
		// (by any runner, under an unexpired lease) number PerCaller
		// already, and at most PerCaller minus those of one that has
		// fewer. 0 means no cap.
		PerCaller int
		// Lease is how long a claimed event stays claimed: once it has
		// passed without a [Store.FinishWebhook], the event is due again,
		// so that the delivery of a runner that died is taken over.
		Lease time.Duration
		Now   *time.Time
	}
	// FinishWebhookParams end one claimed delivery for
	// [Store.FinishWebhook].
	FinishWebhookParams struct {
		JobID  string
		Runner string // the runner that claimed the event
		// Attempt is the claim's [WebhookDelivery].Attempt: a claim that
		// was taken over since (its lease passed) is fenced out.
		Attempt int
		// Cursor is the claim's [WebhookDelivery].Cursor; it fences the
		// claim too, as the events of one job share its outbox entry.
		Cursor int
		// Retry keeps the event for another attempt RetryIn from Now;
		// without it the event is done (delivered, or given up), and the
		// job's next event, if it has one, is due (see The webhook
		// outbox).
		Retry   bool
		RetryIn time.Duration
		// Drop gives the event up, and with it every later event of its
		// job: the job's outbox entry is deleted. Without Retry only.
		Drop bool
		Now  *time.Time
	}
)

// WebhookDelivery is a pending webhook event that [Store.ClaimWebhooks]
// claimed: a snapshot of its job taken in the transaction that gave the job
// its final status.
type WebhookDelivery struct {
	JobID string
	// Caller is the name of the job's caller: the owner of the event,
	// whose pending and in-flight events the caps count, and whose
	// secret signs it (see batch.WebhookEvent).
	Caller        string
	URL           string
	Status        JobStatus // the job's final status
	Error         string    // the job's error, e.g. "restart"
	TargetsTotal  int
	TargetsOK     int
	TargetsFailed int
	CreatedAt     time.Time
	FinishedAt    time.Time
	// Lease is the job's lease when it finished; the event says the job
	// expires at Lease+TTL.
	Lease time.Time
	// Deadline is the job's deadline; the zero time for none.
	Deadline time.Time
	// Metadata is the job's metadata (see [Job]); nil for none.
	Metadata map[string]string
	// Attempt counts the claims of the event, this one included: 1 on its
	// first claim.
	Attempt int
	// Age is how long ago the event became due, at the claim's Now (see
	// the clock note on the parameters above).
	Age time.Duration
	// Event is the kind of the event: [HookFinished], the job's
	// completion (the fields above from Status to FinishedAt are its
	// snapshot), or [HookTargets], some of its targets finished (those
	// fields are zero but for TargetsTotal).
	Event HookEvents
	// Targets are, in a HookTargets event, the finished targets it
	// carries, in idx order: those from Cursor on that had finished when
	// its first attempt was claimed, at most [MaxEventTargets]; every
	// attempt carries the same. A target of a job that is gone (swept or
	// evicted) is left out, so the list may be empty.
	Targets []WebhookTarget
	// Cursor is, in a job with HookTargets, how many of its targets the
	// events before this one carried: in a HookTargets event its first
	// target's idx. 0 in a job without.
	Cursor int
	// Since is when the event became due: for a HookTargets event, when
	// the first of its targets was stored (or, after an earlier event was
	// delivered, that delivery). The same on every attempt.
	Since time.Time
}

// HookEvents is a set of webhook events of a job (see [Job]).
type HookEvents uint8

// Webhook events.
const (
	// HookFinished is the job's completion event, batch.finished.
	HookFinished HookEvents = 1 << iota
	// HookTargets are its per-target events, batch.target.finished: each
	// carries one or more of its targets that finished, in idx order.
	HookTargets
)

// Has reports whether e holds every event of f. The zero set holds
// [HookFinished] only: the default of a job with a webhook.
func (e HookEvents) Has(f HookEvents) bool {
	if e == 0 {
		e = HookFinished
	}
	return e&f == f
}

// MaxEventTargets is the most targets one [HookTargets] event carries.
const MaxEventTargets = 100

// WebhookTarget is one finished target in a [HookTargets] event. It never
// carries the target's URL or result.
type WebhookTarget struct {
	Idx int
	// CustomID is the caller's id of the target (see [Job].CustomIDs); ""
	// for none.
	CustomID string
	Status   TargetStatus // done or failed
	Outcome  Outcome
}

// Claimed is a job that [Store.Claim] started.
type Claimed struct {
	Job Job
	// Targets are the job's targets in idx order, without results.
	Targets []TargetRecord
	// Next is the idx of the target the claim started.
	Next int
	// Queued is how many jobs were still queued after the claim, as the
	// store saw it then: a sample for the queue-depth gauge.
	Queued int
}

// DeadlineReason is the error of a job that its deadline ended, and of
// each of its targets that it expired.
const DeadlineReason = "deadline"

// Expired is a job that [Store.Expire] ended.
type Expired struct {
	JobID  string
	Caller string
	Status JobStatus // its final status
	// Targets is how many of its targets it expired.
	Targets int
	// Webhook reports that the job has a webhook, whose event is due now.
	Webhook bool
}

// Step is where a job stands after [Store.FinishTarget].
type Step struct {
	// Status is the job's status after the write: running while a next
	// target was started, else final (done, partial, failed, or cancelled).
	Status JobStatus
	// Next is the idx of the target the write started, or -1 when it
	// started none: the job is finished, and no longer held.
	Next int
}

// Store persists jobs and targets. Every method is atomic: a store backed by
// a database runs each one as a single transaction, so that several runners
// can share one store. Methods that take a caller name are owner scoped: a
// job owned by another caller is [ErrNotFound], exactly like an unknown id.
//
// # The drain
//
// A job is drained by the runner that claimed it, with one write per
// target. [Store.Claim] makes the oldest queued job running, held by the
// claiming runner, and starts its first target in the same transaction.
// Each [Store.FinishTarget] then stores the outcome of the target in flight
// and, in the same transaction, either starts the next target or, when none
// is left or the job was cancelled, gives the job its final status and
// releases it. So at any moment a held job has exactly one target in
// flight, the one the last write started, and a cancel lets that target
// finish and be stored while nothing after it starts.
//
// Every drain write names its runner and is refused with [ErrNotHeld], with
// no change, once that runner no longer holds the job: the job was failed
// by [Store.Reap] (its runner was stale, or restarted, or closed), or it
// finished.
//
// # The webhook outbox
//
// A job created with a WebhookURL (and without [HookTargets], see below)
// gets one pending webhook event, written
// in the same atomic step that makes the job finished and released (no
// target in flight), whichever step that is: the FinishTarget that stores
// its last target or finds it cancelled, the Cancel of a queued job, or a
// Reap. (A Cancel of a running job does not: its target in flight is still
// to be stored, by a FinishTarget or a Reap.) So an event is written
// exactly once per job, and never for a job that is not finished; a crash
// either loses the final step with its event or keeps both. Pending events
// outlive their jobs: a sweep or eviction does not delete them.
//
// [Store.ClaimWebhooks] hands due events to one runner at a time, under a
// lease; [Store.FinishWebhook] deletes an event or reschedules it, fenced
// by the claim. A runner that dies mid-delivery leaves its event to be
// claimed again once the lease has passed (or at once, when [Store.Reap]
// releases the claims of the runner that restarts or closes).
//
// A job created with [HookTargets] has one outbox entry from its Create on,
// which carries all its events in order, one at a time: a cursor (the
// targets delivered so far) and how many targets are finished, as its
// drain writes store them (targets finish in idx order). Every step that
// finishes a target (a FinishTarget, or a step that ends the job) makes
// the entry due, unless it is claimed or waits for a retry. A claim of
// the entry is a [HookTargets] event of the finished targets past the
// cursor (at most [MaxEventTargets]), fixed at its first attempt; a
// FinishWebhook that ends it moves the cursor past them and makes the
// entry due again if more targets finished meanwhile. Once every finished
// target is delivered and the job is finished, the entry is the job's
// completion event (with [HookFinished]; it is then a snapshot of the
// job as it finished) or, without, deleted. So a job's events go one at
// a time, in idx order and the completion last, and targets that finish
// while an event is out are carried together by the next. The entry
// counts as one pending event of its caller, as a job with a webhook
// does, from the create until it is deleted.
//
// # Liveness
//
// A runner writes [Store.Heartbeat] at a fixed interval, independent of
// target progress; the claim records one as well. [Store.Reap] fails the
// jobs a runner can no longer finish: a starting runner's own jobs, the jobs
// of runners whose heartbeat is stale, or (on a store that is not Shared)
// every live job.
//
// # Order and errors
//
// Ties between jobs created (Claim, List) or leased (Evict) at the same
// instant are broken in a store-specific order. An error a store cannot
// help now (lock wait, full disk) should match [ErrUnavailable].
//
// A Store passes batchdrivertest.TestStore, TestRunner and TestStoreReopen (the
// last with a function that closes the store and opens it again on the same
// data). Their cases are named <Group>/<Case>, so one runs alone, as in
// go test -run '^TestStore_Conformance$/^Drain$/^FinishTargetFenced$'.
type Store interface {
	// Capabilities says what the store supports.
	Capabilities() Capabilities

	// Create inserts a new queued job with pending targets (but for
	// p.Skipped's, stored finished), unless the caller
	// already has a job with the same IdemKey whose lease is unexpired
	// (Lease+TTL after Now) and whose status is not cancelled or failed: then
	// it bumps that job's lease to Now and returns it with reused true.
	// Reuse is decided before the caps; the caps count live jobs: the
	// caller's first ([ErrCallerBusy]), then, for a create with a
	// WebhookURL and a p.Limits.WebhooksPerCaller, the caller's pending
	// webhook events ([ErrWebhooksBusy]): its jobs with a webhook that are
	// live or cancelled with a target in flight, plus the outbox entries
	// of its other jobs (one per job: see The webhook outbox); then all
	// live jobs ([ErrBusy]). Reuse, caps and insert are
	// one atomic step, so concurrent creates never exceed a cap nor make
	// two jobs for one key, whichever runners they come through. A create
	// whose every target is skipped is [ErrNoTargets]: there would be
	// nothing to drain.
	Create(ctx context.Context, p CreateParams) (j Job, reused bool, err error)

	// Claim makes the oldest queued job running, held by p.Runner, and
	// starts its first pending target (target 0, unless it was skipped at
	// create or the job was handed back: see ReapParams.HandBack), in one
	// atomic step; it records a heartbeat
	// of p.Runner too. ok is false when no job is queued. Concurrent claims
	// never return the same job.
	Claim(ctx context.Context, p ClaimParams) (c Claimed, ok bool, err error)

	// FinishTarget stores the outcome of the job's target in flight, which
	// must be p.Target.Idx: it stores the result or error, adds one to
	// TargetsDone, adds the target's bytes to the job and to the store total
	// and bumps the lease to Now (while the job goes on, a store may skip a
	// bump of less than [LeaseGrain]). It does so even if the job was cancelled
	// meanwhile. In the same atomic step it starts the next pending target
	// (the next in idx order that was not skipped at create) if the job is
	// still running and has one, and otherwise gives the job its final
	// status (see [AggregateStatus]; a cancelled job stays cancelled), sets
	// FinishedAt if it was not set, and releases it.
	//
	// It returns [ErrNotHeld] with no change if p.Runner does not hold the
	// job, [ErrNotFound] if the job is gone, and an error for a status other
	// than done or failed. A repeat of a write that was applied (the same
	// runner, a target already stored, the job still held) changes nothing
	// and returns the job's current step, so a write whose outcome was
	// unknown can be retried.
	FinishTarget(ctx context.Context, p FinishParams) (Step, error)

	// Cancel flips the caller's queued or running job to cancelled, sets
	// FinishedAt and bumps its lease. A target in flight stays in flight, and
	// its runner's next FinishTarget stores it; pending targets stay
	// pending. It returns [ErrFinished] for a finished job and
	// [ErrNotFound] for an unknown or foreign one.
	Cancel(ctx context.Context, p CancelParams) error

	// Get returns the caller's job and its targets in idx order (none with
	// p.JobOnly). Results are loaded only if p.Results is set; without it,
	// Get must not read result bodies at all. It never writes.
	Get(ctx context.Context, p GetParams) (Job, []TargetRecord, error)

	// GetTarget returns the caller's job and one of its targets, with its
	// result. It returns [ErrNotFound] for an idx outside the job.
	GetTarget(ctx context.Context, p GetTargetParams) (Job, TargetRecord, error)

	// List returns up to p.Limit of the caller's jobs, newest first, and
	// with p.Metadata only those whose metadata holds its every pair: the
	// limit counts the jobs that match.
	List(ctx context.Context, p ListParams) ([]Job, error)

	// Touch bumps the lease of the caller's job to Now. It may skip the
	// write when the lease would move by less than [LeaseGrain], and never
	// moves a lease back. It returns [ErrNotFound] for an unknown or foreign
	// job.
	Touch(ctx context.Context, p TouchParams) error

	// Sweep deletes every finished job whose lease is older than p.TTL at
	// Now, with its targets, and returns how many it deleted. It never
	// deletes a live job, nor a cancelled one whose target is still in
	// flight.
	Sweep(ctx context.Context, p SweepParams) (int, error)

	// Evict deletes whole evictable jobs (finished, with no target in
	// flight) until the store total is at most p.MaxBytes or no caller
	// over its share has an evictable job that holds bytes, and returns
	// how many it deleted. The budget is shared per caller: a caller's
	// share is p.MaxBytes divided by the number of callers holding bytes
	// (live jobs' included), and what it holds counts its live jobs'
	// bytes. Each job Evict deletes is the one with the oldest lease (then
	// the oldest insert) of the caller that holds the most bytes among the
	// callers whose evictable jobs hold any, as long as that caller holds
	// more than its share; callers holding equal bytes go in name order.
	// So one caller's writes evict its own results first, and a caller
	// within its share (holding no more than it) never loses a job to
	// eviction, whatever the others hold: when what is over the budget is live (the bytes of jobs that
	// cannot be evicted yet), the store stays over the budget until those
	// jobs end, and a later eviction takes from their callers, over their
	// shares, as from any other. (Over the budget by at most the live
	// bytes: the callers with an evictable job then hold no more than
	// their shares.) It never deletes a live job, nor a cancelled one
	// whose target is still in flight. Concurrent evictions never delete
	// more than one eviction alone would.
	Evict(ctx context.Context, p EvictParams) (int, error)

	// Heartbeat records that p.Runner is alive at Now. It never moves a
	// runner's heartbeat back: a late write with an older time is a no-op.
	Heartbeat(ctx context.Context, p HeartbeatParams) error

	// Reap fails the jobs p selects, in one atomic step (or, with
	// p.HandBack, hands them back: see [ReapParams]). A selected job that
	// is live ends failed with p.Reason as its error; one that was cancelled
	// stays cancelled. Either way its target in flight, if any, fails with
	// p.Reason as its error (outcome other, counted done, its error bytes
	// counted), its finished targets stay as they are, its pending targets
	// stay pending, and it is released: its runner's next drain write gets
	// [ErrNotHeld]. Reap also forgets the heartbeats it judged stale, and
	// p.Runner's (AllLive forgets all), so that the runners that left hold
	// no row. It returns how many live jobs it failed. A job it leaves
	// finished and released gets its webhook event (see The webhook
	// outbox). It releases the webhook claims of p.Runner too (AllLive:
	// every claim), due at once, so that a runner that restarts or closes
	// leaves no event waiting for a lease.
	Reap(ctx context.Context, p ReapParams) (int, error)

	// Stats returns the store-wide counts.
	Stats(ctx context.Context) (Stats, error)

	// Expire ends, in one atomic step, every queued job whose Deadline is
	// set and at or before Now: its pending targets fail with outcome
	// [OutcomeExpired] and error [DeadlineReason] (counted done, their
	// error bytes counted), and the job gets its final status from its
	// targets ([AggregateStatus]: failed when none is done) with error
	// [DeadlineReason], FinishedAt and its lease set to Now, and its
	// webhook event (see The webhook outbox). A running job is its
	// runner's to end (see FinishParams.Expire). It returns the jobs it
	// ended.
	Expire(ctx context.Context, p ExpireParams) ([]Expired, error)

	// ClaimWebhooks claims up to p.Limit pending webhook events that are
	// due at Now for p.Runner, round-robin across callers: every caller's
	// oldest due event first (oldest due first among them), then every
	// caller's second, and so on, and no more of one caller than
	// p.PerCaller allows. Each one's Attempt goes up by one, and it is not
	// due again until p.Lease has passed (see The webhook outbox). A
	// [HookTargets] event carries its targets, read in the same call.
	// Concurrent claims never return the same event while its lease
	// holds, nor together exceed p.PerCaller for a caller. No event due is
	// an empty answer, not an error.
	ClaimWebhooks(ctx context.Context, p ClaimWebhooksParams) ([]WebhookDelivery, error)

	// FinishWebhook ends the claim of the job's pending event: it deletes
	// the event (or moves the job's entry on to its next event: see The
	// webhook outbox), or with p.Retry releases it, due again p.RetryIn
	// after Now, or with p.Drop deletes the job's entry. It returns
	// [ErrNotHeld], with no change, unless p.Runner still holds the claim
	// of attempt p.Attempt at p.Cursor, and [ErrNotHeld] too for an event
	// that is gone.
	FinishWebhook(ctx context.Context, p FinishWebhookParams) error
}
