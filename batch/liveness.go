package batch

import (
	"context"
	"log/slog"
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
		err := r.store.Heartbeat(ctx, HeartbeatParams{Runner: r.cfg.RunnerID, Now: r.cfg.Now()})
		if err != nil {
			r.log.LogAttrs(ctx, slog.LevelWarn, "batch heartbeat failed", slog.String("err", err.Error()))
		} else if _, err := r.reapStale(ctx); err != nil {
			r.log.LogAttrs(ctx, slog.LevelWarn, "batch stale reap failed", slog.String("err", err.Error()))
		}
		cancel()
	}
}

// reapStale fails as "restart" the jobs of runners whose heartbeat is
// older than Config.StaleAfter.
func (r *Runner) reapStale(ctx context.Context) (int, error) {
	now := r.cfg.Now()
	p := ReapParams{StaleBefore: now.Add(-time.Duration(r.cfg.StaleAfter)), Reason: reasonRestart, Now: now}
	return r.reap(ctx, p, "batch jobs of stale runners failed")
}
