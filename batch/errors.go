package batch

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error the runner and stores return for these
// conditions matches one of them with [errors.Is].
var (
	// ErrTooManyTargets: a submit with more targets than Config.TargetsPerJob.
	ErrTooManyTargets = errors.New("batch: too many targets")
	// ErrInvalidTarget: a target refused at submit (empty URL, unknown mode).
	// The error is a *[TargetError] that names the target.
	ErrInvalidTarget = errors.New("batch: invalid target")
	// ErrInvalidCaller: a caller without a name.
	ErrInvalidCaller = errors.New("batch: caller has no name")
	// ErrLive: the job is still queued or running (retry of a live job).
	ErrLive = errors.New("batch: job still live")
	// ErrNothingToRetry: a retry of a job whose every target is done, or
	// was skipped at submit.
	ErrNothingToRetry = errors.New("batch: nothing to retry")
	// ErrClosed: the runner is closed. It is also the cause of the context
	// of a fetch cut short by [Runner.Close].
	ErrClosed = errors.New("batch: runner closed")
	// ErrDeadlineTooFar: a submit whose deadline is later than
	// Config.MaxDeadline from now.
	ErrDeadlineTooFar = errors.New("batch: deadline too far")
	// ErrInvalidDeadline: a submit whose deadline is not in the future.
	ErrInvalidDeadline = errors.New("batch: invalid deadline")
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
