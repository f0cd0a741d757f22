package batch

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchobserve"
)

// JobInfo is what an owner sees of a job.
type JobInfo struct {
	ID           string
	Status       JobStatus
	Error        string
	TargetsTotal int
	TargetsDone  int
	CreatedAt    time.Time
	// FinishedAt is when the job finished; zero while it is queued or
	// running.
	FinishedAt time.Time
	// ExpiresAt is when the job may be swept: its lease plus the TTL.
	ExpiresAt time.Time
	// Bytes are the stored result and error bytes of the job: what an
	// answer with every result would carry.
	Bytes int64
	// RetryOf is the id of the job this one retries (see [Runner.Retry]),
	// or "".
	RetryOf string
	// WebhookURL is the job's webhook (see [SubmitOptions]), "" for none:
	// for its owner's eyes only.
	WebhookURL string
	// WebhookEvents are the event types its webhook receives, as
	// submitted; nil for the default, [EventJobFinished] alone.
	WebhookEvents []string
	// Deadline is when the job ends with what it has (see
	// [SubmitOptions]); the zero time for none. A job its deadline ended
	// has Error "deadline".
	Deadline time.Time
	// HandedOn counts the times the job was handed on (see Config.Resume):
	// queued again, under its id, when the runner draining it stopped.
	HandedOn int
	// Metadata is the job's metadata (see [SubmitOptions]); nil for none.
	// For its owner's eyes only.
	Metadata map[string]string
	// Skipped are the targets the submit skipped (see [OnInvalidSkip]), in
	// idx order, each with its outcome, error and hint: in the answer of
	// [Runner.SubmitWith], and in reads that read the targets; nil for
	// none, and when the targets were not read.
	Skipped []Refusal
	// Outcomes counts the job's finished targets by outcome (a target
	// stored without one counts as ok when done and other when failed);
	// nil when the targets were not read ([Runner.List],
	// StatusOptions.JobOnly).
	Outcomes map[Outcome]int
	// Targets in idx order; nil in a [Runner.List] answer.
	Targets []TargetInfo
}

// TargetInfo is what an owner sees of one target.
type TargetInfo struct {
	Idx int
	URL string
	// CustomID is the caller's id of the target (see [Target]); "" for
	// none.
	CustomID string
	Status   TargetStatus
	Error    string
	Hint     string
	Outcome  Outcome
	// Attempts counts the fetches of the target that may have reached its
	// upstream: 0 for a target its submit skipped (see [OnInvalidSkip]),
	// else 1, or more when Config.RepeatInterrupted put it back to
	// pending after its fetch may have begun, and it was fetched again. A
	// target whose fetch never began is not counted twice.
	Attempts int
	// RetryOfIdx is, in a retry, the target's idx in the job it retries
	// (JobInfo.RetryOf); nil in any other job.
	RetryOfIdx *int
	// Result is the envelope (a JSON object) of a done target, when asked
	// for; see [DecodeEnvelope].
	Result []byte
}

// TargetResult is one target of a job, with its result.
type TargetResult struct {
	JobID     string
	ExpiresAt time.Time
	TargetInfo
}

// StatusOptions tune [Runner.Status] and [Runner.Wait].
type StatusOptions struct {
	// Results loads each done target's result envelope.
	Results bool
	// Touch bumps the job's lease as an owner's read does (see
	// [Runner.Touch]), after the read and only when the lease would move
	// by [LeaseGrain] or more, so that a poll costs one read; the answer's
	// ExpiresAt counts the bump. A bump that fails does not fail the read.
	Touch bool
	// JobOnly reads the job without its targets (Targets stays nil): the
	// cheap read of a poll that only wants to know whether anything changed.
	JobOnly bool
}

// WaitOptions tune [Runner.Wait].
type WaitOptions struct {
	StatusOptions
	// Timeout is how long to wait at most; it is capped at [MaxWait].
	Timeout time.Duration
	// Since, if set, also ends the wait as soon as the job's TargetsDone
	// differs from *Since.
	Since *int
}

