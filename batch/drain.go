package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchobserve"
)

// maxErrorBytes caps a stored target error.
const maxErrorBytes = 2048

// worker drains jobs, one at a time, until the runner stops: a parked job
// whose wait ended first, else the oldest queued job, which it claims. The
// runner runs Config.Drains workers, and each fetch takes one of the
// Config.Workers fetch slots (see fetchTarget) for its time. A
// submit on this runner and a parked job that became ready wake it at
// once; PollInterval is the fallback for jobs that another runner sharing
// the store accepted.
func (r *Runner) worker() {
	defer r.wg.Done()
	poll := time.NewTicker(time.Duration(r.cfg.PollInterval))
	defer poll.Stop()
	for {
		for r.work() {
			if r.stopping() {
				return
			}
		}
		select {
		case <-r.stop:
			return
		case <-r.wake:
		case <-poll.C:
		}
	}
}

// work drains a parked job that is ready, or else claims a queued job and
// drains it. It reports whether it found one.
func (r *Runner) work() bool {
	if r.stopping() {
		return false
	}
	if d := r.gate.take(); d != nil {
		r.run(d)
		return true
	}
	return r.claimAndDrain()
}

func (r *Runner) stopping() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// storeCtx returns a context for one background store call. It is not tied
// to Close, so that a target that finished is still written while the
// runner stops.
func storeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), storeTimeout)
}

// storeCtxOf is storeCtx with the values of ctx (an observer's span), but
// not its cancel.
func (r *Runner) storeCtxOf(ctx context.Context) (context.Context, context.CancelFunc) {
	if r.obs == nil {
		return storeCtx()
	}
	return context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
}

// claimAndDrain claims the oldest queued job and drains it. It reports
// whether it found one.
func (r *Runner) claimAndDrain() bool {
	ctx, cancel := storeCtx()
	began := time.Now()
	c, ok, err := r.store.Claim(ctx, batchdriver.ClaimParams{Runner: r.cfg.RunnerID, Now: r.now()})
	cancel()
	claimed := time.Now()
	r.recordStoreCall("claim", began, err)
	if err != nil {
		r.log.LogAttrs(context.Background(), storeErrLevel(err), "batch claim failed", storeErrAttrs(err)...)
		return false
	}
	r.metrics.queueDepth.Set(float64(c.Queued)) // 0 when nothing was queued
	if !ok {
		return false
	}
	r.waiters.notify(c.Job.ID)
	r.queued.forget(c.Job.ID) // its drain ends it at its deadline
	d := &jobDrain{c: c, job: c.Job, next: c.Next, start: time.Now(), final: JobRunning, backoff: minBusyBackoff}
	d.log = r.log.With(slog.String("job_id", d.job.ID), slog.String("caller", d.job.Caller.Name))
	d.ctx, d.endJob = r.observeJob(r.fetchCtx, c, began, claimed)
	d.newTarget()
	r.run(d)
	return true
}

// jobDrain is the drain of one claimed job, kept between workers: a job
// that waits (for its host, or for a busy fetcher) is parked in the gate,
// and a worker takes it up again when the wait ends.
type jobDrain struct {
	c      batchdriver.Claimed
	job    batchdriver.Job
	log    *slog.Logger
	ctx    context.Context
	endJob func(batchobserve.JobEnd)
	start  time.Time
	next   int       // the target in hand; -1 once the job ended
	done   int       // targets written by this drain
	final  JobStatus // the job's status after the last write
	// stopped says why the drain stopped before the job ended, for its
	// span: "", "handed_on", "closed", "not_held", "unknown_target".
	stopped string

	// The target in hand, across parks.
	key        string        // its host's gate key; "" for none
	robots     bool          // the robots checker was asked
	crawlDelay time.Duration // its host's crawl delay, from the checker
	waitFrom   time.Time     // its first busy or Retry-After answer
	backoff    time.Duration // the cap of its next busy back-off
	slot       hostSlot      // the slot the gate gave it
	woke       bool          // taken up after a park: look for a cancel first
	head       bool          // woken as its host queue's head, to try for a slot

	// The gate's, under its mutex.
	where    int         // notParked, inQueue, asleep or isReady
	sleeper  *time.Timer // ends an asleep park
	deadline *time.Timer // wakes a parked drain at its job's deadline
}

