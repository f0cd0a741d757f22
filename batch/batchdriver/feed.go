package batchdriver

// ChangeFeed is implemented by a shared [Store] that can tell a runner
// about changes written through other runners sharing it (PostgreSQL's
// LISTEN/NOTIFY, say), so that their waits and idle workers wake at once
// instead of at their next poll.
//
// A runner subscribes at batch.Runner.Start and stops at batch.Runner.Close. A feed
// calls fn with the id of each job that changed (a claim, a stored target,
// a cancel, a final status, a reap) and with "" when a job was queued. fn
// never blocks; a feed may call it from any goroutine, may merge or drop
// calls, and may call it for changes this runner made itself. Polling
// every Config.PollInterval stays the runner's way to be correct; the feed
// only makes it prompt.
type ChangeFeed interface {
	Subscribe(fn func(jobID string)) (stop func())
}
