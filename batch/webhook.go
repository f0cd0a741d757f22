package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchobserve"
)

// EventJobFinished is the type of the event a job's webhook receives once
// the job has finished: done, partial, failed (a restart included) or
// cancelled. It is a webhook's default event.
const EventJobFinished = "batch.finished"

// EventTargetFinished is the type of a per-target event: one or more of
// the job's targets finished (see [SubmitOptions].WebhookEvents).
const EventTargetFinished = "batch.target.finished"

// MaxWebhookURLBytes is the longest webhook URL a submit may carry.
const MaxWebhookURLBytes = 2048

// Webhook errors of a submit. Each matches with [errors.Is].
var (
	// ErrInvalidWebhook: a webhook URL that is not an absolute http or
	// https URL of at most [MaxWebhookURLBytes] bytes.
	ErrInvalidWebhook = errors.New("batch: invalid webhook")
	// ErrWebhooksDisabled: a submit with a webhook on a runner without
	// Config.Deliver.
	ErrWebhooksDisabled = errors.New("batch: webhooks are not enabled")
)

// SubmitOptions are the optional parts of a submit; see [Runner.SubmitWith].
type SubmitOptions struct {
	// OnInvalid says what the submit does with a target it refuses:
	// [OnInvalidReject] (the default, as "") refuses the submit;
	// [OnInvalidSkip] finishes the target at once, at its idx, and creates
	// the job with the others. The targets it skips join the idempotency
	// key, so a submit that skips none is the same request either way.
	OnInvalid OnInvalid
	// Refused are targets that the host's own checks refused (an adapter's
	// pre-check of the URL, say), at most one per idx, each with a failure
	// outcome ([OutcomeBlocked], [OutcomeInvalid]). The runner does not
	// check those targets again, and treats each as one it refused itself:
	// see OnInvalid.
	Refused []Refusal
	// WebhookURL, if set, receives one [EventJobFinished] event when the
	// job finishes, through Config.Deliver. It is stored with the job,
	// shown to its owner only, never logged, and part of the idempotency
	// key.
	WebhookURL string
	// WebhookEvents, if set, are the event types WebhookURL receives, of
	// [EventJobFinished] and [EventTargetFinished]; without it, the first
	// alone. Per-target events go out as the targets finish, in idx order,
	// several targets in one event when they finish faster than the
	// receiver takes them, and before the job's completion event. A job
	// with them counts as one pending event against
	// Config.WebhookPendingPerCaller, as any job with a webhook does,
	// until its last event is delivered or dropped. An unknown type, or
	// events without a WebhookURL, is [ErrInvalidWebhook]. Events other
	// than the default join the idempotency key.
	WebhookEvents []string
	// Trace is the trace context of the request that submits the job, to
	// be stored with it so that its drain continues that trace. A host
	// that sets Config.Observer need not set it: the observer reads the
	// trace of the submit's context. One that is not valid (see
	// [TraceContext.Valid]) is ignored; it never fails a submit, and it is
	// no part of the idempotency key.
	Trace TraceContext
	// Deadline, if set, is when the job ends with what it has: the target
	// in flight then gets [FetchOverrunGrace] to return, every target not
	// started ends failed with outcome [OutcomeExpired], and the job gets
	// its final status from its targets (partial, or failed when none is
	// done) with the error "deadline". It must be in the future and at
	// most Config.MaxDeadline away ([ErrInvalidDeadline],
	// [ErrDeadlineTooFar]); without it (and without DeadlineIn) the job
	// gets Config.MaxDeadline, if set. A reused job keeps its own
	// deadline: the deadline is no part of the idempotency key.
	Deadline time.Time
	// DeadlineIn is a deadline relative to the submit, by the runner's
	// clock (Config.Now): what an adapter passes for a duration such as
	// "90s". It must be positive; Deadline wins when both are set.
	DeadlineIn time.Duration
	// Metadata, if set, is the caller's labels of the job: at most
	// [MaxMetadataPairs] pairs, keys of 1 to [MaxMetadataKeyBytes] bytes,
	// values of at most [MaxMetadataValueBytes], valid UTF-8
	// ([ErrInvalidMetadata]). It is stored with the job, shown in every
	// read and the webhook event, searchable with [ListOptions], never
	// logged, and part of the idempotency key, as the targets' custom ids
	// are (see [Target]).
	Metadata map[string]string
}