// Submit validates targets and creates a job for caller, or returns the
// caller's existing job for the same list while its lease is unexpired (and
// it was not cancelled or failed), with reused true. The answer is the job
// as it stands after the submit, without targets: queued for a new job, the
// current status for a reused one. Validation errors match
// [ErrInvalidCaller], [ErrNoTargets], [ErrTooManyTargets] or
// [ErrInvalidTarget] (a *[TargetError]); the caps give [ErrCallerBusy] or
// [ErrBusy]. Before [Runner.Start] it returns [ErrNotStarted], after
// [Runner.Close] [ErrClosed]. It is [Runner.SubmitWith] without options.
func (r *Runner) Submit(ctx context.Context, caller Caller, targets []Target) (job JobInfo, reused bool, err error) {
	return r.SubmitWith(ctx, caller, targets, SubmitOptions{})
}

// SubmitWith is [Runner.Submit] with options. A webhook (opts.WebhookURL)
// needs Config.Deliver ([ErrWebhooksDisabled] without it) and an absolute
// http or https URL ([ErrInvalidWebhook]); it joins the idempotency key,
// so that a resubmit of the same list reuses the job only with the same
// webhook. The labels do too: opts.Metadata (over a bound,
// [ErrInvalidMetadata]) and the targets' custom ids (one over
// [MaxCustomIDBytes], or two targets with the same, is a *[TargetError]).
// With opts.OnInvalid [OnInvalidSkip], a refused target (see
// [OnInvalid]) is finished at once instead of refusing the submit; the
// answer's Skipped lists them. Custom ids, metadata and the webhook are
// checked whatever OnInvalid says.
func (r *Runner) SubmitWith(ctx context.Context, caller Caller, targets []Target, opts SubmitOptions) (job JobInfo, reused bool, err error) {
	given := opts.Trace.Clean()
	ctx, end := r.observeSubmit(ctx, batchobserve.SubmitEvent{Caller: caller, Targets: len(targets), Webhook: opts.WebhookURL != "", Trace: given})
	defer func() { end(batchobserve.SubmitEnd{JobID: job.ID, Reused: reused, Status: job.Status, Err: err}) }()
	ids, err := customIDs(targets)
	if err != nil {
		return JobInfo{}, false, err
	}
	targets, skipped, err := r.validateSubmit(caller, targets, opts.OnInvalid, opts.Refused)
	if err != nil {
		return JobInfo{}, false, err
	}
	if err := validateMetadata(opts.Metadata); err != nil {
		return JobInfo{}, false, err
	}
	if err := r.validateWebhook(opts.WebhookURL); err != nil {
		return JobInfo{}, false, err
	}
	events, err := parseWebhookEvents(opts.WebhookURL, opts.WebhookEvents)
	if err != nil {
		return JobInfo{}, false, err
	}
	deadline, err := r.deadline(opts)
	if err != nil {
		return JobInfo{}, false, err
	}
	key := withEvents(withLabels(r.idemKey(caller.Name, targets, opts.WebhookURL), labelsKey(opts.Metadata, ids)), events)
	job, reused, err = r.create(ctx, batchdriver.CreateParams{
		Caller: caller, IdemKey: withSkipped(key, skipped),
		Targets: targets, WebhookURL: opts.WebhookURL, WebhookEvents: events, Trace: given, Deadline: deadline,
		Metadata: opts.Metadata, CustomIDs: ids, Skipped: skippedFinishes(skipped),
	})
	if err != nil {
		return JobInfo{}, false, fmt.Errorf("batch: submit: %w", err)
	}
	job.Skipped = skipped // a reused job skipped the same: they are in its key
	return job, reused, nil
}