// minBusyBackoff is the first cap of a busy fetcher's back-off.
const minBusyBackoff = 100 * time.Millisecond

// newTarget resets the per-target state for the target in hand.
func (d *jobDrain) newTarget() {
	d.key, d.robots, d.crawlDelay, d.waitFrom, d.backoff, d.slot, d.woke = "", false, 0, time.Time{}, minBusyBackoff, hostSlot{}, false
	if d.next >= 0 && d.next < len(d.c.Targets) {
		d.key = hostKey(d.c.Targets[d.next].Target.URL)
	}
}

// run drains job d's targets in idx order, one at a time: the claim
// started the first, and each write that stores a target starts the next,
// so target i+1 starts only after target i is written. It returns when
// the job ends (a write starts no next target: the job is finished or was
// cancelled), when d is parked to wait, when the runner no longer holds
// the job, or when the runner closes (Close then fails the job, or hands
// it on). Store writes that fail for a while (a lock wait that ran out, a
// full disk) are retried until they succeed or the runner closes, so a
// passing fault never strands a job as running.
func (r *Runner) run(d *jobDrain) {
	for d.next >= 0 {
		next := d.next
		if next >= len(d.c.Targets) || d.c.Targets[next].Idx != next {
			d.log.LogAttrs(context.Background(), slog.LevelError, "batch store started an unknown target", slog.Int("idx", next))
			d.stopped = "unknown_target"
			r.endDrain(d) // the job stays held; Close or the stale reaper fails it
			return
		}
		if r.cfg.Resume && r.stopping() {
			// Between two targets: the one the last write started was
			// never fetched, and Close hands it back pending.
			d.log.LogAttrs(context.Background(), slog.LevelInfo, "batch job handed on by close", slog.Int("next_idx", next))
			r.gate.unwake(d)
			r.notFetched(d.job.ID)
			d.stopped = "handed_on"
			r.endDrain(d)
			return
		}
		fin, dur, closed, started, again, parked := r.attempt(d)
		if parked {
			return
		}
		if again != nil {
			continue
		}
		if closed && r.cfg.Resume {
			r.interrupted(d.ctx, d.log, d.job, next, dur, started)
			d.stopped = "handed_on"
			r.endDrain(d)
			return
		}
		if closed {
			r.metrics.target(OutcomeCancel, dur)
			d.log.LogAttrs(context.Background(), slog.LevelInfo, "batch target interrupted by close", slog.Int("idx", next))
			d.stopped = "closed"
			r.endDrain(d)
			return
		}
		expire := r.pastDeadline(d.job) // start no next target; end the rest expired
		step, err := r.storeTarget(d.ctx, d.log, d.job, &fin, expire)
		switch {
		case errors.Is(err, batchdriver.ErrNotHeld), errors.Is(err, ErrNotFound):
			// Reaped as stale, or gone: another runner or the sweeper
			// decided the job's fate. Nothing of ours is to be written.
			d.log.LogAttrs(context.Background(), slog.LevelWarn, "batch job no longer held; stopped draining it", slog.Int("idx", next))
			d.stopped = "not_held"
			r.endDrain(d)
			return
		case err != nil:
			d.stopped = "closed"
			r.endDrain(d)
			return // closing
		}
		d.done++
		r.metrics.target(fin.Outcome, dur)
		if fin.Status == TargetDone {
			r.metrics.resultSize.Update(float64(len(fin.Result)))
		}
		attrs := []slog.Attr{slog.Int("idx", fin.Idx), slog.Duration("duration", dur)}
		if d.job.Caller.Restricted {
			attrs = append(attrs, slog.Bool("ok", fin.Status == TargetDone))
		} else {
			attrs = append(attrs, slog.String("outcome", string(fin.Outcome)))
		}
		d.log.LogAttrs(context.Background(), slog.LevelInfo, "batch target finished", attrs...)
		if d.job.WebhookEvents.Has(batchdriver.HookTargets) {
			r.wakeWebhooks() // the write made the job's per-target event due
		}
		d.next, d.final = step.Next, step.Status
		d.newTarget()
		if n := pendingAfter(d.job, fin.Idx); expire && d.next < 0 && d.final != JobCancelled && n > 0 {
			r.metrics.expired(n)
			d.log.LogAttrs(context.Background(), slog.LevelInfo, "batch job ended at its deadline",
				slog.String("status", string(d.final)), slog.Int("expired", n))
		}
	}
	if d.final != JobCancelled { // a cancel is counted by the runner that took it
		r.metrics.job(string(d.final))
	}
	if d.job.WebhookURL != "" {
		r.wakeWebhooks() // the last write gave the job its event
	}
	r.metrics.jobSecs.Update(time.Since(d.start).Seconds())
	d.log.LogAttrs(context.Background(), slog.LevelInfo, "batch job finished",
		slog.String("status", string(d.final)), slog.Int("targets_done", d.done), slog.Duration("duration", time.Since(d.start)))
	r.endDrain(d)
}

