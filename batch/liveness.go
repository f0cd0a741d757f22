package batch

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// heartbeat writes the runner's heartbeat every Config.HeartbeatInterval
// until the runner stops, whatever its targets are doing, and after each
// one that the store took fails the jobs of stale runners: a dead node's
// jobs move on within StaleAfter plus one HeartbeatInterval, not at the
// next sweep.
func (r *Runner) heartbeat() {
	defer r.wg.Done()
	t := time.NewTicker(time.Duration(r.cfg.HeartbeatInterval))
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		ctx, cancel := storeCtx()
		start, now := time.Now(), r.cfg.Now()
		err := r.store.Heartbeat(ctx, HeartbeatParams{Runner: r.cfg.RunnerID, Now: now})
		r.observe("heartbeat", err)
		if err == nil && time.Since(start) > time.Duration(r.cfg.HeartbeatInterval) {
			// A heartbeat that took longer than the interval may have
			// waited out an outage: other runners' beats may not have
			// landed meanwhile.
			r.health.troubled(r.cfg.Now())
		}
		if err != nil {
			r.log.LogAttrs(ctx, slog.LevelDebug, "batch heartbeat failed", storeErrAttr(err))
		} else if _, err := r.reapStale(ctx, now); err != nil { // at the beat's time: never the runner itself
			r.log.LogAttrs(ctx, slog.LevelDebug, "batch stale reap failed", storeErrAttr(err))
		}
		cancel()
	}
}

// reapStale fails as "restart" the jobs of runners whose heartbeat is
// older than Config.StaleAfter at now, once this runner has reached the store
// without a failure for a continuous StaleAfter (see [storeHealth]);
// before that it reaps nothing.
func (r *Runner) reapStale(ctx context.Context, now time.Time) (int, error) {
	if !r.health.reachableFor(now, time.Duration(r.cfg.StaleAfter)) {
		return 0, nil
	}
	p := ReapParams{StaleBefore: now.Add(-time.Duration(r.cfg.StaleAfter)), Reason: reasonRestart, Now: now}
	return r.reap(ctx, p, "batch jobs of stale runners failed")
}

// storeHealth is what a runner knows of its store's reachability, from the
// outcome of its own background calls.
//
// A heartbeat's age is taken on the store's clock, which goes on while the
// store is unreachable: right after an outage longer than StaleAfter every
// runner looks stale until its next heartbeat lands. So a runner judges
// staleness only once it has reached the store without a failure for a
// continuous StaleAfter, counted from its last failed call (or from Start).
// An outage longer than one HeartbeatInterval fails at least one of its
// heartbeats, so by then every live runner has had StaleAfter minus one
// HeartbeatInterval (at least one more interval, as StaleAfter is at least
// two) to write a heartbeat after the outage. A runner that really died is
// then reaped within StaleAfter plus one HeartbeatInterval of the later of
// its last heartbeat and the reaper's last failed call.
type storeHealth struct {
	mu    sync.Mutex
	since time.Time // Config.Now at Start, or when the last failed call returned
}

// troubled records a failed (or suspiciously slow) store call at now.
func (h *storeHealth) troubled(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if now.After(h.since) {
		h.since = now
	}
}

// reachableFor reports whether no store call failed in the d before now,
// nor did the runner start then.
func (h *storeHealth) reachableFor(now time.Time, d time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.since.IsZero() && now.Sub(h.since) >= d
}

// observe records the outcome of one background store call named op. An
// answer of the job model (not found, not held, …) is the store answering.
func (r *Runner) observe(op string, err error) {
	if err == nil || isModelErr(err) {
		return
	}
	r.health.troubled(r.cfg.Now())
}

// modelErrs are the sentinels by which a store that works answers.
var modelErrs = []error{ErrNotFound, ErrNotHeld, ErrFinished, ErrLive, ErrNothingToRetry,
	ErrCallerBusy, ErrBusy, ErrInvalidTarget, ErrNoTargets, ErrTooManyTargets, ErrInvalidCaller}

func isModelErr(err error) bool {
	for _, m := range modelErrs {
		if errors.Is(err, m) {
			return true
		}
	}
	return false
}

// storeErrAttr is the attribute that names a failed store call's error.
func storeErrAttr(err error) slog.Attr { return slog.String("err", err.Error()) }
