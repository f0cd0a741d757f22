package batchdriver

import "errors"

// Sentinel errors a store returns. The batch package re-exports the
// ones a host meets.
var (
	// ErrNoTargets: a submit with an empty target list.
	ErrNoTargets = errors.New("batch: no targets")
	// ErrCallerBusy: the caller already has Config.JobsPerCaller live jobs.
	ErrCallerBusy = errors.New("batch: caller has too many live jobs")
	// ErrBusy: there are already Config.JobsTotal live jobs.
	ErrBusy = errors.New("batch: too many live jobs")
	// ErrNotFound: no such job or target for this caller. A job owned by
	// another caller is not found.
	ErrNotFound = errors.New("batch: not found")
	// ErrFinished: the job has already finished (cancel of a finished job).
	ErrFinished = errors.New("batch: job already finished")
	// ErrUnavailable: the store cannot serve the call now (a lock wait ran
	// out, the disk is full, the database is read-only or closed). Stores
	// mark such errors with it; the call may succeed later.
	ErrUnavailable = errors.New("batch: store unavailable")
	// ErrNotHeld: a drain write by a runner that no longer holds the job:
	// the job was failed by [Store.Reap] (its runner was stale, restarted
	// or closed) or it finished. The store changed nothing; the runner stops
	// draining the job.
	ErrNotHeld = errors.New("batch: job not held by this runner")
	// ErrWebhooksBusy: a submit with a webhook by a caller that has
	// Config.WebhookPendingPerCaller webhook events pending already (its
	// live jobs with a webhook and its events not yet delivered or
	// dropped). A submit without a webhook is not refused.
	ErrWebhooksBusy = errors.New("batch: too many pending webhook events")
)
