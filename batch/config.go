package batch

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchobserve"
)

// Defaults for [Config].
const (
	DefaultTargetsPerJob  = 32
	DefaultJobsPerCaller  = 1
	DefaultJobsTotal      = 8
	DefaultTTL            = 24 * time.Hour
	DefaultMaxBytes       = 64 << 20
	DefaultWorkers        = 2
	DefaultTargetTimeout  = 60 * time.Second
	DefaultMaxResultBytes = 1 << 20
	DefaultBusyWait       = 2 * time.Minute
	DefaultStoreWait      = time.Minute
	DefaultSweepInterval  = time.Minute
	DefaultPollInterval   = time.Second
	// DefaultHeartbeatInterval: one small write per runner every 10s costs
	// nothing even for a fleet of nodes on one database.
	DefaultHeartbeatInterval = 10 * time.Second
	// DefaultStaleAfter: six missed heartbeats. A live runner survives a
	// long GC pause, a checkpoint stall or a store that is slow for tens of
	// seconds; the jobs of a runner that died are failed within this plus
	// one HeartbeatInterval (70s with the defaults).
	DefaultStaleAfter    = time.Minute
	DefaultMetricsPrefix = "batch"
	// DefaultCloseGrace: with Resume, most fetches end within it, and a
	// shutdown budget of 10s (batchserver's default close timeout) keeps
	// half of it for storing the interrupted targets and handing the jobs
	// back.
	DefaultCloseGrace = 5 * time.Second
	// DefaultWebhookTimeout: Standard Webhooks receivers answer at once
	// and do their work later; ten seconds is generous.
	DefaultWebhookTimeout = 10 * time.Second
	// DefaultWebhookBackoff: the first retry 5s after a failed attempt,
	// then 10s, 20s, … up to an hour between attempts.
	DefaultWebhookBackoff = 5 * time.Second
	// DefaultWebhookRetryFor: a day of retries (some 30 to 40 attempts), as
	// long as a finished job is kept by default.
	DefaultWebhookRetryFor = 24 * time.Hour
	// DefaultWebhookWorkers: eight deliveries at once, each in a slot of
	// its own, so that none waits for the slowest.
	DefaultWebhookWorkers = 8
	// DefaultWebhookInFlightPerCaller: a caller whose receiver hangs holds
	// two of the eight slots; the other six serve everyone else.
	DefaultWebhookInFlightPerCaller = 2
	// DefaultWebhookPendingPerCaller: room for a day of a busy caller's
	// jobs while its receiver is down, and a bound on the outbox of a
	// caller who churns jobs whose receiver never answers.
	DefaultWebhookPendingPerCaller = 100
	// DefaultFetchesPerHost: the seeds' acquire gate, two fetches to one
	// host at once.
	DefaultFetchesPerHost = 2
	// DefaultMaxRetryAfter: an upstream's Retry-After holds its host back
	// for a minute at most, so that one odd header cannot park a job for
	// hours.
	DefaultMaxRetryAfter = time.Minute
)

