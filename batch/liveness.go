package batch

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/siftfetch/batchkit/batch/batchdriver"
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
		err := r.store.Heartbeat(ctx, batchdriver.HeartbeatParams{Runner: r.cfg.RunnerID, Now: r.at(now)})
		r.recordStoreCall("heartbeat", start, err)
		if err == nil && time.Since(start) > time.Duration(r.cfg.HeartbeatInterval) {
			// A heartbeat that took longer than the interval may have
			// waited out an outage: other runners' beats may not have
			// landed meanwhile.
			r.health.troubled(r.cfg.Now())
		}
		if err != nil {
			r.log.LogAttrs(ctx, storeErrLevel(err), "batch heartbeat failed", storeErrAttrs(err)...)
		} else if _, err := r.reapStale(ctx, now); err != nil { // at the beat's time: never the runner itself
			r.log.LogAttrs(ctx, storeErrLevel(err), "batch stale reap failed", storeErrAttrs(err)...)
		}
		cancel()
	}
}

// reapStale fails as "restart" (with Config.Resume: hands on) the jobs of runners whose heartbeat is
// older than Config.StaleAfter at now, once this runner has reached the store
// without a failure for a continuous StaleAfter (see [storeHealth]);
// before that it reaps nothing.
func (r *Runner) reapStale(ctx context.Context, now time.Time) (int, error) {
	if !r.health.reachableFor(now, time.Duration(r.cfg.StaleAfter)) {
		return 0, nil
	}
	p := r.reapParams(now)
	p.StaleAfter = time.Duration(r.cfg.StaleAfter)
	msg := "batch jobs of stale runners failed"
	if p.HandBack {
		msg = "batch jobs handed on"
	}
	return r.reap(ctx, p, "stale", msg)
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

	// The outage going on, if down: logged once when it starts and once
	// when it ends.
	down   bool
	downAt time.Time // time.Now at its first failed call
	class  string    // errClass of that call
	failed int       // calls failed in it
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

// recordStoreCall records the outcome of one background store call named op,
// begun at began (time.Now). An answer of the job model (not found, not
// held, …) is the store answering; a success ends an outage only if its
// call began after the outage's first failure (one in flight before
// proves nothing).
// The first failure after a success logs that the store is unreachable,
// the first success after a failure that it is back and how long it was
// not, both at WARN, with the error's class and never its text (a
// driver's error may name the database's user, host and port); each
// failed call is logged at DEBUG by its caller.
func (r *Runner) recordStoreCall(op string, began time.Time, err error) {
	h := &r.health
	if err == nil || isModelErr(err) {
		h.mu.Lock()
		was, downAt, class, failed := h.down, h.downAt, h.class, h.failed
		if was && !began.After(downAt) {
			was = false // in flight before the outage was seen: it goes on
		} else {
			h.down, h.failed = false, 0
		}
		h.mu.Unlock()
		if was {
			r.log.LogAttrs(context.Background(), slog.LevelWarn, "batch store reachable again",
				slog.String("class", class), slog.Duration("outage", time.Since(downAt)), slog.Int("failed_calls", failed))
		}
		return
	}
	now, class := r.cfg.Now(), errClass(err)
	h.mu.Lock()
	if now.After(h.since) {
		h.since = now
	}
	first := !h.down
	if first {
		h.down, h.downAt, h.class = true, time.Now(), class
	}
	h.failed++
	h.mu.Unlock()
	if first {
		r.log.LogAttrs(context.Background(), slog.LevelWarn, "batch store unreachable",
			slog.String("op", op), slog.String("class", class))
	}
}

// errClass names the kind of a failed store call's error: "timeout",
// "unavailable" (the store marked it [ErrUnavailable]) or "error".
func errClass(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	}
	return "error"
}

// modelErrs are the sentinels by which a store that works answers.
var modelErrs = []error{ErrNotFound, batchdriver.ErrNotHeld, ErrFinished, ErrLive, ErrNothingToRetry,
	ErrCallerBusy, ErrBusy, ErrInvalidTarget, ErrNoTargets, ErrTooManyTargets, ErrInvalidCaller}

func isModelErr(err error) bool {
	for _, m := range modelErrs {
		if errors.Is(err, m) {
			return true
		}
	}
	return false
}

// storeErrAttrs describe a failed store call's error for a log line: its
// class, and its text only when the store did not mark it as an outage
// (its text is then about the job model or a bug, not about reaching the
// database, whose errors may carry connection details).
func storeErrAttrs(err error) []slog.Attr {
	class := errClass(err)
	attrs := []slog.Attr{slog.String("class", class)}
	if class == "error" {
		attrs = append(attrs, slog.String("err", err.Error()))
	}
	return attrs
}

// storeErrLevel is the level of a log line about a failed store call: an
// outage is logged at its start and end (see [Runner.observe]), so its
// calls at DEBUG; any other failure at ERROR.
func storeErrLevel(err error) slog.Level {
	if errClass(err) == "error" {
		return slog.LevelError
	}
	return slog.LevelDebug
}
