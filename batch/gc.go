package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// sweeper runs a collection pass at start and then every SweepInterval.
func (r *Runner) sweeper() {
	defer r.wg.Done()
	t := time.NewTicker(r.cfg.SweepInterval)
	defer t.Stop()
	for {
		ctx, cancel := storeCtx()
		if _, _, err := r.Collect(ctx); err != nil {
			r.log.LogAttrs(ctx, slog.LevelError, "batch collect failed", slog.String("err", err.Error()))
		}
		cancel()
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
	}
}

// Collect runs one garbage-collection pass, as the background sweeper does
// every Config.SweepInterval: it deletes finished jobs whose lease is older
// than the TTL, then evicts finished jobs, oldest lease first, while the
// store holds more than Config.MaxBytes. Live jobs are never touched. It
// returns how many jobs it swept and evicted.
func (r *Runner) Collect(ctx context.Context) (swept, evicted int, err error) {
	swept, serr := r.store.Sweep(ctx, r.cfg.Now().Add(-r.cfg.TTL))
	if serr != nil {
		serr = fmt.Errorf("batch: sweep: %w", serr)
	}
	evicted, eerr := r.store.Evict(ctx, r.cfg.MaxBytes)
	if eerr != nil {
		eerr = fmt.Errorf("batch: evict: %w", eerr)
	}
	if swept > 0 || evicted > 0 {
		r.log.LogAttrs(ctx, slog.LevelInfo, "batch jobs collected",
			slog.Int("swept", swept), slog.Int("evicted", evicted))
	}
	r.refreshGauges(ctx)
	return swept, evicted, errors.Join(serr, eerr)
}
