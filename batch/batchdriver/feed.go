package batchdriver

import "context"

// ChangeFeed is implemented by a shared [Store] that can tell a runner
// about changes written through other runners sharing it (PostgreSQL's
// LISTEN/NOTIFY, say), so that their waits and idle workers wake at once
// instead of at their next poll.
//
// A runner subscribes at batch.Runner.Start and stops at batch.Runner.Close. A feed
// calls fn with the id of each job that changed (a claim, a stored target,
// a cancel, a final status, a reap) and with "" when a job was queued. fn
// never blocks; a feed may call it from any goroutine, may merge or drop
// calls, and may call it for changes this runner made itself; a
// [WatchFeed] calls it for other runners' changes to a job only while a
// runner watches that job. Polling every Config.PollInterval stays the
// runner's way to be correct; the feed only makes it prompt.
type ChangeFeed interface {
	Subscribe(fn func(jobID string)) (stop func())
}

// WatchFeed is implemented by a [ChangeFeed] that sends a job's changes to
// the other runners only while one of them waits on that job, so that the
// cost of a change does not grow with the runners that share the store.
// A runner calls Watch as its batch.Runner.Wait on jobID starts, before
// its first read, and stop as the wait ends; Watch returns once the other
// runners will send that job's changes. It never fails: a watch it could
// not record leaves the wait to its polls. stop never blocks.
type WatchFeed interface {
	ChangeFeed
	Watch(ctx context.Context, jobID string) (stop func())
}