// Retry makes a new job of the caller's finished job id: its targets that
// did not finish done, that is the failed ones (but for those its submit
// skipped, see [OnInvalidSkip]: a retry would refuse them again) and, of a
// cancelled job or one failed by a restart, the ones that never finished,
// in idx order and with their options and the job's webhook and its
// events. The new job's RetryOf is id, and each of its targets
// carries its idx in the old job (TargetInfo.RetryOfIdx). Caps and
// idempotency apply as for [Runner.Submit]: a retry of the same job with
// the same targets while the first retry's lease is unexpired (and it was
// not cancelled or failed) returns that retry, with reused true. A live
// job is [ErrLive], and so is a cancelled job until the target that was in
// flight at the cancel is stored; a job with every target done (or
// skipped) is [ErrNothingToRetry], a job of another caller [ErrNotFound].
func (r *Runner) Retry(ctx context.Context, caller Caller, id string) (job JobInfo, reused bool, err error) {
	ctx, end := r.observeSubmit(ctx, batchobserve.SubmitEvent{Caller: caller, RetryOf: id})
	defer func() { end(batchobserve.SubmitEnd{JobID: job.ID, Reused: reused, Status: job.Status, Err: err}) }()
	if caller.Name == "" {
		return JobInfo{}, false, ErrInvalidCaller
	}
	old, records, err := r.store.Get(ctx, batchdriver.GetParams{Caller: caller.Name, JobID: id})
	if err != nil {
		return JobInfo{}, false, fmt.Errorf("batch: retry: %w", err)
	}
	if old.Status.Live() || old.Runner != "" { // a cancelled job's last target may still be in flight
		return JobInfo{}, false, fmt.Errorf("batch: retry: %w", ErrLive)
	}
	var targets []Target
	var from []int
	var ids []string
	for _, t := range records {
		if t.Status != TargetDone && !isSkipped(old, t.Idx) {
			targets = append(targets, Target{URL: t.Target.URL, Options: t.Target.Options})
			from = append(from, t.Idx)
			if old.CustomIDs != nil && t.Idx < len(old.CustomIDs) {
				ids = append(ids, old.CustomIDs[t.Idx])
			} else {
				ids = append(ids, "")
			}
		}
	}
	if !slices.ContainsFunc(ids, func(id string) bool { return id != "" }) {
		ids = nil
	}
	if len(targets) == 0 {
		return JobInfo{}, false, fmt.Errorf("batch: retry: %w", ErrNothingToRetry)
	}
	if err := r.validateWebhook(old.WebhookURL); err != nil {
		return JobInfo{}, false, fmt.Errorf("batch: retry: %w", err)
	}
	deadline, _ := r.deadline(SubmitOptions{}) // Config.MaxDeadline's, if any: the old job's has passed or will
	job, reused, err = r.create(ctx, batchdriver.CreateParams{
		Caller: caller, IdemKey: r.retryKey(caller.Name, id, targets), Targets: targets,
		RetryOf: id, RetryIdx: from, WebhookURL: old.WebhookURL, WebhookEvents: old.WebhookEvents, Deadline: deadline,
		Metadata: old.Metadata, CustomIDs: ids,
	})
	if err != nil {
		return JobInfo{}, false, fmt.Errorf("batch: retry: %w", err)
	}
	return job, reused, nil
}

