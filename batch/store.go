package batch

import (
	"context"
	"time"
)

// Job is a job's metadata as a [Store] holds it. It never carries results.
type Job struct {
	ID     string
	Caller Caller
	// IdemKey is the idempotency key (see [IdemKey]). It is stored as a hash
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
	// Runner is the id of the runner draining the job while it is running,
	// and Heartbeat is when that runner last wrote to it.
	Runner    string
	Heartbeat time.Time
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
}

// Bytes is what a finished target adds to its job's byte count.
func (t TargetRecord) Bytes() int64 { return int64(len(t.Result) + len(t.Error)) }

// NewJob is what [Store.Create] inserts.
type NewJob struct {
	ID      string
	Caller  Caller
	IdemKey string
	Targets []Target
	Now     time.Time
}

// Limits are the caps and the lease TTL that [Store.Create] enforces.
type Limits struct {
	JobsPerCaller int
	JobsTotal     int
	TTL           time.Duration
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

// Store persists jobs and targets. Every method is atomic: a store backed by a
// database runs each one as a single transaction, so that several runners on
// several nodes can share one store. Methods that take a caller name are owner
// scoped: a job owned by another caller is [ErrNotFound], exactly like an
// unknown id.
//
// Ties between jobs created (Claim, List) or leased (Evict) at the same
// instant are broken in a store-specific order. An error a store cannot help
// now (lock wait, full disk) should match [ErrUnavailable].
//
// Every implementation must pass batchtest.TestStore.
type Store interface {
	// Create inserts a new queued job with pending targets, unless the caller
	// already has a job with the same IdemKey whose lease is unexpired
	// (Lease+TTL after Now) and whose status is not cancelled or failed: then
	// it bumps that job's lease to Now and returns it with reused true.
	// Reuse is decided before the caps; the caps count live jobs: the
	// caller's first ([ErrCallerBusy]), then all ([ErrBusy]). Reuse, caps
	// and insert are one atomic step, so concurrent creates never exceed a cap
	// nor make two jobs for one key.
	Create(ctx context.Context, job NewJob, lim Limits) (j Job, reused bool, err error)

	// Claim marks the oldest queued job running, held by runner, and returns
	// it with its targets in idx order (without results). It returns
	// [ErrNotFound] when no job is queued. Two claims never return the same
	// job.
	Claim(ctx context.Context, runner string, now time.Time) (Job, []TargetRecord, error)

	// StartTarget marks a pending target of a running job running. It returns
	// [ErrFinished] if the job is no longer running (cancelled) or the target
	// is not pending, and [ErrNotFound] if the job is gone.
	StartTarget(ctx context.Context, jobID string, idx int, now time.Time) error

	// FinishTarget writes the outcome of a running target exactly once: it
	// stores the result or error, adds one to TargetsDone, adds the target's
	// bytes to the job and to the store total, and bumps the lease to now. It
	// does so even if the job was cancelled meanwhile, and returns the job's
	// status after the write, so the runner knows whether to go on. It returns
	// [ErrFinished] with no change if the target is not running, and
	// [ErrNotFound] if the job is gone.
	FinishTarget(ctx context.Context, jobID string, fin TargetFinish, now time.Time) (JobStatus, error)

	// FinishJob gives a running job its final status from its targets (see
	// [AggregateStatus]), sets FinishedAt and bumps the lease. A job that is
	// already finished is left as it is. It returns the job's final status,
	// or [ErrNotFound].
	FinishJob(ctx context.Context, jobID string, now time.Time) (JobStatus, error)

	// Cancel flips the caller's queued or running job to cancelled and bumps
	// its lease. Pending targets stay pending. It returns [ErrFinished] for a
	// finished job and [ErrNotFound] for an unknown or foreign one.
	Cancel(ctx context.Context, caller, jobID string, now time.Time) error

	// Get returns the caller's job and its targets in idx order. Results are
	// loaded only if withResults is set; without it, Get must not read result
	// bodies at all. It never writes.
	Get(ctx context.Context, caller, jobID string, withResults bool) (Job, []TargetRecord, error)

	// GetTarget returns the caller's job and one of its targets, with its
	// result. It returns [ErrNotFound] for an idx outside the job.
	GetTarget(ctx context.Context, caller, jobID string, idx int) (Job, TargetRecord, error)

	// List returns up to limit of the caller's jobs, newest first.
	List(ctx context.Context, caller string, limit int) ([]Job, error)

	// Touch bumps the lease of the caller's job to now. It may skip the
	// write when the lease would move by less than [LeaseGrain]. It returns
	// [ErrNotFound] for an unknown or foreign job.
	Touch(ctx context.Context, caller, jobID string, now time.Time) error

	// Sweep deletes every finished job whose lease is before the given time,
	// with its targets, and returns how many it deleted. It never deletes a
	// live job.
	Sweep(ctx context.Context, leaseBefore time.Time) (int, error)

	// Evict deletes whole finished jobs, oldest lease first, until the store
	// total is at most maxBytes or no finished job is left, and returns how
	// many it deleted. It never deletes a live job.
	Evict(ctx context.Context, maxBytes int64) (int, error)

	// MarkInFlightFailed is the restart hook. It marks every queued and
	// running job failed with the given reason as its error, and every
	// running target failed with the same error (outcome other) — including
	// the in-flight target of a job cancelled just before the restart, whose
	// job stays cancelled. Pending targets stay pending. It returns how many
	// jobs it marked failed.
	//
	// The stores of this module serve one process, so every live job is in
	// flight. A store shared by several nodes scopes this to the jobs held by
	// runner and to jobs whose runner's heartbeat is older than staleBefore.
	MarkInFlightFailed(ctx context.Context, runner, reason string, staleBefore, now time.Time) (int, error)

	// Stats returns the store-wide counts.
	Stats(ctx context.Context) (Stats, error)
}