// endDrain ends d's span.
func (r *Runner) endDrain(d *jobDrain) {
	d.endJob(batchobserve.JobEnd{Status: d.final, TargetsDone: d.done, Stopped: d.stopped})
}

// attempt takes the target in hand one step: after a park it looks for a
// cancel and the deadline; it asks the robots checker once; it takes a
// slot of the target's host, or parks d (parked), and under an interval
// its fetch slot before that; it fetches once. again
// is the fetcher's answer when it was busy or the host asked to wait and
// the target goes on waiting: the caller tries again.
func (r *Runner) attempt(d *jobDrain) (fin batchdriver.TargetFinish, dur time.Duration, closed, started bool, again error, parked bool) {
	t := d.c.Targets[d.next]
	fin = batchdriver.TargetFinish{Idx: t.Idx}
	if d.woke {
		d.woke = false
		switch {
		case r.cancelled(d.job):
			r.gate.unwake(d)
			failTarget(&fin, OutcomeCancel, "", errors.New("cancelled while the target waited"))
			return fin, 0, false, false, nil, false
		case r.pastDeadline(d.job):
			r.gate.unwake(d)
			failTarget(&fin, OutcomeExpired, "", fmt.Errorf("%s: the job's deadline passed while the target waited", DeadlineReason))
			return fin, 0, false, false, nil, false
		}
	}
	if r.cfg.Robots != nil && !d.robots {
		d.robots = true
		verdict, err := r.askRobots(d, t.Target)
		switch {
		case err != nil && r.fetchCtx.Err() != nil: // Close cut the check short: nothing was fetched
			return fin, 0, true, false, nil, false
		case err != nil:
			failTarget(&fin, outcomeOrOther(err), hintOf(err), err)
			return fin, 0, false, false, nil, false
		case verdict.Disallowed:
			failTarget(&fin, OutcomeRobots, robotsHint, errors.New("robots: the host's robots.txt disallows this target"))
			return fin, 0, false, false, nil, false
		}
		d.crawlDelay = verdict.CrawlDelay
	}
	held := false // a fetch slot, taken before the host's
	if d.key != "" && r.gate.on() {
		if r.gate.intervalOf(d) > 0 && !r.pastDeadline(d.job) {
			// The gate spaces the fetch starts to a host from when it
			// lets each in, so a fetch that then waited for a fetch slot
			// would start late, and the next one too soon after it.
			select {
			case r.slots <- struct{}{}:
				held = true
			case <-r.fetchCtx.Done():
				r.gate.unwake(d)
				return fin, 0, true, false, nil, false
			}
		}
		switch {
		case r.pastDeadline(d.job): // fetchTarget ends it expired
			r.gate.unwake(d)
		case !r.gate.enter(d):
			if held {
				<-r.slots
			}
			d.woke = true
			return fin, 0, false, false, nil, true
		}
	}
	slot := d.slot
	d.slot = hostSlot{}
	fin, dur, closed, started, again = r.fetchTarget(d.ctx, d.job, t, slot, held)
	if again == nil {
		return fin, dur, closed, started, nil, false
	}
	if d.waitFrom.IsZero() {
		d.waitFrom = time.Now()
	}
	waited := time.Since(d.waitFrom)
	if wait, ok := RetryAfterOf(again); ok {
		wait = min(wait, time.Duration(r.cfg.MaxRetryAfter))
		if waited+wait > time.Duration(r.cfg.BusyWait) {
			failTarget(&fin, outcomeOrOther(again), hintOf(again), fmt.Errorf("%w (the host asked to wait for longer than %s in all)", again, time.Duration(r.cfg.BusyWait)))
			return fin, dur, false, false, nil, false
		}
		if slot.key != "" {
			return fin, dur, false, false, again, false // callFetch held the host back; enter parks d
		}
		r.metrics.hostWait(waitRetryAfter)
		r.gate.sleep(d, wait)
		d.woke = true
		return fin, dur, false, false, nil, true
	}
	// The fetcher was busy. Full jitter: wait a random time up to the
	// back-off.
	sleep := rand.N(d.backoff) + time.Millisecond
	if waited+sleep > time.Duration(r.cfg.BusyWait) {
		failTarget(&fin, OutcomeBusy, hintOf(again), fmt.Errorf("busy: fetcher still busy after %s", time.Duration(r.cfg.BusyWait).Round(time.Millisecond)))
		return fin, dur, false, false, nil, false
	}
	d.backoff = min(d.backoff*2, 5*time.Second)
	r.gate.sleep(d, sleep)
	d.woke = true
	return fin, dur, false, false, nil, true
}

