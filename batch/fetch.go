package batch

import (
	"context"
	"errors"
	"time"
)

// FetchFunc fetches one target for caller. It is the only behaviour the host
// injects into the [Runner].
//
// ctx carries the per-target deadline (Config.TargetTimeout) and is cancelled
// with cause [ErrClosed] when the runner closes. A FetchFunc should return
// promptly once ctx is done; one that does not is abandoned at the deadline
// and its eventual result ignored. An abandoned call still counts against
// Config.Workers until it returns, so batch work never has more than Workers
// fetches running: a FetchFunc that ignores ctx stalls the drain instead of
// piling up calls. [Runner.Close] waits for it too. A call that returns
// more than [FetchOverrunGrace] after ctx ended (its deadline passed, or
// the runner closed) is an overrun: the runner counts it in
// <prefix>_fetch_overruns_total and logs it at Warn (job_id, idx and how
// late it returned, never the URL), so that a host learns that its
// FetchFunc ignores ctx.
//
// An error fails the target. It may carry an [Outcome] (an [OutcomeError]) and
// a hint (a [HintError]), found with [errors.As]; see [NewFetchError]. An error
// whose outcome is [OutcomeBusy] (see [ErrFetchBusy]) is not a failure: the
// runner waits and retries the same target.
type FetchFunc func(ctx context.Context, caller Caller, t Target) (Result, error)

// FetchOverrunGrace is how long after its context ended a [FetchFunc] may
// take to return before the runner counts the call as an overrun. A
// FetchFunc that watches ctx returns within milliseconds of it.
const FetchOverrunGrace = time.Second

// OutcomeError is an error that says which [Outcome] a failed fetch had.
type OutcomeError interface {
	error
	Outcome() Outcome
}

// HintError is an error that carries a hint for the caller, such as
// "browser" (the page needs a browser). The hint is stored with the target.
type HintError interface {
	error
	Hint() string
}

type fetchError struct {
	outcome Outcome
	hint    string
	err     error
}

func (e *fetchError) Error() string    { return e.err.Error() }
func (e *fetchError) Unwrap() error    { return e.err }
func (e *fetchError) Outcome() Outcome { return e.outcome }
func (e *fetchError) Hint() string     { return e.hint }

// NewFetchError returns err annotated with an outcome and a hint (either may
// be empty). Its message is err's.
func NewFetchError(outcome Outcome, hint string, err error) error {
	if err == nil {
		err = errors.New(string(outcome))
	}
	return &fetchError{outcome: outcome, hint: hint, err: err}
}

// ErrFetchBusy is what a FetchFunc returns (or wraps) when the host's fetch
// gates are full. The runner backs off and retries the target, for at most
// Config.BusyWait in all, then fails it with outcome busy.
var ErrFetchBusy = NewFetchError(OutcomeBusy, "", errors.New("fetcher busy"))

// outcomeOf returns the outcome err carries, or "" if it carries none.
func outcomeOf(err error) Outcome {
	var oe OutcomeError
	if errors.As(err, &oe) {
		return oe.Outcome()
	}
	return ""
}

// hintOf returns the hint err carries, or "".
func hintOf(err error) string {
	var he HintError
	if errors.As(err, &he) {
		return he.Hint()
	}
	return ""
}

// isBusy reports whether err means the fetcher was busy.
func isBusy(err error) bool { return outcomeOf(err) == OutcomeBusy }

// RetryAfter returns err marked as the answer of a host that asked to be
// left alone for d (an HTTP 429 or 503 with a Retry-After header), for a
// [FetchFunc] to return. The runner does not fail the target: no job
// fetches from that host until d has passed (capped by
// Config.MaxRetryAfter; on a store that implements
// [batchdriver.HostGate], no job of any runner sharing it), and the
// target is fetched again then. A target that has waited Config.BusyWait
// in all fails with err. A d of zero or less waits for no time but still
// retries.
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		err = errors.New("retry after " + d.String())
	}
	return &retryAfterError{wait: max(d, 0), err: err}
}

type retryAfterError struct {
	wait time.Duration
	err  error
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfterOf reports the wait that err carries (see [RetryAfter]), and
// whether it carries one.
func RetryAfterOf(err error) (time.Duration, bool) {
	var ra *retryAfterError
	if errors.As(err, &ra) {
		return ra.wait, true
	}
	return 0, false
}

// RobotsFunc reports what the robots rules of t's host say about t, for
// Config.Robots. The runner asks before each fetch, so an implementation
// caches the rules per host (batchrobots.Checker does). An error fails the
// target as a fetch error would (its [Outcome], if it carries one): an
// implementation decides what an unreachable robots.txt means and
// answers with a Robots for it instead where it can.
type RobotsFunc func(ctx context.Context, t Target) (Robots, error)

// Robots is what a [RobotsFunc] answers for one target.
type Robots struct {
	// Disallowed ends the target with outcome robots, without a fetch.
	Disallowed bool
	// CrawlDelay is the host's least time between two fetch starts; the
	// runner keeps it as it keeps Config.HostInterval, whichever is
	// longer.
	CrawlDelay time.Duration
}