// Config configures a [Runner]. The zero value of every field but Store and
// Fetch means its default. The tags match sift's [batch] config block,
// and every duration is a [Duration], written as a string such as "24h":
// the block decodes with encoding/json and both common TOML libraries.
type Config struct {
	// Store holds the jobs. Required.
	Store batchdriver.Store `json:"-" toml:"-"`
	// Fetch fetches one target. Required.
	Fetch FetchFunc `json:"-" toml:"-"`
	// Options are the per-target options the host's Fetch takes. Defaults
	// to none: a target is a URL alone.
	Options OptionSet `json:"-" toml:"-"`

	// TargetsPerJob caps the targets of one job. Defaults to 32.
	TargetsPerJob int `json:"targets_per_job" toml:"targets_per_job"`
	// JobsPerCaller caps the live (queued or running) jobs of one caller.
	// Defaults to 1.
	JobsPerCaller int `json:"jobs_per_caller" toml:"jobs_per_caller"`
	// JobsTotal caps the live jobs of all callers. Defaults to 8.
	JobsTotal int `json:"jobs_total" toml:"jobs_total"`
	// TTL is how long a finished job is kept after its lease was last
	// bumped. Defaults to 24h.
	TTL Duration `json:"ttl" toml:"ttl"`
	// MaxBytes is the byte budget for stored results and errors over all
	// jobs, shared per caller: above it, finished jobs are evicted from the
	// caller that holds the most bytes, its oldest lease first, and never
	// from a caller within its share, MaxBytes divided by the number of
	// callers holding bytes (see [Store.Evict]): while the excess is other
	// callers' live jobs, the store stays over the budget. Defaults to 64
	// MiB.
	MaxBytes int64 `json:"max_bytes" toml:"max_bytes"`
	// Workers is how many fetches run at once, so batch work never takes
	// more than this many of the host's fetch slots; unless Drains says
	// more, it is also how many jobs drain at once, each one target at a
	// time. A job that waits for its target's host (see FetchesPerHost) or
	// for a busy fetcher holds no worker meanwhile. Defaults to 2.
	Workers int `json:"workers" toml:"workers"`
	// Drains is how many jobs drain at once, each one target at a time:
	// Workers of them fetch while the others store their last target's
	// outcome, claim a job or wait for a fetch slot, so that no slot sits
	// idle while a target is written. No more than Workers fetches run at
	// once whatever it is. Defaults to Workers; it may not be below it.
	Drains int `json:"drains" toml:"drains"`
	// TargetTimeout is the deadline of one target's fetch. Defaults to 60s.
	TargetTimeout Duration `json:"target_timeout" toml:"target_timeout"`
	// MaxResultBytes caps one target's result envelope; a larger result fails
	// the target with outcome too_long. Defaults to 1 MiB.
	MaxResultBytes int `json:"max_result_bytes" toml:"max_result_bytes"`
	// BusyWait caps the total time one target waits for a busy fetcher before
	// it fails with outcome busy. Defaults to 2m.
	BusyWait Duration `json:"busy_wait" toml:"busy_wait"`
	// StoreWait is how long a target's result write is retried while the
	// store cannot take it (a full disk, say) before the target is stored as
	// failed instead, so that the job goes on. Defaults to 1m.
	StoreWait Duration `json:"store_wait" toml:"store_wait"`
	// SweepInterval is how often expired jobs are swept and the byte budget
	// enforced. Defaults to 1m.
	SweepInterval Duration `json:"sweep_interval" toml:"sweep_interval"`
	// PollInterval is how often idle workers look for jobs that another
	// runner sharing the store accepted, and how often [Runner.Wait] re-reads
	// the store. Local submits and completions wake them at once. Defaults to
	// 1s.
	PollInterval Duration `json:"poll_interval" toml:"poll_interval"`
	// MetricsPrefix prefixes every metric name. Defaults to "batch".
	MetricsPrefix string `json:"metrics_prefix" toml:"metrics_prefix"`
	// RunnerID names this runner in the store while it drains a job. A host
	// that sets a stable id (per node) lets a restarted node fail its own
	// jobs at once instead of after StaleAfter. Two live runners must never
	// share an id. Defaults to a random id.
	RunnerID string `json:"runner_id" toml:"runner_id"`
	// HeartbeatInterval is how often the runner records in the store that
	// it is alive, whatever its targets are doing. Defaults to 10s.
	HeartbeatInterval Duration `json:"heartbeat_interval" toml:"heartbeat_interval"`
	// MaxDeadline caps how far from its submit a job's deadline may be
	// (see [SubmitOptions]): a later one is [ErrDeadlineTooFar]. It is
	// also the deadline of a submit that gives none. Defaults to 0: no
	// cap, and no deadline unless the submit gives one.
	MaxDeadline Duration `json:"max_deadline" toml:"max_deadline"`
	// StaleAfter is how long a runner may go without a heartbeat before
	// any runner sharing the store fails the jobs it holds as "restart"
	// (each runner checks after each of its heartbeats). It must be at least twice HeartbeatInterval. Defaults to
	// 1m.
	StaleAfter Duration `json:"stale_after" toml:"stale_after"`
	// Resume hands jobs on instead of failing them as "restart" when their
	// runner stops: [Runner.Close] queues its jobs again, fenced from this
	// runner, after letting the targets in flight finish for CloseGrace;
	// [Runner.Start] and the stale reaper queue the jobs of a runner that
	// died. A target whose fetch was cut short ends failed with outcome
	// "interrupted" (unless RepeatInterrupted); the others drain later
	// under the same job id, on any runner sharing the store. Off by
	// default: every live job of a runner that stops fails as "restart".
	// See docs/design/resume.md in the repository.
	Resume bool `json:"resume" toml:"resume"`
	// RepeatInterrupted, with Resume, declares the host's fetches safe to
	// repeat: a target in flight when its runner stopped goes back to
	// pending and is fetched again, instead of ending "interrupted". A
	// target is then fetched at most once per runner that started it, and
	// its TargetInfo.Attempts counts each fetch that may have reached the
	// upstream. Defaults to false.
	RepeatInterrupted bool `json:"repeat_interrupted" toml:"repeat_interrupted"`
	// FetchesPerHost caps the fetches to one host (host name and port) in
	// flight at once, over every job of the runner and, on a store that
	// implements [batchdriver.HostGate] (PostgreSQL), of every runner
	// sharing the store. A job whose next target's host is full waits
	// without holding a worker: the worker drains another job meanwhile,
	// and the job goes on, in idx order, when the host has room. Defaults
	// to 2; -1 for no cap. See docs/design/politeness.md in the
	// repository.
	FetchesPerHost int `json:"fetches_per_host" toml:"fetches_per_host"`
	// HostInterval is the least time between two fetch starts to one host,
	// kept like FetchesPerHost (plus 10ms, a margin for the network, so
	// that the host sees the starts that far apart). A robots checker's
	// crawl delay (see Robots) raises it for its host. Defaults to 0: no
	// interval.
	HostInterval Duration `json:"host_interval" toml:"host_interval"`
	// MaxRetryAfter caps how long a host's request to wait (a FetchFunc's
	// [RetryAfter] error, from an HTTP 429 or 503) keeps every job from
	// fetching from it. The target is fetched again after the wait, and
	// fails with the fetch's error once it has waited BusyWait in all.
	// Defaults to 1m.
	MaxRetryAfter Duration `json:"max_retry_after" toml:"max_retry_after"`
	// Robots, if set, is asked before each fetch whether the target's
	// host lets it be fetched; a refusal ends the target with outcome
	// robots, and the host's crawl delay spaces its fetch starts (see
	// [RobotsFunc]; batchrobots.New makes one). Defaults to nil: no
	// check.
	Robots RobotsFunc `json:"-" toml:"-"`

	// CloseGrace is how long [Runner.Close], with Resume, lets the fetches
	// in flight finish before it cuts them short (or less, if Close's
	// context ends first). Keep it well below the time the host gives
	// Close: the writes that hand the jobs back come after it. Defaults to
	// 5s.
	CloseGrace Duration `json:"close_grace" toml:"close_grace"`

	// Deliver delivers the webhook events of jobs submitted with a
	// webhook (see [SubmitOptions]); batchhttp.NewWebhookSender makes one.
	// A runner with Deliver claims the due events of the store, its own
	// and those of other runners sharing it, and retries them with
	// back-off (WebhookBackoff) for WebhookRetryFor (a delivery refused
	// as blocked is dropped at once). Defaults to nil: the
	// runner delivers nothing and refuses a submit with a webhook
	// ([ErrWebhooksDisabled]).
	Deliver DeliverFunc `json:"-" toml:"-"`
	// WebhookTimeout bounds one delivery attempt. Defaults to 10s.
	WebhookTimeout Duration `json:"webhook_timeout" toml:"webhook_timeout"`
	// WebhookBackoff is the wait after the first failed attempt; it
	// doubles after each further one, up to an hour, and each wait is
	// jittered down by up to half. Defaults to 5s.
	WebhookBackoff Duration `json:"webhook_backoff" toml:"webhook_backoff"`
	// WebhookRetryFor bounds the retries: an event not delivered when the
	// next retry would start more than this after the job finished is
	// dropped, and counted. Defaults to 24h.
	WebhookRetryFor Duration `json:"webhook_retry_for" toml:"webhook_retry_for"`

	// Logger receives the runner's structured logs. Defaults to discarding
	// them.
	Logger *slog.Logger `json:"-" toml:"-"`
	// Now is a test clock. Without it the runner passes no time to the
	// store, which then uses its own clock (the database's, for a shared
	// store: see the clock note on [CreateParams]). With it every store
	// call carries Config.Now's time, and in a cluster every node's
	// Config.Now must agree. So leave it unset in production, even as
	// time.Now: set, it puts a shared store on the nodes' clocks, whose
	// skew then moves leases and staleness. The runner's own record of
	// the store's health uses it too (see docs/design/liveness.md in the
	// repository). Defaults to time.Now.
	Now func() time.Time `json:"-" toml:"-"`
	// Observer observes each job's lifecycle, for traces (see [Observer];
	// batchotel makes one for OpenTelemetry). Defaults to nil: nothing is
	// observed, at the cost of a nil check per step.
	Observer batchobserve.Observer `json:"-" toml:"-"`

	// Webhook fairness: deliveries run in a pool of WebhookWorkers slots,
	// each delivery in a slot of its own (a slow receiver holds one slot,
	// not the pool), claimed round-robin across callers, with at most
	// WebhookInFlightPerCaller of one caller's events in flight on all the
	// runners sharing the store, and at most WebhookPendingPerCaller
	// pending per caller.

	// WebhookWorkers is how many webhook deliveries this runner makes at
	// once. Defaults to 8.
	WebhookWorkers int `json:"webhook_workers" toml:"webhook_workers"`
	// WebhookInFlightPerCaller caps one caller's deliveries in flight, on
	// all the runners sharing the store: its other due events wait while
	// the pool serves other callers. Defaults to 2.
	WebhookInFlightPerCaller int `json:"webhook_in_flight_per_caller" toml:"webhook_in_flight_per_caller"`
	// WebhookPendingPerCaller caps one caller's pending webhook events:
	// its live jobs with a webhook (each will have one) and its events
	// not yet delivered or dropped. A submit with a webhook beyond it is
	// refused with [ErrWebhooksBusy], decided in the store's Create, so
	// the cap holds across nodes. Defaults to 100.
	WebhookPendingPerCaller int `json:"webhook_pending_per_caller" toml:"webhook_pending_per_caller"`
}