// robotsHint is the hint of a target that the robots rules refuse.
const robotsHint = "robots.txt"

// askRobots asks Config.Robots about t, under the target timeout and
// with a panic turned into an error.
func (r *Runner) askRobots(d *jobDrain, t Target) (verdict Robots, err error) {
	ctx, cancel := context.WithTimeout(d.ctx, time.Duration(r.cfg.TargetTimeout))
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			verdict, err = Robots{}, errPanic // the panic value may hold a URL: never logged
		}
	}()
	return r.cfg.Robots(ctx, t)
}

// outcomeOrOther returns the outcome err carries, folded, or a timeout
// for a deadline, or other.
func outcomeOrOther(err error) Outcome {
	switch o := outcomeOf(err); {
	case o != "":
		return o.Fold()
	case errors.Is(err, context.DeadlineExceeded):
		return OutcomeTimeout
	}
	return OutcomeOther
}

// interrupted ends, with Config.Resume, the drain of job whose target idx
// Close cut short after its grace (at d into it): a fetch that may have
// reached the upstream is stored failed with outcome "interrupted", unless
// Config.RepeatInterrupted; any other target is left in flight, and
// Close's hand-back puts it back to pending.
func (r *Runner) interrupted(ctx context.Context, log *slog.Logger, job batchdriver.Job, idx int, d time.Duration, started bool) {
	repeat := !started || r.cfg.RepeatInterrupted
	log.LogAttrs(context.Background(), slog.LevelInfo, "batch target interrupted by close",
		slog.Int("idx", idx), slog.Bool("repeat", repeat))
	if !started {
		r.notFetched(job.ID)
	}
	if repeat {
		return
	}
	fin := batchdriver.TargetFinish{Idx: idx}
	failTarget(&fin, OutcomeInterrupted, "", errors.New(reasonInterrupted))
	if _, err := r.storeTarget(ctx, log, job, &fin, r.pastDeadline(job)); err == nil {
		r.metrics.target(OutcomeInterrupted, d)
	}
}

