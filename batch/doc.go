// Package batch runs asynchronous batch fetch jobs for a host daemon.
//
// A caller submits a list of targets and gets a job id back at once. The
// job drains its targets one at a time, through a [FetchFunc] the host
// provides. The caller polls a status summary, reads each target's result,
// or cancels. This package is the core: it knows nothing of SQL or HTTP.
//
// # Getting started
//
// Build a [Runner] from a [Config] with a store and a fetch function:
//
//	r, err := batch.New(batch.Config{
//		Store:   store,   // batchstore.Open(ctx, "batch.db", batchstore.Config{})
//		Fetch:   fetch,   // func(ctx, batch.Caller, batch.Target) (batch.Result, error)
//		Options: options, // the per-target options fetch takes; none by default
//		Logger:  logger,  // nil discards
//	})
//	if err != nil { … }
//	if err := r.Start(ctx); err != nil { … } // fails jobs a previous process left live
//	defer r.Close(context.Background())      // a fresh context: a done one returns at once
//
//	job, reused, err := r.Submit(ctx, caller, targets)
//	info, err := r.Wait(ctx, caller, job.ID, batch.WaitOptions{Timeout: 30 * time.Second})
//
// Register [Runner.Metrics] with your metrics endpoint. Stores live in
// batchstore (SQLite) and batchstore/pgstore (PostgreSQL). batchhttp serves
// the runner over HTTP. batch/batchtest has an in-memory store and fakes.
//
// # Target options
//
// A target is a URL and the options the host's fetch takes. The host
// declares them in an [OptionSet]: names, JSON types, allowed values. The
// runner refuses a target whose options do not fit (or, with
// [OnInvalidSkip], skips it: it ends at once, never fetched), stores them
// as JSON and hands them to the fetch unchanged. batch/batchsift is
// sift's set, ready to use. The HTTP API takes them flat beside "url" and
// describes them in its OpenAPI document.
//
// # Jobs and targets
//
// A job is queued, then running, then done, partial, failed or cancelled.
// A target is pending, then running, then done or failed. Each target's
// outcome ([Outcome]) says how it ended and whether a retry may help.
// By default jobs are never resumed: a job its runner can no longer finish
// fails with error "restart". With Config.Resume a closing, restarting or
// dead runner hands its jobs on instead, and they continue under the same
// id on any runner; the target that was in flight ends "interrupted".
// Either way each target is fetched at most once, unless the host sets
// Config.RepeatInterrupted.
//
// A caller owns its jobs. Another caller's job is [ErrNotFound], like an
// unknown id. Caps bound live jobs per caller and in all. Submitting the
// same list again returns the same job while its lease lasts.
//
// # Examples
//
// Each task has a runnable Example. ExampleRunner submits a job and reads
// it. Others cancel a job, retry its failures, deliver a webhook, handle a
// busy fetcher, keep a restricted caller out of the logs, and skip the
// targets a submit refuses.
//
// # Design
//
// The reasoning behind each rule is in the repository, under docs/design:
//
//   - drain.md: statuses, the cancel rule and restarts.
//   - submit.md: validation, caps and idempotency.
//   - retention.md: the lease, the TTL and the byte budget.
//   - liveness.md: heartbeats, stale runners and store outages.
//   - resume.md: handing jobs on (Config.Resume): what is fetched at most
//     once, and what may be fetched twice.
//   - webhooks.md: delivery, retries, fairness and signing.
//   - tracing.md: the observer hook and one trace per job.
//   - store-contract.md: for store authors; a host never needs it.
package batch