// create stores a new job from p (its ID, Limits and Now are filled in
// here) or reuses one, and counts and logs it. p's targets are valid.
func (r *Runner) create(ctx context.Context, p batchdriver.CreateParams) (JobInfo, bool, error) {
	r.accepting.RLock()
	defer r.accepting.RUnlock()
	if err := r.acceptErr(); err != nil {
		return JobInfo{}, false, err
	}
	u, err := uuid.NewRandom()
	if err != nil {
		return JobInfo{}, false, fmt.Errorf("job id: %w", err)
	}
	p.ID = u.String()
	p.Limits = batchdriver.Limits{JobsPerCaller: r.cfg.JobsPerCaller, JobsTotal: r.cfg.JobsTotal, TTL: time.Duration(r.cfg.TTL),
		WebhooksPerCaller: r.cfg.WebhookPendingPerCaller}
	p.Now = r.now()
	p.Trace = r.traceOf(ctx, p.Trace)
	j, reused, err := r.store.Create(ctx, p)
	if err != nil {
		return JobInfo{}, false, err
	}
	if reused {
		r.metrics.job(jobReused)
	} else {
		r.metrics.job(jobCreated)
		for _, f := range p.Skipped {
			r.metrics.skipped(f.Outcome)
		}
		r.metrics.queueDepth.Inc() // until the next claim or collect samples the store
		r.queued.add(j.ID, p.Deadline)
		select {
		case r.wake <- struct{}{}:
		default: // every worker already has a wake-up pending
		}
	}
	attrs := []slog.Attr{
		slog.String("caller", p.Caller.Name), slog.String("job_id", j.ID),
		slog.Int("targets", j.TargetsTotal), slog.Bool("reused", reused),
		slog.Bool("webhook", p.WebhookURL != ""), slog.Bool("deadline", !p.Deadline.IsZero()),
		slog.String("status", string(j.Status)),
	}
	if len(p.Skipped) > 0 {
		attrs = append(attrs, slog.Int("skipped", len(p.Skipped)))
	}
	msg := "batch job submitted"
	if p.RetryOf != "" {
		msg = "batch job retried"
		attrs = append(attrs, slog.String("retry_of", p.RetryOf))
	}
	r.log.LogAttrs(ctx, slog.LevelInfo, msg, attrs...)
	return r.jobInfo(j), reused, nil
}

// validateSubmit checks a submit before it reaches the store and returns
// its targets with their options in the stored form (see
// [OptionSet.Normalize]), in a new slice, and, with [OnInvalidSkip], the
// targets it skips (see judgeTargets).
func (r *Runner) validateSubmit(caller Caller, targets []Target, on OnInvalid, refused []Refusal) ([]Target, []Refusal, error) {
	if caller.Name == "" {
		return nil, nil, ErrInvalidCaller
	}
	if len(targets) == 0 {
		return nil, nil, ErrNoTargets
	}
	if len(targets) > r.cfg.TargetsPerJob {
		return nil, nil, fmt.Errorf("%w: %d (max %d)", ErrTooManyTargets, len(targets), r.cfg.TargetsPerJob)
	}
	return r.judgeTargets(targets, on, refused)
}

// TargetsPerJob is the configured cap on targets per job.
func (r *Runner) TargetsPerJob() int { return r.cfg.TargetsPerJob }

// Status returns the caller's job and its targets. It is a pure read; it
// does not bump the lease (see [Runner.Touch]). A job of another caller is
// [ErrNotFound].
func (r *Runner) Status(ctx context.Context, caller Caller, id string, opts StatusOptions) (JobInfo, error) {
	job, targets, err := r.store.Get(ctx, batchdriver.GetParams{Caller: caller.Name, JobID: id, Results: opts.Results, JobOnly: opts.JobOnly})
	if err != nil {
		return JobInfo{}, fmt.Errorf("batch: status: %w", err)
	}
	info := r.jobInfo(job)
	if !opts.JobOnly {
		info.Targets = make([]TargetInfo, len(targets))
		info.Outcomes = map[Outcome]int{}
		for i, t := range targets {
			info.Targets[i] = targetInfo(job, t)
			if o, ok := finishedOutcome(t); ok {
				info.Outcomes[o]++
			}
		}
		info.Skipped = skippedOf(job, targets)
	}
	if now := r.cfg.Now(); opts.Touch && now.Sub(job.Lease) >= batchdriver.LeaseGrain {
		if err := r.Touch(ctx, caller, id); err == nil {
			info.ExpiresAt = now.Add(time.Duration(r.cfg.TTL)).UTC()
		}
	}
	return info, nil
}

// Result returns one target of the caller's job with its result. An idx
// outside the job, or a job of another caller, is [ErrNotFound].
func (r *Runner) Result(ctx context.Context, caller Caller, id string, idx int) (TargetResult, error) {
	job, t, err := r.store.GetTarget(ctx, batchdriver.GetTargetParams{Caller: caller.Name, JobID: id, Idx: idx})
	if err != nil {
		return TargetResult{}, fmt.Errorf("batch: result: %w", err)
	}
	return TargetResult{JobID: job.ID, ExpiresAt: r.expiresAt(job), TargetInfo: targetInfo(job, t)}, nil
}