// storeTarget writes a target's outcome until it is stored, the store
// answers with a sentinel of the job model ([ErrNotHeld], [ErrNotFound]),
// or the runner closes; other errors are logged and retried with back-off
// (100ms, doubling up to maxStoreBackoff).
// A result the store has not taken for Config.StoreWait (a disk too full for
// it, say) is given up: fin becomes a failure, whose small write is retried
// in turn, so the worker and the job go on and nothing stored is lost.
func (r *Runner) storeTarget(ctx context.Context, log *slog.Logger, job batchdriver.Job, fin *batchdriver.TargetFinish, expire bool) (step batchdriver.Step, err error) {
	written := r.waiters.write(job.ID)
	defer func() { written(err != nil || step.Status.Finished()) }()
	ctx, end := r.observeStore(ctx, job, fin.Idx)
	attempt := 1
	defer func() { end(batchobserve.StoreEnd{Attempts: attempt, Next: step.Next, Status: step.Status, Err: err}) }()
	giveUp := time.Now().Add(time.Duration(r.cfg.StoreWait))
	backoff := 100 * time.Millisecond
	for ; ; attempt++ {
		sctx, cancel := r.storeCtxOf(ctx)
		began := time.Now()
		step, err = r.store.FinishTarget(sctx, batchdriver.FinishParams{JobID: job.ID, Runner: r.cfg.RunnerID, Target: *fin, Expire: expire, Now: r.now()})
		cancel()
		r.recordStoreCall("finish target", began, err)
		if err == nil || errors.Is(err, batchdriver.ErrNotHeld) || errors.Is(err, ErrNotFound) {
			return step, err
		}
		log.LogAttrs(context.Background(), storeErrLevel(err), "batch store write failed; retrying",
			append([]slog.Attr{slog.String("op", "finish target"), slog.Int("attempt", attempt)}, storeErrAttrs(err)...)...)
		if fin.Status == TargetDone && time.Now().After(giveUp) {
			size := len(fin.Result)
			*fin = batchdriver.TargetFinish{Idx: fin.Idx}
			failTarget(fin, OutcomeOther, "", fmt.Errorf("not stored: the store could not take the %d-byte result for %s", size, time.Duration(r.cfg.StoreWait)))
			log.LogAttrs(context.Background(), slog.LevelWarn, "batch result given up; storing the target as failed",
				slog.Int("idx", fin.Idx), slog.Int("bytes", size))
			backoff = 100 * time.Millisecond
		}
		select {
		case <-r.stop:
			return batchdriver.Step{}, err
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxStoreBackoff)
	}
}

// maxStoreBackoff caps the wait between two attempts of a store write: a
// drain resumes within it of the store answering again, however long the
// outage was, at the cost of a few failing calls a second per waiting
// worker while it lasts.
const maxStoreBackoff = 250 * time.Millisecond

