package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"
)

// maxErrorBytes caps a stored target error.
const maxErrorBytes = 2048

// worker claims jobs and drains them, one at a time, until the runner stops.
// A submit on this runner wakes it at once; PollInterval is the fallback for
// jobs that another runner sharing the store accepted.
func (r *Runner) worker() {
	defer r.wg.Done()
	poll := time.NewTicker(r.cfg.PollInterval)
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

// claimAndDrain claims the oldest queued job and drains it. It reports
// whether it found one.
func (r *Runner) claimAndDrain() bool {
	if r.stopping() {
		return false
	}
	ctx, cancel := storeCtx()
	job, targets, err := r.store.Claim(ctx, r.cfg.RunnerID, r.cfg.Now())
	cancel()
	if errors.Is(err, ErrNotFound) {
		return false
	}
	if err != nil {
		r.log.LogAttrs(context.Background(), slog.LevelError, "batch claim failed", slog.String("err", err.Error()))
		return false
	}
	r.refreshGaugesBackground()
	r.notify()
	r.drain(job, targets)
	return true
}

func (r *Runner) refreshGaugesBackground() {
	ctx, cancel := storeCtx()
	defer cancel()
	r.refreshGauges(ctx)
}

// drain runs a claimed job's targets in idx order, one at a time: target i+1
// starts only after target i is written. It stops early when the job is
// cancelled or the runner closes.
func (r *Runner) drain(job Job, targets []TargetRecord) {
	start := time.Now()
	done := 0 // targets written by this drain
	log := r.log.With(slog.String("job_id", job.ID), slog.String("caller", job.Caller.Name))
	for _, t := range targets {
		if t.Status != TargetPending {
			continue
		}
		if r.stopping() {
			return // the job stays running; the next Start fails it
		}
		ctx, cancel := storeCtx()
		err := r.store.StartTarget(ctx, job.ID, t.Idx, r.cfg.Now())
		cancel()
		if errors.Is(err, ErrFinished) || errors.Is(err, ErrNotFound) {
			break // cancelled (or gone) before this target started
		}
		if err != nil {
			log.LogAttrs(context.Background(), slog.LevelError, "batch start target failed",
				slog.Int("idx", t.Idx), slog.String("err", err.Error()))
			return
		}
		fin, d, closed := r.fetchTarget(job.Caller, t)
		if closed {
			r.metrics.target(OutcomeCancel, d)
			log.LogAttrs(context.Background(), slog.LevelInfo, "batch target interrupted by close", slog.Int("idx", t.Idx))
			return
		}
		ctx, cancel = storeCtx()
		status, err := r.store.FinishTarget(ctx, job.ID, fin, r.cfg.Now())
		cancel()
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				return // swept or evicted after a cancel; nothing left to write
			}
			log.LogAttrs(context.Background(), slog.LevelError, "batch finish target failed",
				slog.Int("idx", t.Idx), slog.String("err", err.Error()))
			return
		}
		done++
		r.metrics.target(fin.Outcome, d)
		if fin.Status == TargetDone {
			r.metrics.resultSize.Update(float64(len(fin.Result)))
		}
		attrs := []slog.Attr{slog.Int("idx", t.Idx), slog.Duration("duration", d)}
		if job.Caller.Restricted {
			attrs = append(attrs, slog.Bool("ok", fin.Status == TargetDone))
		} else {
			attrs = append(attrs, slog.String("outcome", string(fin.Outcome)))
		}
		log.LogAttrs(context.Background(), slog.LevelInfo, "batch target finished", attrs...)
		r.notify()
		if status != JobRunning {
			break
		}
	}
	ctx, cancel := storeCtx()
	final, err := r.store.FinishJob(ctx, job.ID, r.cfg.Now())
	cancel()
	if err != nil {
		if !errors.Is(err, ErrNotFound) {
			log.LogAttrs(context.Background(), slog.LevelError, "batch finish job failed", slog.String("err", err.Error()))
		}
		return
	}
	if final != JobCancelled { // a cancel is counted by the runner that took it
		r.metrics.job(string(final))
	}
	r.metrics.jobSecs.Update(time.Since(start).Seconds())
	r.notify()
	log.LogAttrs(context.Background(), slog.LevelInfo, "batch job finished",
		slog.String("status", string(final)), slog.Int("targets_done", done), slog.Duration("duration", time.Since(start)))
}

