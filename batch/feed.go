package batch

import (
	"context"
	"log/slog"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// subscribe listens to the store's change feed, if it has one: a change to
// a job wakes its waiters, a queued job wakes an idle worker.
func (r *Runner) subscribe(ctx context.Context) (stop func()) {
	feed, ok := r.store.(batchdriver.ChangeFeed)
	if !ok {
		return func() {}
	}
	r.log.LogAttrs(ctx, slog.LevelDebug, "batch runner follows the store's change feed")
	return feed.Subscribe(func(jobID string) {
		if jobID != "" {
			r.waiters.fed(jobID)
			return
		}
		select {
		case r.wake <- struct{}{}:
		default: // every worker already has a wake-up pending
		}
	})
}