// fetchTarget fetches one target of job once, with slot (freed when the
// fetcher returns), and returns what to store and how long it took.
// closed reports that the runner closed and cut the fetch short; nothing
// is to be stored then. started then reports that the call cut short may
// have reached the upstream. again is the fetcher's error when it was busy
// or its host asked to wait ([RetryAfter]): nothing is stored, and the
// target is tried again.
func (r *Runner) fetchTarget(ctx context.Context, job batchdriver.Job, t batchdriver.TargetRecord, slot hostSlot, held bool) (fin batchdriver.TargetFinish, d time.Duration, closed, started bool, again error) {
	fin = batchdriver.TargetFinish{Idx: t.Idx}
	if r.pastDeadline(job) { // claimed, or started by the last write, after the deadline
		r.gate.release(slot)
		if held {
			<-r.slots
		}
		failTarget(&fin, OutcomeExpired, "", fmt.Errorf("%s: the job's deadline passed before the target started", DeadlineReason))
		return fin, 0, false, false, nil
	}
	// A fetch slot first (unless held: attempt took it before the host's),
	// before the fetch is timed: a call abandoned at its deadline keeps its
	// slot (and its host's) until it returns, so even a fetcher that
	// ignores its context never has more than Workers calls running;
	// callFetch's goroutine frees it.
	if !held {
		select {
		case r.slots <- struct{}{}:
		case <-r.fetchCtx.Done():
			r.gate.release(slot)
			return fin, 0, true, false, nil
		}
	}
	ctx, end := r.observeFetch(ctx, job, t.Idx)
	defer func() {
		if closed {
			end(batchobserve.FetchEnd{})
		} else {
			end(batchobserve.FetchEnd{Status: fin.Status, Outcome: fin.Outcome, Bytes: len(fin.Result)})
		}
	}()
	start := time.Now()
	r.metrics.inflight.Inc()
	defer r.metrics.inflight.Dec()
	fr := r.callFetch(ctx, job, t, slot)
	_, retry := RetryAfterOf(fr.err)
	switch {
	case fr.interrupted:
		return fin, time.Since(start), true, true, nil
	case fr.expired:
		failTarget(&fin, OutcomeExpired, "", fmt.Errorf("%s: the job's deadline passed and the fetch did not return within %s", DeadlineReason, FetchOverrunGrace))
	case fr.timedOut:
		failTarget(&fin, OutcomeTimeout, "", fmt.Errorf("timeout: no result within %s", time.Duration(r.cfg.TargetTimeout)))
	case fr.err != nil && (retry || isBusy(fr.err)):
		return fin, time.Since(start), false, false, fr.err
	case fr.err != nil:
		failTarget(&fin, outcomeOrOther(fr.err), hintOf(fr.err), fr.err)
	case len(fr.env) > r.cfg.MaxResultBytes:
		failTarget(&fin, OutcomeTooLong, "", fmt.Errorf("too long: result is %d bytes (max %d)", len(fr.env), r.cfg.MaxResultBytes))
	default:
		fin.Status, fin.Outcome, fin.Result = TargetDone, OutcomeOK, fr.env
	}
	return fin, time.Since(start), false, false, nil
}

// cancelled reports whether job was cancelled (or is gone). A read that
// fails counts as not cancelled: the fetch goes on.
func (r *Runner) cancelled(job batchdriver.Job) bool {
	ctx, cancel := storeCtx()
	defer cancel()
	j, _, err := r.store.Get(ctx, batchdriver.GetParams{Caller: job.Caller.Name, JobID: job.ID})
	if errors.Is(err, ErrNotFound) {
		return true
	}
	return err == nil && j.Status != JobRunning
}

func failTarget(f *batchdriver.TargetFinish, o Outcome, hint string, err error) {
	f.Status, f.Outcome = TargetFailed, o
	f.Hint = truncate(hint, maxHintBytes)
	f.Error = truncate(err.Error(), maxErrorBytes)
}

// maxHintBytes caps a stored hint.
const maxHintBytes = 64

var errPanic = errors.New("internal error")

// fetchReturn is the outcome of one call of the fetcher.
type fetchReturn struct {
	env         []byte // the result envelope, if err is nil
	err         error
	timedOut    bool // the per-target deadline passed
	expired     bool // the job's deadline passed and its grace ran out
	interrupted bool // Close cut the fetch short
}

