package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchobserve"
)

// maxErrorBytes caps a stored target error.
const maxErrorBytes = 2048

// worker claims jobs and drains them, one at a time, until the runner stops.
// A submit on this runner wakes it at once; PollInterval is the fallback for
// jobs that another runner sharing the store accepted.
func (r *Runner) worker() {
	defer r.wg.Done()
	poll := time.NewTicker(time.Duration(r.cfg.PollInterval))
	defer poll.Stop()
	for {
		for r.claimAndDrain() {
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
	if r.stopping() {
		return false
	}
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
	r.drain(c, began, claimed)
	return true
}

// drain runs a claimed job's targets in idx order, one at a time: the claim
// started the first, and each write that stores a target starts the next,
// so target i+1 starts only after target i is written. It stops when a
// write starts no next target (the job is finished or was cancelled), when
// the runner no longer holds the job, or when the runner closes (Close then
// fails the job). Store writes that fail for a while (a lock wait that ran
// out, a full disk) are retried until they succeed or the runner closes, so
// a passing fault never strands a job as running.
func (r *Runner) drain(c batchdriver.Claimed, claimStart, claimEnd time.Time) {
	start := time.Now()
	job := c.Job
	done := 0 // targets written by this drain
	log := r.log.With(slog.String("job_id", job.ID), slog.String("caller", job.Caller.Name))
	final := JobRunning
	ctx, endJob := r.observeJob(r.fetchCtx, c, claimStart, claimEnd)
	stopped := ""
	defer func() { endJob(batchobserve.JobEnd{Status: final, TargetsDone: done, Stopped: stopped}) }()
	for next := c.Next; next >= 0; {
		if next >= len(c.Targets) || c.Targets[next].Idx != next {
			log.LogAttrs(context.Background(), slog.LevelError, "batch store started an unknown target", slog.Int("idx", next))
			stopped = "unknown_target"
			return // the job stays held; Close or the stale reaper fails it
		}
		if r.cfg.Resume && r.stopping() {
			// Between two targets: the one the last write started was
			// never fetched, and Close hands it back pending.
			log.LogAttrs(context.Background(), slog.LevelInfo, "batch job handed on by close", slog.Int("next_idx", next))
			r.notFetched(job.ID)
			stopped = "handed_on"
			return
		}
		fin, d, closed, started := r.fetchTarget(ctx, job, c.Targets[next])
		if closed && r.cfg.Resume {
			r.interrupted(ctx, log, job, next, d, started)
			stopped = "handed_on"
			return
		}
		if closed {
			r.metrics.target(OutcomeCancel, d)
			log.LogAttrs(context.Background(), slog.LevelInfo, "batch target interrupted by close", slog.Int("idx", next))
			stopped = "closed"
			return
		}
		expire := r.pastDeadline(job) // start no next target; end the rest expired
		step, err := r.storeTarget(ctx, log, job, &fin, expire)
		switch {
		case errors.Is(err, batchdriver.ErrNotHeld), errors.Is(err, ErrNotFound):
			// Reaped as stale, or gone: another runner or the sweeper
			// decided the job's fate. Nothing of ours is to be written.
			log.LogAttrs(context.Background(), slog.LevelWarn, "batch job no longer held; stopped draining it", slog.Int("idx", next))
			stopped = "not_held"
			return
		case err != nil:
			stopped = "closed"
			return // closing
		}
		done++
		r.metrics.target(fin.Outcome, d)
		if fin.Status == TargetDone {
			r.metrics.resultSize.Update(float64(len(fin.Result)))
		}
		attrs := []slog.Attr{slog.Int("idx", fin.Idx), slog.Duration("duration", d)}
		if job.Caller.Restricted {
			attrs = append(attrs, slog.Bool("ok", fin.Status == TargetDone))
		} else {
			attrs = append(attrs, slog.String("outcome", string(fin.Outcome)))
		}
		log.LogAttrs(context.Background(), slog.LevelInfo, "batch target finished", attrs...)
		r.waiters.notify(job.ID)
		next, final = step.Next, step.Status
		if n := job.TargetsTotal - fin.Idx - 1; expire && next < 0 && final != JobCancelled && n > 0 {
			r.metrics.expired(n)
			log.LogAttrs(context.Background(), slog.LevelInfo, "batch job ended at its deadline",
				slog.String("status", string(final)), slog.Int("expired", n))
		}
	}
	if final != JobCancelled { // a cancel is counted by the runner that took it
		r.metrics.job(string(final))
	}
	if job.WebhookURL != "" {
		r.wakeWebhooks() // the last write gave the job its event
	}
	r.metrics.jobSecs.Update(time.Since(start).Seconds())
	log.LogAttrs(context.Background(), slog.LevelInfo, "batch job finished",
		slog.String("status", string(final)), slog.Int("targets_done", done), slog.Duration("duration", time.Since(start)))
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
		r.waiters.notify(job.ID)
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

// fetchTarget fetches one target of job, retrying while the fetcher is busy
// (but not once the job is cancelled), and returns what to store and how
// long it took. closed reports that the runner closed and cut the fetch
// short; nothing is to be stored then. started then reports that the call
// cut short may have reached the upstream (it began, and was not refused
// as busy).
func (r *Runner) fetchTarget(ctx context.Context, job batchdriver.Job, t batchdriver.TargetRecord) (fin batchdriver.TargetFinish, d time.Duration, closed, started bool) {
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
	fin = batchdriver.TargetFinish{Idx: t.Idx}
	backoff := 100 * time.Millisecond
	if r.pastDeadline(job) { // claimed, or started by the last write, after the deadline
		failTarget(&fin, OutcomeExpired, "", fmt.Errorf("%s: the job's deadline passed before the target started", DeadlineReason))
		return fin, 0, false, false
	}
	for {
		fr := r.callFetch(ctx, job, t)
		switch {
		case fr.interrupted:
			return fin, time.Since(start), true, !fr.unstarted
		case fr.expired:
			failTarget(&fin, OutcomeExpired, "", fmt.Errorf("%s: the job's deadline passed and the fetch did not return within %s", DeadlineReason, FetchOverrunGrace))
		case fr.timedOut:
			failTarget(&fin, OutcomeTimeout, "", fmt.Errorf("timeout: no result within %s", time.Duration(r.cfg.TargetTimeout)))
		case fr.err != nil && isBusy(fr.err):
			// Full jitter: sleep a random time up to the backoff.
			sleep := rand.N(backoff) + time.Millisecond
			if time.Since(start)+sleep > time.Duration(r.cfg.BusyWait) {
				failTarget(&fin, OutcomeBusy, hintOf(fr.err), fmt.Errorf("busy: fetcher still busy after %s", time.Duration(r.cfg.BusyWait).Round(time.Millisecond)))
				break
			}
			select {
			case <-time.After(sleep):
			case <-r.fetchCtx.Done():
				return fin, time.Since(start), true, false
			}
			if r.cancelled(job) {
				failTarget(&fin, OutcomeCancel, "", errors.New("cancelled while the fetcher was busy"))
				break
			}
			if r.pastDeadline(job) {
				failTarget(&fin, OutcomeExpired, hintOf(fr.err), fmt.Errorf("%s: the job's deadline passed while the fetcher was busy", DeadlineReason))
				break
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		case fr.err != nil:
			o := outcomeOf(fr.err)
			switch {
			case o != "":
			case errors.Is(fr.err, context.DeadlineExceeded):
				o = OutcomeTimeout
			default:
				o = OutcomeOther
			}
			failTarget(&fin, o.Fold(), hintOf(fr.err), fr.err)
		case len(fr.env) > r.cfg.MaxResultBytes:
			failTarget(&fin, OutcomeTooLong, "", fmt.Errorf("too long: result is %d bytes (max %d)", len(fr.env), r.cfg.MaxResultBytes))
		default:
			fin.Status, fin.Outcome, fin.Result = TargetDone, OutcomeOK, fr.env
		}
		return fin, time.Since(start), false, false
	}
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
	unstarted   bool // with interrupted: the fetcher was never called
}

// callFetch calls the fetcher once under the per-target deadline and encodes
// its result, in a goroutine of its own: a panic there (in the fetcher or in
// a Meta value's MarshalJSON) fails only this target, and a fetcher that
// ignores its context is abandoned at the deadline. A call that returns
// more than [FetchOverrunGrace] after its context ended is counted and
// logged (see overran).
func (r *Runner) callFetch(parent context.Context, job batchdriver.Job, t batchdriver.TargetRecord) fetchReturn {
	// A fetch slot first: a call abandoned at its deadline keeps its slot
	// until it returns, so even a fetcher that ignores its context never has
	// more than Workers calls running.
	select {
	case r.slots <- struct{}{}:
	case <-r.fetchCtx.Done():
		return fetchReturn{err: context.Cause(r.fetchCtx), interrupted: true, unstarted: true}
	}
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
		defer func() {
			if p := recover(); p != nil {
				ch <- fetchReturn{err: errPanic} // the panic value may hold a URL: never logged
			}
		}()
		var returned time.Time
		defer func() { // before the answer of a panic
			stopEnded()
			r.overran(job, t.Idx, ended.Load(), returned)
		}()
		res, err := r.cfg.Fetch(ctx, job.Caller, t.Target)
		returned = time.Now()
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