// WebhookEvent is one delivery attempt of a job's webhook event, as
// Config.Deliver receives it. An [EventJobFinished] event carries the
// job's id, final status and counts; an [EventTargetFinished] one the
// job's id and Targets. Neither ever carries a target URL or result.
type WebhookEvent struct {
	// ID identifies the event, the same on every attempt: "msg_" and the
	// job id for [EventJobFinished]; for [EventTargetFinished], that and
	// "_t" and the idx of its first target. A sender sends it as Standard
	// Webhooks' webhook-id (batchhttp.WebhookSender does, as every build
	// of it has, so the id of an event does not change when a node of
	// another build retries it); a receiver that has seen it already
	// ignores the repeat.
	ID string
	// Type is [EventJobFinished] or [EventTargetFinished].
	Type string
	// Caller is the name of the job's caller. A sender signs the event
	// with that caller's secret (batchhttp.WebhookSender does), so that
	// no caller can sign an event another caller's receiver accepts.
	Caller string
	// URL is where to deliver it. It must never be logged.
	URL string
	// Attempt is 1 on the first attempt and counts up on each retry (an
	// attempt cut short by a crash counts too).
	Attempt int

	// At is when the event happened, the same on every attempt: the
	// job's FinishedAt for [EventJobFinished]; for [EventTargetFinished],
	// when the first of its targets was stored, or when the event before
	// it was delivered, if that was later.
	At time.Time

	JobID string
	// Targets are, in an [EventTargetFinished] event, the targets it
	// carries, in idx order; nil in an [EventJobFinished] one. The fields
	// after it, but TargetsTotal, CreatedAt and Metadata, are set in an
	// [EventJobFinished] event only.
	Targets       []WebhookTarget
	Status        JobStatus // done, partial, failed or cancelled
	Error         string    // why the job failed as a whole, e.g. "restart"
	TargetsTotal  int
	TargetsDone   int // targets that are done or failed
	TargetsOK     int
	TargetsFailed int
	CreatedAt     time.Time
	FinishedAt    time.Time
	// ExpiresAt is when the job may be swept, as it stood when the job
	// finished: its lease plus Config.TTL. A later owner read moves it.
	ExpiresAt time.Time
	// Deadline is the job's deadline (see [SubmitOptions]); the zero time
	// for none.
	Deadline time.Time
	// Metadata is the job's metadata (see [SubmitOptions]); nil for none.
	Metadata map[string]string
}

// DeliverFunc delivers one webhook event: batchhttp.NewWebhookSender
// returns one that POSTs it, signed, as the Standard Webhooks
// specification says. It returns nil once the receiver has taken the
// event (a 2xx answer), and an error otherwise; the runner then retries
// with back-off, unless the error is (or wraps) an [OutcomeError] with the
// outcome [OutcomeBlocked]: a guard's refusal of the address, which every
// retry would meet again, so the event is dropped at once. ctx carries Config.WebhookTimeout and is cancelled when
// the runner closes.
//
// The runner never logs the error, which may hold the URL or its host.
type DeliverFunc func(ctx context.Context, ev WebhookEvent) error

// validateWebhook checks a submit's webhook URL: an absolute http or https
// URL with a host. Its errors never repeat the URL.
func (r *Runner) validateWebhook(raw string) error {
	if raw == "" {
		return nil
	}
	if r.cfg.Deliver == nil {
		return ErrWebhooksDisabled
	}
	switch {
	case len(raw) > MaxWebhookURLBytes:
		return fmt.Errorf("%w: url longer than %d bytes", ErrInvalidWebhook, MaxWebhookURLBytes)
	case !utf8.ValidString(raw):
		return fmt.Errorf("%w: url is not valid UTF-8", ErrInvalidWebhook)
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("%w: url must be an absolute http or https url", ErrInvalidWebhook)
	}
	return nil
}

// maxWebhookBackoff caps the wait between two attempts.
const maxWebhookBackoff = time.Hour

// webhookLease is how long a claimed event stays with this runner: an
// attempt's deadline and a margin for the store writes around it.
func (r *Runner) webhookLease() time.Duration {
	return time.Duration(r.cfg.WebhookTimeout) + time.Minute
}