// fetchTarget fetches one target, retrying while the fetcher is busy, and
// returns what to store and how long it took. closed reports that the runner
// closed during the fetch; nothing is to be stored then.
func (r *Runner) fetchTarget(caller Caller, t TargetRecord) (fin TargetFinish, d time.Duration, closed bool) {
	start := time.Now()
	r.metrics.inflight.Inc()
	defer r.metrics.inflight.Dec()
	fin = TargetFinish{Idx: t.Idx}
	backoff := 100 * time.Millisecond
	for {
		res, err, timedOut := r.callFetch(caller, t.Target)
		if context.Cause(r.fetchCtx) != nil {
			return fin, time.Since(start), true
		}
		switch {
		case timedOut:
			fin.fail(OutcomeTimeout, "", fmt.Errorf("timeout: no result within %s", r.cfg.TargetTimeout))
		case err != nil && isBusy(err):
			// Full jitter: sleep a random time up to the backoff.
			sleep := rand.N(backoff) + time.Millisecond
			if time.Since(start)+sleep > r.cfg.BusyWait {
				fin.fail(OutcomeBusy, hintOf(err), fmt.Errorf("busy: fetcher still busy after %s", r.cfg.BusyWait.Round(time.Millisecond)))
				break
			}
			select {
			case <-time.After(sleep):
			case <-r.fetchCtx.Done():
				return fin, time.Since(start), true
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		case err != nil:
			o := outcomeOf(err)
			if o == "" {
				o = OutcomeOther
			}
			fin.fail(o.Fold(), hintOf(err), err)
		default:
			env, err := res.Envelope()
			switch {
			case err != nil:
				fin.fail(OutcomeOther, "", err)
			case len(env) > r.cfg.MaxResultBytes:
				fin.fail(OutcomeTooLong, "", fmt.Errorf("too long: result is %d bytes (max %d)", len(env), r.cfg.MaxResultBytes))
			default:
				fin.Status, fin.Outcome, fin.Result = TargetDone, OutcomeOK, env
			}
		}
		return fin, time.Since(start), false
	}
}

func (f *TargetFinish) fail(o Outcome, hint string, err error) {
	f.Status, f.Outcome, f.Hint = TargetFailed, o, hint
	f.Error = truncate(err.Error(), maxErrorBytes)
}

var errPanic = errors.New("internal error")

type fetchReturn struct {
	res Result
	err error
}

// callFetch calls the fetcher once under the per-target deadline, in its own
// goroutine so that a panic fails only this target and a fetcher that ignores
// its context is abandoned at the deadline. timedOut reports the deadline.
func (r *Runner) callFetch(caller Caller, t Target) (res Result, err error, timedOut bool) {
	ctx, cancel := context.WithTimeout(r.fetchCtx, r.cfg.TargetTimeout)
	defer cancel()
	ch := make(chan fetchReturn, 1)
	r.fetchWG.Add(1)
	go func() {
		defer r.fetchWG.Done()
		defer func() {
			if p := recover(); p != nil {
				ch <- fetchReturn{err: errPanic} // the panic value may hold a URL: never logged
			}
		}()
		res, err := r.cfg.Fetch(ctx, caller, t)
		ch <- fetchReturn{res, err}
	}()
	var fr fetchReturn
	select {
	case fr = <-ch:
	case <-ctx.Done():
		select {
		case fr = <-ch: // returned at the same moment
		default:
			fr.err = ctx.Err()
		}
	}
	timedOut = errors.Is(ctx.Err(), context.DeadlineExceeded) && fr.err != nil ||
		errors.Is(fr.err, context.DeadlineExceeded)
	return fr.res, fr.err, timedOut
}

// truncate cuts s to at most n bytes without leaving a broken UTF-8
// sequence at the end.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