// Cancel cancels the caller's queued or running job: no later target starts;
// a target in flight finishes and is stored. A finished job is
// [ErrFinished]; a job of another caller is [ErrNotFound].
func (r *Runner) Cancel(ctx context.Context, caller Caller, id string) error {
	if err := r.store.Cancel(ctx, batchdriver.CancelParams{Caller: caller.Name, JobID: id, Now: r.now()}); err != nil {
		return fmt.Errorf("batch: cancel: %w", err)
	}
	r.metrics.job(string(JobCancelled))
	r.waiters.notify(id)
	r.gate.wakeJob(id) // a job of this runner waiting for its host ends now
	r.wakeWebhooks()   // a queued job gets its event at once
	r.log.LogAttrs(ctx, slog.LevelInfo, "batch job cancelled",
		slog.String("caller", caller.Name), slog.String("job_id", id))
	return nil
}

// Ready reports whether the runner can serve now: it returns
// [ErrNotStarted] before [Runner.Start], [ErrClosed] after [Runner.Close],
// and otherwise the error of one cheap store read (the counts behind the
// queue-depth gauge, which it also sets), so that a host's readiness probe
// fails while the store cannot answer. Bound ctx: a store waiting on a lock
// waits for as long as ctx lets it.
func (r *Runner) Ready(ctx context.Context) error {
	if err := r.acceptErr(); err != nil {
		return fmt.Errorf("batch: ready: %w", err)
	}
	st, err := r.store.Stats(ctx)
	if err != nil {
		return fmt.Errorf("batch: ready: %w", err)
	}
	r.metrics.queueDepth.Set(float64(st.Queued))
	return nil
}

// Touch bumps the lease of the caller's job, as an owner read does. Writes
// that would move the lease by less than [LeaseGrain] may be skipped.
func (r *Runner) Touch(ctx context.Context, caller Caller, id string) error {
	if err := r.store.Touch(ctx, batchdriver.TouchParams{Caller: caller.Name, JobID: id, Now: r.now()}); err != nil {
		return fmt.Errorf("batch: touch: %w", err)
	}
	return nil
}

// List returns up to limit of the caller's jobs, newest first, without
// targets. A limit below 1 means 20. It is [Runner.ListWith] without a
// label search.
func (r *Runner) List(ctx context.Context, caller Caller, limit int) ([]JobInfo, error) {
	return r.ListWith(ctx, caller, ListOptions{Limit: limit})
}

// ListOptions tune [Runner.ListWith].
type ListOptions struct {
	// Limit is how many jobs to list at most; below 1 means 20.
	Limit int
	// Metadata, if not empty, lists only the jobs whose metadata holds
	// every one of its pairs: a search by label, within the caller's own
	// jobs.
	Metadata map[string]string
}

// ListWith returns the caller's jobs, newest first, without targets: up to
// opts.Limit of them, and with opts.Metadata only those labelled so.
// Another caller's jobs are never listed, whatever their labels.
func (r *Runner) ListWith(ctx context.Context, caller Caller, opts ListOptions) ([]JobInfo, error) {
	limit := opts.Limit
	if limit < 1 {
		limit = 20
	}
	jobs, err := r.store.List(ctx, batchdriver.ListParams{Caller: caller.Name, Limit: limit, Metadata: opts.Metadata})
	if err != nil {
		return nil, fmt.Errorf("batch: list: %w", err)
	}
	out := make([]JobInfo, len(jobs))
	for i, j := range jobs {
		out[i] = r.jobInfo(j)
	}
	return out, nil
}