// wakeWebhooks wakes the deliverer: a job may have just got its event, or
// a slot of the pool was freed.
func (r *Runner) wakeWebhooks() {
	select {
	case r.hookWake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// hookPool is the deliverer's pool: Config.WebhookWorkers slots, each
// delivery in one of its own, so that a slow receiver holds its slot and
// no other.
type hookPool struct {
	wg sync.WaitGroup
	mu sync.Mutex
	// busy counts the slots in use.
	busy int
	// retryAt is the soonest retry that a delivery scheduled, by the
	// monotonic clock; zero for none.
	retryAt time.Time
}

// webhooks delivers due webhook events until the runner stops. It claims
// as many as it has free slots, round-robin across callers and within
// Config.WebhookInFlightPerCaller (the store decides both, for all the
// runners sharing it), and starts each one's delivery in a slot; it claims
// again at once after this runner finished a job or a delivery freed a
// slot, every Config.PollInterval for events of other runners and released
// claims, and when a retry it scheduled is due. On stop it waits for its
// deliveries, which Close cuts short.
func (r *Runner) webhooks() {
	defer r.wg.Done()
	var pool hookPool
	defer pool.wg.Wait()
	poll := time.NewTicker(time.Duration(r.cfg.PollInterval))
	defer poll.Stop()
	for {
		r.claimWebhooks(&pool)
		if r.stopping() {
			return
		}
		var soon <-chan time.Time
		pool.mu.Lock()
		if !pool.retryAt.IsZero() {
			if in := time.Until(pool.retryAt); in < time.Duration(r.cfg.PollInterval) {
				soon = time.After(max(in, 0))
			}
		}
		pool.mu.Unlock()
		select {
		case <-r.stop:
			return
		case <-r.hookWake:
		case <-poll.C:
		case <-soon:
			pool.mu.Lock()
			if !pool.retryAt.After(time.Now()) {
				pool.retryAt = time.Time{}
			}
			pool.mu.Unlock()
		}
	}
}

// claimWebhooks claims as many due events as the pool has free slots and
// starts their deliveries.
func (r *Runner) claimWebhooks(pool *hookPool) {
	pool.mu.Lock()
	free := r.cfg.WebhookWorkers - pool.busy
	pool.mu.Unlock()
	if free <= 0 || r.stopping() {
		return
	}
	ctx, cancel := storeCtx()
	began := time.Now()
	ds, err := r.store.ClaimWebhooks(ctx, batchdriver.ClaimWebhooksParams{
		Runner: r.cfg.RunnerID, Limit: free, PerCaller: r.cfg.WebhookInFlightPerCaller,
		Lease: r.webhookLease(), Now: r.now(),
	})
	cancel()
	r.recordStoreCall("claim webhooks", began, err)
	if err != nil {
		// An outage is logged at its start and end; the driver's text,
		// which names the database, stays out of the line.
		r.log.LogAttrs(context.Background(), storeErrLevel(err), "batch webhook claim failed", storeErrAttrs(err)...)
		return
	}
	pool.mu.Lock()
	pool.busy += len(ds)
	pool.mu.Unlock()
	r.metrics.webhooksInFlight.Add(float64(len(ds)))
	for _, d := range ds {
		pool.wg.Go(func() {
			retryIn := r.deliver(d)
			r.metrics.webhooksInFlight.Dec()
			pool.mu.Lock()
			pool.busy--
			if retryIn > 0 {
				if at := time.Now().Add(retryIn); pool.retryAt.IsZero() || at.Before(pool.retryAt) {
					pool.retryAt = at
				}
			}
			pool.mu.Unlock()
			r.wakeWebhooks() // a slot is free: the next event may be due
		})
	}
}

// event is what Config.Deliver gets for a claimed delivery.
func (r *Runner) event(d batchdriver.WebhookDelivery) WebhookEvent {
	if d.Event == batchdriver.HookTargets {
		ts := make([]WebhookTarget, len(d.Targets))
		for i, t := range d.Targets {
			ts[i] = t
			ts[i].Outcome, _ = finishedOutcome(batchdriver.TargetRecord{Status: t.Status, Outcome: t.Outcome})
		}
		return WebhookEvent{
			ID: "msg_" + d.JobID + "_t" + strconv.Itoa(d.Cursor), Type: EventTargetFinished, Caller: d.Caller, URL: d.URL,
			Attempt: d.Attempt, At: d.Since.UTC(), JobID: d.JobID, Targets: ts,
			TargetsTotal: d.TargetsTotal, CreatedAt: d.CreatedAt.UTC(), Metadata: d.Metadata,
		}
	}
	return WebhookEvent{
		ID: "msg_" + d.JobID, Type: EventJobFinished, Caller: d.Caller, URL: d.URL, Attempt: d.Attempt,
		At: d.FinishedAt.UTC(), JobID: d.JobID, Status: d.Status, Error: d.Error,
		TargetsTotal: d.TargetsTotal, TargetsDone: d.TargetsOK + d.TargetsFailed,
		TargetsOK: d.TargetsOK, TargetsFailed: d.TargetsFailed,
		CreatedAt: d.CreatedAt.UTC(), FinishedAt: d.FinishedAt.UTC(), ExpiresAt: d.Lease.Add(time.Duration(r.cfg.TTL)).UTC(),
		Deadline: utcOrZero(d.Deadline), Metadata: d.Metadata,
	}
}

// deliver makes one attempt and records its outcome in the store: the
// event is done once delivered (the job's next event, if any, is due),
// retried after a back-off while Config.WebhookRetryFor allows, and
// dropped after that, with the job's later events. It returns the
// back-off of a retry it scheduled, else 0. An attempt cut short by Close
// records nothing: Close releases the claim. A per-target event whose
// targets are all gone with their job is passed over unsent.
func (r *Runner) deliver(d batchdriver.WebhookDelivery) (retryIn time.Duration) {
	ctx, end := r.observeWebhook(r.fetchCtx, d)
	res := batchobserve.WebhookEnd{}
	defer func() { end(res) }()
	ev := r.event(d)
	log := r.log.With(slog.String("job_id", d.JobID), slog.Int("attempt", d.Attempt), slog.String("event", ev.Type))
	if ev.Type == EventTargetFinished {
		log = log.With(slog.Int("targets", len(ev.Targets)))
	}
	var err error
	skip := ev.Type == EventTargetFinished && len(ev.Targets) == 0
	if !skip {
		start := time.Now()
		err = r.callDeliver(ctx, ev)
		if err != nil && errors.Is(context.Cause(r.fetchCtx), ErrClosed) {
			res.Outcome = "closed"
			return 0 // cut short: not an attempt's outcome
		}
		r.metrics.webhookSecs.Update(time.Since(start).Seconds())
	}
	fin := batchdriver.FinishWebhookParams{JobID: d.JobID, Runner: r.cfg.RunnerID, Attempt: d.Attempt, Cursor: d.Cursor}
	outcome, msg, level := webhookDelivered, "batch webhook delivered", slog.LevelInfo
	if skip {
		outcome, msg = "", "batch webhook passed over: its targets are gone with their job"
	}
	if err != nil {
		r.metrics.webhook(webhookFailed)
		outcome, level = "", slog.LevelWarn
		retryIn = r.webhookBackoff(d.Attempt)
		if oe, ok := errors.AsType[OutcomeError](err); ok && oe.Outcome() == OutcomeBlocked {
			// The guard refused the address: it would refuse every retry.
			outcome, msg, retryIn, fin.Drop = webhookDropped, "batch webhook dropped: its address is blocked", 0, true
		} else if d.Age+retryIn > time.Duration(r.cfg.WebhookRetryFor) {
			outcome, msg, retryIn, fin.Drop = webhookDropped, "batch webhook dropped: still not delivered after the retry bound", 0, true
		} else {
			fin.Retry, fin.RetryIn = true, retryIn
			msg = "batch webhook attempt failed; will retry"
		}
	}
	sctx, cancel := r.storeCtxOf(ctx)
	fin.Now = r.now()
	ferr := r.store.FinishWebhook(sctx, fin)
	cancel()
	switch {
	case err == nil:
		res.Outcome = "delivered"
	case fin.Retry:
		res.Outcome, res.RetryIn = "retry", retryIn
	default:
		res.Outcome = "dropped"
	}
	res.Err = ferr
	if outcome != "" {
		r.metrics.webhook(outcome)
	}
	attrs := []slog.Attr{}
	if fin.Retry {
		attrs = append(attrs, slog.Duration("retry_in", retryIn))
	}
	log.LogAttrs(context.Background(), level, msg, attrs...)
	switch {
	case errors.Is(ferr, batchdriver.ErrNotHeld):
		// Taken over by another runner once the lease passed: it decides now.
		log.LogAttrs(context.Background(), slog.LevelWarn, "batch webhook claim lost before its outcome was stored")
		return 0
	case ferr != nil:
		// The claim's lease runs out and the event is attempted again: at
		// least once, perhaps twice.
		log.LogAttrs(context.Background(), storeErrLevel(ferr), "batch webhook outcome not stored", storeErrAttrs(ferr)...)
		return 0
	}
	return retryIn
}

// callDeliver calls Config.Deliver once under Config.WebhookTimeout. A
// panic fails the attempt (its value, which may hold the URL, is not
// logged).
func (r *Runner) callDeliver(parent context.Context, ev WebhookEvent) (err error) {
	ctx, cancel := context.WithTimeout(parent, time.Duration(r.cfg.WebhookTimeout))
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			err = errPanic
		}
	}()
	return r.cfg.Deliver(ctx, ev)
}

// webhookBackoff is the wait after failed attempt n (1 for the first):
// Config.WebhookBackoff doubled for each attempt before, capped at an
// hour, between half and all of it (jittered, so that the events of a
// receiver that was down do not all come back at once).
func (r *Runner) webhookBackoff(n int) time.Duration {
	d := time.Duration(r.cfg.WebhookBackoff)
	for i := 1; i < n && d < maxWebhookBackoff; i++ {
		d *= 2
	}
	d = min(d, maxWebhookBackoff)
	return d/2 + rand.N(d/2+1)
}
