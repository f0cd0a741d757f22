// Package batch runs asynchronous batch fetch jobs.
//
// A caller submits a list of targets (URLs with per-target fetch options) and
// gets a job id back at once. The job drains its targets one at a time in the
// background through a [FetchFunc] that the host injects; the caller polls a
// status summary, reads per-target results, or cancels. The package is the
// core of batchkit: it defines the [Runner], the [Store] interface and the
// vocabulary, and knows nothing of SQL or HTTP. Adapter packages supply a
// SQLite store (batchstore), HTTP handlers (batchhttp) and CLI commands
// (batchcli); batch/batchtest has an in-memory store, fake fetchers and the
// conformance suites.
//
// # Which names are whose
//
// A host (a daemon that embeds batchkit) uses [New], [Config] (with
// [Duration]), [Runner] and its methods, [FetchFunc], [Caller], [Target],
// [Options], [Result], the outcomes ([Outcome], [NewFetchError],
// [ErrFetchBusy], [OutcomeError], [HintError]), the statuses ([JobStatus],
// [TargetStatus]), what the runner's methods return ([JobInfo],
// [TargetInfo], [TargetResult], [StatusOptions], [WaitOptions],
// [SubmitOptions]), webhooks ([DeliverFunc], [WebhookEvent]), and the errors
// ([ErrNotFound], [ErrCallerBusy], [ErrBusy], … and [TargetError]). The
// adapters batchstore (SQLite) and batchstore/pgstore (PostgreSQL) supply a
// [Store], batchhttp the HTTP side (handler, readiness, metrics, server),
// batchnet the guarded fetch client, batchcli the commands.
//
// A store author implements [Store], and uses what its methods take and
// return: the *Params structs ([CreateParams], [ClaimParams],
// [FinishParams], …), [Job], [Claimed], [Step], [TargetFinish],
// [TargetRecord], [Limits], [Stats], [Capabilities], [ChangeFeed],
// [WebhookDelivery], [LeaseGrain], [CanonicalTargets] and [IdemKeyWith];
// see "Writing a Store" below. A host never needs these.
//
// # Wiring
//
//	r, err := batch.New(batch.Config{
//		Store:  store,           // e.g. batchstore.Open(ctx, "batch.db", batchstore.Options{})
//		Fetch:  myFetcher,       // func(ctx, batch.Caller, batch.Target) (batch.Result, error)
//		Logger: logger,          // *slog.Logger; nil discards
//	})
//	if err != nil { … }
//	if err := r.Start(ctx); err != nil { … }   // fails jobs a previous process left live
//	defer r.Close(context.Background())         // a fresh context: one done already returns at once
//	metrics.RegisterSet(r.Metrics())            // or batchserver.Metrics, with # HELP from r.MetricsHelp()
//
//	job, reused, err := r.Submit(ctx, caller, targets)   // job.ID, job.Status
//	info, err := r.Status(ctx, caller, job.ID, batch.StatusOptions{Results: true})
//
// # Lifecycle
//
// A job is queued → running → done | partial | failed | cancelled: done when
// every target succeeded, failed when every target failed (or a restart
// interrupted the job), partial otherwise. A target is pending → running →
// done | failed. Jobs start oldest first; Config.Workers jobs drain at once,
// each strictly serially: target i+1 starts only after target i is stored.
// The store makes that one write per target: the claim starts target 0, and
// the write that stores target i starts target i+1 in the same transaction
// (or, after the last target or a cancel, gives the job its final status).
// A target's failure is stored on that target and the job goes on; a
// panicking fetcher fails only its target ("internal error"); every fetch has
// a deadline (Config.TargetTimeout); a result envelope over
// Config.MaxResultBytes fails with outcome too_long. A fetcher that reports
// busy ([ErrFetchBusy]) is retried with jittered exponential back-off for at
// most Config.BusyWait, then the target fails with outcome busy.
//
// [Runner.Cancel] flips a live job to cancelled at once. The cancel rule:
// the target that the last write started is the one in flight; a cancel
// lets it finish and be stored, and nothing after it starts; later targets
// stay pending. So a cancel that lands after target i was stored lets
// target i+1, started by that same write, finish and be stored. A target
// that is only waiting for a busy fetcher when its job is cancelled is not
// fetched: it fails with outcome cancel. A cancel is a store write, so it
// works through any runner that shares the store, whichever drains the job.
//
// Jobs are never resumed, so each target is fetched at most once: a job a
// runner can no longer finish fails with error "restart" (its target in
// flight too; finished targets stay; pending targets stay pending).
// [Runner.Start] fails, before it starts its workers, the jobs left by a
// previous run: on a store that serves one process (see [Capabilities]),
// every queued or running job, as the original design asks; on a shared
// store, the jobs held under its own [Config].RunnerID and those of stale
// runners, leaving queued jobs to whoever claims them. [Runner.Close] stops
// taking work, cancels in-flight fetches with cause [ErrClosed] (a fetch
// cut short is not stored), waits for its workers, fails the jobs it still
// holds at once, and waits for every goroutine it started. A store write
// that fails for a while is retried with back-off until it succeeds or the
// runner closes, so a passing fault never strands a job as running.
//
// # Liveness
//
// Every runner has an id ([Config].RunnerID; random unless the host sets a
// stable one per node), and every drain write names it: a store refuses the
// write with [ErrNotHeld], changing nothing, once that runner no longer
// holds the job, and the runner then stops draining it. A runner records a
// heartbeat every Config.HeartbeatInterval (10s), whatever its targets are
// doing, so a target waiting minutes for a busy fetcher does not make it
// look dead. After each heartbeat the store took (and in each sweep), a
// runner fails the jobs of runners sharing the store whose heartbeat is
// older than Config.StaleAfter (1m, at least twice the interval): a node
// that died mid-target has its jobs failed within StaleAfter plus one
// HeartbeatInterval of its last heartbeat, finished targets intact, and its
// callers get their caps back.
//
// An outage of the store is not staleness. A heartbeat's age is taken on
// the store's clock, which goes on while nobody reaches the store, so a
// runner judges others stale only once it has reached the store without a
// failed call for a continuous StaleAfter, counted from its last failed
// (or slower than HeartbeatInterval) heartbeat or other background call,
// or from Start: by then every live runner has had at least one
// HeartbeatInterval to write a heartbeat after the outage. This holds for
// the stale reap at Start too, so on a shared store Start fails only the
// jobs held under its own id. A dead runner's jobs are thus failed within
// StaleAfter plus one HeartbeatInterval of the later of its last heartbeat
// and the reaper's last failed call (of the end of the outage, for a reaper
// that saw it), or of the reaper's Start.
//
// # Caps and idempotency
//
// A submit is validated (a named caller, 1..Config.TargetsPerJob targets,
// non-empty URLs, known modes), then, atomically in the store: if the caller
// has a job for the same target list ([IdemKey]) whose lease is unexpired and
// that was not cancelled or failed, that job is returned with reused true and
// its lease bumped; otherwise the caps are checked — Config.JobsPerCaller
// live jobs per caller ([ErrCallerBusy]) and Config.JobsTotal live jobs in
// all ([ErrBusy]), where live means queued or running — and the job is
// inserted. A resubmit after a cancel or a restart is a retry and makes a new
// job.
//
// # Lease, TTL and byte budget
//
// Each job has one sliding lease, bumped on submit (and reused submit), on
// every target completion, and on every owner read ([Runner.Touch]; stores
// may skip bumps smaller than [LeaseGrain]). A background sweeper deletes a
// finished job once its lease is older than Config.TTL, and evicts whole
// finished jobs while the stored result and error bytes exceed
// Config.MaxBytes. The budget is shared per caller: eviction takes from the
// caller that holds the most bytes (live jobs' included), its oldest lease
// first, so one caller's writes evict its own results before anyone else's,
// and a caller within an equal share (MaxBytes divided by the number of
// callers holding results) loses nothing while another caller is over its
// share and has a finished job to give ([Store.Evict]). Live jobs are never
// swept or evicted. Owner reads are scoped: another caller's job is
// [ErrNotFound], like an unknown id.
//
// # Webhooks
//
// A submit may name a webhook ([Runner.SubmitWith], [SubmitOptions]): when
// the job finishes (done, partial, failed, a restart included, or
// cancelled, queued or running) its URL receives one [EventJobFinished]
// event ([WebhookEvent]: the job's id, final status, error, counts and
// times, never a target URL). The core decides when an event is due and
// stores it; the host delivers it through Config.Deliver, a [DeliverFunc]
// (batchhttp.NewWebhookSender POSTs it signed as the Standard Webhooks
// specification says). A runner without Deliver refuses a webhook
// ([ErrWebhooksDisabled]).
//
// Delivery is at least once and survives a crash. The store writes the
// pending event in the same atomic step that gives the job its final
// status (see the Store's The webhook outbox): the FinishTarget of its last
// target, the Cancel of a queued job, or the Reap of a restart. A runner
// with Deliver claims due events, its own and those of every runner
// sharing the store, under a lease (Config.WebhookTimeout plus a minute),
// so that no two runners attempt one event at once, and a runner that
// dies mid-attempt leaves the event to the next claim once the lease has
// passed (a runner that restarts under the same id, or closes, releases
// its claims at once). A failed attempt is retried after
// Config.WebhookBackoff (5s), doubled for each attempt before (at most an
// hour) and jittered; an event whose next retry would start more than
// Config.WebhookRetryFor (24h) after the job finished is dropped, and
// counted. Every attempt of an event carries the same id ("msg_" and the
// job id, from which a sender may derive the id it sends), so a receiver
// can ignore a repeat.
//
// Delivery is fair across callers. The runner delivers from a pool of
// Config.WebhookWorkers (8) slots, each delivery in a slot of its own, so a
// receiver that hangs holds its slot (for at most Config.WebhookTimeout)
// and nothing else; a freed slot claims again at once. Each claim takes
// every caller's oldest due event before anyone's second, and none of a
// caller that has Config.WebhookInFlightPerCaller (2) events claimed, on
// any runner sharing the store. A caller's pending events (its live jobs
// with a webhook and its events not yet delivered or dropped) are capped at
// Config.WebhookPendingPerCaller (100): a submit with a webhook beyond it
// is [ErrWebhooksBusy], decided in the store's Create. Each event names
// its caller ([WebhookEvent].Caller), so that a sender signs it with that
// caller's secret (batchhttp.WebhookSender does). The webhook URL is part of
// the idempotency key ([IdemKeyWith]), visible to the job's owner
// ([JobInfo].WebhookURL) and never logged; neither is a delivery error,
// which may name the URL or its host.
//
// # Logs and metrics
//
// Logs go to Config.Logger as structured records with job_id, caller, idx,
// targets, status, outcome and duration attributes. No record ever carries a
// target URL, a host name, a fetch error's text or the idempotency key, for any
// caller; for a [Caller.Restricted] caller even the failure outcome is left
// out. A store outage is logged twice, at WARN: "batch store unreachable"
// when a background call first fails (with the op and the error's class:
// "unavailable", "timeout" or "error") and "batch store reachable again"
// when one first succeeds (with the outage's length and the failed calls);
// the calls that fail meanwhile are DEBUG lines with the class only. An
// outage error's text is never logged: a driver's error may name the
// database's user, host and port. [Runner.Metrics] is the runner's own metrics set, with the prefix
// Config.MetricsPrefix (default "batch"):
//
//	<p>_jobs_total{outcome}       created reused done partial failed cancelled restart other
//	<p>_targets_total{outcome}    ok blocked timeout busy upstream_4xx upstream_5xx unsupported too_long cancel other
//	<p>_queue_depth               gauge: queued jobs, sampled at claims and collect passes
//	<p>_targets_inflight          gauge: fetches in flight on this runner
//	<p>_job_seconds               histogram: claim to finish
//	<p>_target_seconds            histogram: one target, busy waits included
//	<p>_result_bytes              histogram: stored result envelope size
//	<p>_webhooks_total{outcome}   delivered failed dropped (failed: an attempt; dropped: an event given up)
//	<p>_webhook_seconds           histogram: one delivery attempt
//	<p>_fetch_overruns_total      fetches that returned over FetchOverrunGrace after their context ended
//	<p>_webhooks_inflight         gauge: deliveries in flight on this runner (the pool's busy slots)
//
// Every series exists from construction; an outcome outside its set counts as
// other.
//
// # Traces
//
// Config.Observer (an [Observer]; batchotel makes one for OpenTelemetry) is
// told of each step of a job's life, with the context the step runs in:
// the submit, the claim, each target's fetch and store write, the final
// status, each webhook attempt and each reap. The core imports no tracing
// library. A job stores the W3C trace context ([TraceContext]) of the
// request that submitted it, as two checked opaque strings, and hands it to
// the observer of whichever runner claims the job, so that the drain
// continues the submitter's trace; batchotel makes the drain a child of
// the submit span rather than a linked new trace (its package
// documentation says why). An observer is never given a target URL, a
// host, a webhook URL or an error's text.
//
// # Several runners, one store
//
// A runner keeps no state that the store does not have: cancel is a store
// write that the draining runner sees before its next target, and reads go to
// the store. Several runners (on several nodes) can therefore share one store
// whose [Capabilities] say Shared; a store that serves one process has one
// runner at a time. [Runner.Wait] wakes when this runner changes the job it
// waits on (a change to another job does not wake it); a store with a
// [ChangeFeed] wakes waits and idle workers for what other runners do too,
// and every runner also polls the store every Config.PollInterval.
//
// # Writing a Store
//
// A [Store] is the whole persistence contract; every method is atomic, and
// its parameters travel in structs so that fields can be added without
// breaking implementations. batchdrivertest.TestStore, batchdrivertest.TestRunner and
// batchdrivertest.TestStoreReopen are the conformance suites every implementation
// runs, each case named <Group>/<Case> (TestStore/Drain/FinishTargetFenced);
// their cluster cases run only for a store whose [Store.Capabilities] say
// Shared.
package batch