// withDefaults returns cfg with every zero field set to its default.
func (cfg Config) withDefaults() Config {
	cfg.TargetsPerJob = cmp.Or(cfg.TargetsPerJob, DefaultTargetsPerJob)
	cfg.JobsPerCaller = cmp.Or(cfg.JobsPerCaller, DefaultJobsPerCaller)
	cfg.JobsTotal = cmp.Or(cfg.JobsTotal, DefaultJobsTotal)
	cfg.TTL = cmp.Or(cfg.TTL, Duration(DefaultTTL))
	cfg.MaxBytes = cmp.Or(cfg.MaxBytes, DefaultMaxBytes)
	cfg.Workers = cmp.Or(cfg.Workers, DefaultWorkers)
	cfg.Drains = cmp.Or(cfg.Drains, cfg.Workers)
	cfg.TargetTimeout = cmp.Or(cfg.TargetTimeout, Duration(DefaultTargetTimeout))
	cfg.MaxResultBytes = cmp.Or(cfg.MaxResultBytes, DefaultMaxResultBytes)
	cfg.BusyWait = cmp.Or(cfg.BusyWait, Duration(DefaultBusyWait))
	cfg.StoreWait = cmp.Or(cfg.StoreWait, Duration(DefaultStoreWait))
	cfg.SweepInterval = cmp.Or(cfg.SweepInterval, Duration(DefaultSweepInterval))
	cfg.PollInterval = cmp.Or(cfg.PollInterval, Duration(DefaultPollInterval))
	cfg.HeartbeatInterval = cmp.Or(cfg.HeartbeatInterval, Duration(DefaultHeartbeatInterval))
	cfg.StaleAfter = cmp.Or(cfg.StaleAfter, Duration(DefaultStaleAfter))
	cfg.MetricsPrefix = cmp.Or(cfg.MetricsPrefix, DefaultMetricsPrefix)
	cfg.CloseGrace = cmp.Or(cfg.CloseGrace, Duration(DefaultCloseGrace))
	cfg.FetchesPerHost = cmp.Or(cfg.FetchesPerHost, DefaultFetchesPerHost)
	cfg.MaxRetryAfter = cmp.Or(cfg.MaxRetryAfter, Duration(DefaultMaxRetryAfter))
	cfg.WebhookTimeout = cmp.Or(cfg.WebhookTimeout, Duration(DefaultWebhookTimeout))
	cfg.WebhookBackoff = cmp.Or(cfg.WebhookBackoff, Duration(DefaultWebhookBackoff))
	cfg.WebhookRetryFor = cmp.Or(cfg.WebhookRetryFor, Duration(DefaultWebhookRetryFor))
	cfg.WebhookWorkers = cmp.Or(cfg.WebhookWorkers, DefaultWebhookWorkers)
	cfg.WebhookInFlightPerCaller = cmp.Or(cfg.WebhookInFlightPerCaller, DefaultWebhookInFlightPerCaller)
	cfg.WebhookPendingPerCaller = cmp.Or(cfg.WebhookPendingPerCaller, DefaultWebhookPendingPerCaller)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return cfg
}