// Wait returns the caller's job as soon as it is finished or, with
// opts.Since, as soon as its TargetsDone differs from *opts.Since; otherwise
// it returns the job as it is when opts.Timeout (capped at [MaxWait]) runs
// out, or at once when the runner closes. It holds no store resources while
// it waits: it re-reads the store when a runner changes that job (a change
// to another job does not wake it, nor, without opts.Since, this runner's
// write of a target that leaves the job live; another runner's change
// wakes it when the store has a change feed) and every Config.PollInterval.
// If ctx ends first, it returns ctx's error.
func (r *Runner) Wait(ctx context.Context, caller Caller, id string, opts WaitOptions) (JobInfo, error) {
	timeout := min(max(opts.Timeout, 0), MaxWait)
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	poll := time.NewTicker(time.Duration(r.cfg.PollInterval))
	defer poll.Stop()
	watched := false
	for {
		changed, release := r.waiters.watch(id, opts.Since == nil) // before the read, so no change is missed
		// Polls read the job row only, and never touch; the answer is read
		// once, as asked.
		info, err := r.Status(ctx, caller, id, StatusOptions{JobOnly: true})
		if err == nil && !info.Status.Finished() && (opts.Since == nil || info.TargetsDone == *opts.Since) {
			if wf, ok := r.store.(batchdriver.WatchFeed); ok && !watched {
				// The other runners send this job's changes from now on;
				// read again, for one made before the watch took.
				watched = true
				defer wf.Watch(ctx, id)()
				release()
				continue
			}
			select {
			case <-ctx.Done():
				err = fmt.Errorf("batch: wait: %w", context.Cause(ctx))
			case <-deadline.C:
			case <-r.stop: // do not hold up a server's graceful shutdown
			case <-changed:
				release()
				continue
			case <-poll.C:
				release()
				continue
			}
		}
		release()
		if err != nil {
			return JobInfo{}, err
		}
		break
	}
	return r.Status(ctx, caller, id, opts.StatusOptions)
}

func (r *Runner) expiresAt(j batchdriver.Job) time.Time {
	return j.Lease.Add(time.Duration(r.cfg.TTL)).UTC()
}

func (r *Runner) jobInfo(j batchdriver.Job) JobInfo {
	return JobInfo{
		ID:            j.ID,
		Status:        j.Status,
		Error:         j.Error,
		TargetsTotal:  j.TargetsTotal,
		TargetsDone:   j.TargetsDone,
		CreatedAt:     j.CreatedAt.UTC(),
		FinishedAt:    finishedAt(j),
		ExpiresAt:     r.expiresAt(j),
		Bytes:         j.Bytes,
		RetryOf:       j.RetryOf,
		WebhookURL:    j.WebhookURL,
		WebhookEvents: webhookEventNames(j.WebhookEvents),
		Deadline:      utcOrZero(j.Deadline),
		HandedOn:      j.HandedOn,
		Metadata:      j.Metadata,
	}
}

// finishedAt is when j finished, in UTC; zero while it is live.
func finishedAt(j batchdriver.Job) time.Time {
	if j.FinishedAt.IsZero() {
		return time.Time{}
	}
	return j.FinishedAt.UTC()
}

// finishedOutcome is the outcome of a finished target, folded into the
// fixed set: ok for a done target stored without one, other for a failed
// one. ok is false for a target that has not finished.
func finishedOutcome(t batchdriver.TargetRecord) (o Outcome, ok bool) {
	if !t.Status.Finished() {
		return "", false
	}
	o = t.Outcome
	if o == "" && t.Status == TargetDone {
		o = OutcomeOK
	}
	return o.Fold(), true
}

func targetInfo(j batchdriver.Job, t batchdriver.TargetRecord) TargetInfo {
	ti := TargetInfo{
		Idx: t.Idx, URL: t.Target.URL, Status: t.Status, Error: t.Error,
		Hint: t.Hint, Outcome: t.Outcome, Result: t.Result,
		Attempts: max(t.Attempts, 1), // a store that does not count: fetched once
	}
	if isSkipped(j, t.Idx) {
		ti.Attempts = 0 // never fetched
	}
	if t.Idx >= 0 && t.Idx < len(j.CustomIDs) {
		ti.CustomID = j.CustomIDs[t.Idx]
	}
	if j.RetryOf != "" && t.Idx >= 0 && t.Idx < len(j.RetryIdx) {
		from := j.RetryIdx[t.Idx]
		ti.RetryOfIdx = &from
	}
	return ti
}