// callFetch calls the fetcher once under the per-target deadline and encodes
// its result, in a goroutine of its own: a panic there (in the fetcher or in
// a Meta value's MarshalJSON) fails only this target, and a fetcher that
// ignores its context is abandoned at the deadline. A call that returns
// more than [FetchOverrunGrace] after its context ended is counted and
// logged (see overran). The caller took a fetch slot; the goroutine frees
// it when the fetcher returns.
func (r *Runner) callFetch(parent context.Context, job batchdriver.Job, t batchdriver.TargetRecord, host hostSlot) fetchReturn {
	parent, cancelDeadline := r.withDeadline(parent, job)
	defer cancelDeadline()
	ctx, cancel := context.WithTimeout(parent, time.Duration(r.cfg.TargetTimeout))
	defer cancel()
	var ended atomic.Int64 // when ctx ended, in Unix nanoseconds; 0 while it runs
	stopEnded := context.AfterFunc(ctx, func() { ended.Store(time.Now().UnixNano()) })
	ch := make(chan fetchReturn, 1)
	r.fetchWG.Add(1)
	go func() {
		defer r.fetchWG.Done()
		defer func() { <-r.slots }()
		var once sync.Once
		release := func() { once.Do(func() { r.gate.release(host) }) }
		defer func() {
			if p := recover(); p != nil {
				release()
				ch <- fetchReturn{err: errPanic} // the panic value may hold a URL: never logged
			}
		}()
		var returned time.Time
		defer func() { // before the answer of a panic
			stopEnded()
			r.overran(job, t.Idx, ended.Load(), returned)
		}()
		r.gate.started(host)
		res, err := r.cfg.Fetch(ctx, job.Caller, t.Target)
		returned = time.Now()
		if wait, ok := RetryAfterOf(err); ok && host.key != "" {
			// Before the slot is free: no job of the gate's takes it in
			// between.
			r.gate.backOff(host.key, min(wait, time.Duration(r.cfg.MaxRetryAfter)))
		}
		release() // before the answer, so that the job's next target finds the slot free
		if err != nil {
			ch <- fetchReturn{err: err}
			return
		}
		env, err := res.Envelope()
		ch <- fetchReturn{env: env, err: err}
	}()
	var fr fetchReturn
	answered := true
	select {
	case fr = <-ch:
	case <-ctx.Done():
		if context.Cause(ctx) == errJobDeadline {
			// The job's deadline: the fetch gets its grace to return, and
			// what it returns in it stands.
			grace := time.NewTimer(FetchOverrunGrace)
			select {
			case fr = <-ch:
			case <-grace.C:
				fr.err, answered = ctx.Err(), false
			case <-r.fetchCtx.Done():
				fr.err, answered = ctx.Err(), false
			}
			grace.Stop()
			break
		}
		select {
		case fr = <-ch: // answered at the same moment
		default:
			fr.err, answered = ctx.Err(), false
		}
	}
	// A fetch that finished stands, even if Close came right after; one that
	// ended because of Close (or was abandoned at it) is interrupted. A
	// fetch timed out if the target's own deadline passed; a timeout the
	// fetcher met earlier (its transport's, say) keeps the fetcher's error.
	closing := errors.Is(context.Cause(r.fetchCtx), ErrClosed)
	fr.interrupted = closing && (!answered || fr.err != nil)
	fr.expired = !fr.interrupted && fr.err != nil && context.Cause(ctx) == errJobDeadline
	fr.timedOut = !fr.interrupted && !fr.expired && fr.err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded)
	return fr
}

// overran counts and logs a fetch of job's target idx that returned (at
// returned; the zero time for a panic, which is judged now) more than
// [FetchOverrunGrace] after its context ended (at ended, Unix nanoseconds;
// 0 if it had not): a FetchFunc that ignores its context, which held a
// worker's fetch slot all that time.
func (r *Runner) overran(job batchdriver.Job, idx int, ended int64, returned time.Time) {
	if ended == 0 {
		return
	}
	if returned.IsZero() {
		returned = time.Now()
	}
	late := returned.Sub(time.Unix(0, ended))
	if late <= FetchOverrunGrace {
		return
	}
	r.metrics.fetchOverruns.Inc()
	r.log.LogAttrs(context.Background(), slog.LevelWarn, "batch fetch overran its deadline; the FetchFunc ignores its context",
		slog.String("job_id", job.ID), slog.String("caller", job.Caller.Name), slog.Int("idx", idx),
		slog.Duration("late", late), slog.Duration("target_timeout", time.Duration(r.cfg.TargetTimeout)))
}

// truncate cuts s to at most n bytes without leaving a broken UTF-8
// sequence at the end.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
