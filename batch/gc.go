package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// sweeper runs a collection pass at start and then every SweepInterval.
func (r *Runner) sweeper() {
	defer r.wg.Done()
	t := time.NewTicker(time.Duration(r.cfg.SweepInterval))
	defer t.Stop()
	for {
		ctx, cancel := storeCtx()
		if _, err := r.Collect(ctx); err != nil {
			r.log.LogAttrs(ctx, storeErrLevel(err), "batch collect failed", storeErrAttrs(err)...)
		}
		cancel()
		r.gate.tidy()
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
	}
}

// Collected is what one [Runner.Collect] pass did.
type Collected struct {
	Swept   int // finished jobs deleted because their lease expired
	Evicted int // finished jobs deleted to get under the byte budget
	Reaped  int // live jobs failed because their runner's heartbeat is stale
	Expired int // queued jobs ended because their deadline passed
}

// Collect runs one collection pass, as the background sweeper does every
// Config.SweepInterval: it deletes finished jobs whose lease is older than
// the TTL, evicts finished jobs while the store holds more than
// Config.MaxBytes (from the caller holding the most bytes first, its
// oldest lease first, never from a caller within its share: see
// [Store.Evict]), and fails as "restart" the jobs
// held by runners whose heartbeat is older than Config.StaleAfter (their
// finished targets stay), unless the runner saw the store fail within the
// last StaleAfter or started then (see docs/design/liveness.md in the
// repository). It ends the queued jobs whose deadline has passed (see
// [SubmitOptions]). Live jobs are never swept or evicted. It also
// samples the queue depth gauge.
func (r *Runner) Collect(ctx context.Context) (Collected, error) {
	var c Collected
	now := r.cfg.Now()
	var errs []error
	var err error
	began := time.Now()
	c.Swept, err = r.store.Sweep(ctx, batchdriver.SweepParams{TTL: time.Duration(r.cfg.TTL), Now: r.at(now)})
	r.recordStoreCall("sweep", began, err)
	if err != nil {
		errs = append(errs, fmt.Errorf("batch: sweep: %w", err))
	}
	began = time.Now()
	c.Evicted, err = r.store.Evict(ctx, batchdriver.EvictParams{MaxBytes: r.cfg.MaxBytes})
	r.recordStoreCall("evict", began, err)
	if err != nil {
		errs = append(errs, fmt.Errorf("batch: evict: %w", err))
	}
	if c.Reaped, err = r.reapStale(ctx, now); err != nil {
		errs = append(errs, fmt.Errorf("batch: %w", err))
	}
	if c.Expired, err = r.expireQueued(ctx, now); err != nil {
		errs = append(errs, fmt.Errorf("batch: %w", err))
	}
	if c.Swept > 0 || c.Evicted > 0 {
		r.log.LogAttrs(ctx, slog.LevelInfo, "batch jobs collected",
			slog.Int("swept", c.Swept), slog.Int("evicted", c.Evicted))
	}
	began = time.Now()
	st, err := r.store.Stats(ctx)
	r.recordStoreCall("stats", began, err)
	if err != nil {
		errs = append(errs, fmt.Errorf("batch: stats: %w", err))
	} else {
		r.metrics.queueDepth.Set(float64(st.Queued))
	}
	return c, errors.Join(errs...)
}
