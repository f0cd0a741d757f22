package batch

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error the runner and stores return for these
// conditions matches one of them with [errors.Is].
var (
	// ErrNoTargets: a submit with an empty target list.
	ErrNoTargets = errors.New("batch: no targets")
	// ErrTooManyTargets: a submit with more targets than Config.TargetsPerJob.
	ErrTooManyTargets = errors.New("batch: too many targets")
	// ErrInvalidTarget: a target refused at submit (empty URL, unknown mode).
	// The error is a *[TargetError] that names the target.
	ErrInvalidTarget = errors.New("batch: invalid target")
	// ErrInvalidCaller: a caller without a name.
	ErrInvalidCaller = errors.New("batch: caller has no name")
	// ErrCallerBusy: the caller already has Config.JobsPerCaller live jobs.
	ErrCallerBusy = errors.New("batch: caller has too many live jobs")
	// ErrBusy: there are already Config.JobsTotal live jobs.
	ErrBusy = errors.New("batch: too many live jobs")
	// ErrNotFound: no such job or target for this caller. A job owned by
	// another caller is not found.
	ErrNotFound = errors.New("batch: not found")
	// ErrFinished: the job has already finished (cancel of a finished job).
	ErrFinished = errors.New("batch: job already finished")
	// ErrLive: the job is still queued or running (retry of a live job).
	ErrLive = errors.New("batch: job still live")
	// ErrNothingToRetry: a retry of a job whose every target is done.
	ErrNothingToRetry = errors.New("batch: nothing to retry")
	// ErrUnavailable: the store cannot serve the call now (a lock wait ran
	// out, the disk is full, the database is read-only or closed). Stores
	// mark such errors with it; the call may succeed later.
	ErrUnavailable = errors.New("batch: store unavailable")
	// ErrNotHeld: a drain write by a runner that no longer holds the job:
	// the job was failed by [Store.Reap] (its runner was stale, restarted
	// or closed) or it finished. The store changed nothing; the runner stops
	// draining the job.
	ErrNotHeld = errors.New("batch: job not held by this runner")
	// ErrClosed: the runner is closed. It is also the cause of the context
	// of a fetch cut short by [Runner.Close].
	ErrClosed = errors.New("batch: runner closed")
)

// TargetError is a submit refused because of one target.
type TargetError struct {
	Index  int    // the target's position in the submitted list
	Reason string // why it was refused, e.g. "empty url"
}

// Error returns "batch: target <index>: <reason>".
func (e *TargetError) Error() string {
	return fmt.Sprintf("batch: target %d: %s", e.Index, e.Reason)
}

// Unwrap makes a TargetError match [ErrInvalidTarget].
func (e *TargetError) Unwrap() error { return ErrInvalidTarget }