// validate reports every invalid field of a defaulted config, joined in
// one error.
func (cfg Config) validate() error {
	var errs []error
	if cfg.Store == nil {
		errs = append(errs, errors.New("a Store is required"))
	}
	if cfg.Fetch == nil {
		errs = append(errs, errors.New("a Fetch func is required"))
	}
	if err := cfg.Options.validate(); err != nil {
		errs = append(errs, fmt.Errorf("options: %w", err))
	}
	positive := func(name string, v int64) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative, got %d", name, v))
		}
	}
	positive("targets_per_job", int64(cfg.TargetsPerJob))
	positive("jobs_per_caller", int64(cfg.JobsPerCaller))
	positive("jobs_total", int64(cfg.JobsTotal))
	positive("max_bytes", cfg.MaxBytes)
	positive("workers", int64(cfg.Workers))
	positive("max_result_bytes", int64(cfg.MaxResultBytes))
	positive("webhook_workers", int64(cfg.WebhookWorkers))
	positive("webhook_in_flight_per_caller", int64(cfg.WebhookInFlightPerCaller))
	positive("webhook_pending_per_caller", int64(cfg.WebhookPendingPerCaller))
	if cfg.Drains < cfg.Workers {
		errs = append(errs, fmt.Errorf("drains (%d) must not be below workers (%d)", cfg.Drains, cfg.Workers))
	}
	if cfg.FetchesPerHost < -1 {
		errs = append(errs, fmt.Errorf("fetches_per_host must be positive, or -1 for no cap, got %d", cfg.FetchesPerHost))
	}
	for name, d := range map[string]Duration{
		"ttl": cfg.TTL, "target_timeout": cfg.TargetTimeout, "busy_wait": cfg.BusyWait, "store_wait": cfg.StoreWait,
		"sweep_interval": cfg.SweepInterval, "poll_interval": cfg.PollInterval,
		"heartbeat_interval": cfg.HeartbeatInterval, "stale_after": cfg.StaleAfter,
		"webhook_timeout": cfg.WebhookTimeout, "webhook_backoff": cfg.WebhookBackoff,
		"webhook_retry_for": cfg.WebhookRetryFor, "close_grace": cfg.CloseGrace, "max_deadline": cfg.MaxDeadline,
		"host_interval": cfg.HostInterval, "max_retry_after": cfg.MaxRetryAfter,
	} {
		switch {
		case d < 0:
			errs = append(errs, fmt.Errorf("%s must not be negative, got %s", name, d))
		case d != 0 && d < minDuration: // a bare number a decoder read as nanoseconds
			errs = append(errs, fmt.Errorf("%s: %w (it reads as %s)", name, bareNumberError(float64(d)), d))
		}
	}
	if cfg.JobsPerCaller > cfg.JobsTotal {
		errs = append(errs, fmt.Errorf("jobs_per_caller (%d) must not exceed jobs_total (%d)", cfg.JobsPerCaller, cfg.JobsTotal))
	}
	if cfg.HeartbeatInterval > 0 && cfg.StaleAfter > 0 && cfg.StaleAfter < 2*cfg.HeartbeatInterval {
		errs = append(errs, fmt.Errorf("stale_after (%s) must be at least twice heartbeat_interval (%s)", cfg.StaleAfter, cfg.HeartbeatInterval))
	}
	if cfg.TTL >= minDuration && cfg.TTL < Duration(batchdriver.LeaseGrain) {
		errs = append(errs, fmt.Errorf("ttl must be at least %s, got %s", batchdriver.LeaseGrain, cfg.TTL))
	}
	if err := metrics.ValidateMetric(cfg.MetricsPrefix + "_jobs_total"); err != nil {
		errs = append(errs, fmt.Errorf("metrics_prefix %q: %w", cfg.MetricsPrefix, err))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("batch: invalid config: %w", err)
	}
	return nil
}
