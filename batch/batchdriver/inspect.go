package batchdriver

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"
)

// Inspector is implemented by a [Store] that an operator console can read:
// store-wide views across every caller, for the operator, never for a
// caller. It is optional, like [ChangeFeed]: a host checks for it with a
// type assertion (s.(batch.Inspector)), and a store without it has no
// console. Every method is a pure read: it never writes, never bumps a
// lease, and never reads a result body.
//
// Each view is bounded by its parameters and by the store's live state
// (live jobs, runners, pending webhook events, callers holding bytes, the
// jobs finished in the window of the failure counts), never by how many
// finished jobs the store holds, so a console poll costs the same at 1k
// stored jobs and at 100k. The answers carry target and webhook URLs as
// the store holds them ([Job].WebhookURL, [TargetRecord].Target): leaving
// them out of what an operator sees is the console's job.
//
// A store that implements it passes the Inspect group of
// batchdrivertest.TestStore.
type Inspector interface {
	// Overview returns the store-wide view p asks for, read in one
	// snapshot where the store has one.
	Overview(ctx context.Context, p OverviewParams) (Overview, error)

	// InspectJob returns any caller's job and its targets in idx order,
	// without results, or [ErrNotFound] for an unknown id.
	InspectJob(ctx context.Context, jobID string) (Job, []TargetRecord, error)
}

// OverviewParams bound [Inspector.Overview]. A limit below 1 returns none
// of its kind.
type OverviewParams struct {
	// Recent is how many of the newest jobs (by insertion, every caller's)
	// Overview.Recent holds at most.
	Recent int
	// Running is how many of the running jobs (oldest first) Overview.Running
	// holds at most. There are at most Limits.JobsTotal of them.
	Running int
	// Callers is how many callers Overview.Callers holds at most: those
	// holding the most bytes.
	Callers int
	// FailureWindow bounds Overview.Failures: the failed targets of the
	// jobs that finished within it before Now, and of the jobs still held,
	// by outcome. Zero or less counts the finished jobs of any age.
	FailureWindow time.Duration
	// Now is the instant of the read, as in the [Store] methods'
	// parameters: nil means the store's own clock (see the clock note
	// there). The window and the ages of heartbeats and webhook events
	// are taken from it.
	Now *time.Time
}

// Overview is the store-wide view of [Inspector.Overview].
type Overview struct {
	// Stats are the store-wide counts, as [Store.Stats] returns them.
	Stats Stats
	// Running are running jobs, oldest created first.
	Running []Job
	// Recent are the newest jobs of any status, newest first.
	Recent []Job
	// Runners are the runners with a heartbeat row, by id.
	Runners []RunnerBeat
	// Failures counts failed targets by outcome in the window of
	// OverviewParams.FailureWindow. An outcome with none is absent.
	Failures map[Outcome]int
	// Webhooks is the webhook outbox.
	Webhooks WebhookBacklog
	// Callers are the callers holding stored bytes (their finished jobs'
	// and their held jobs'), most bytes first, then by name.
	Callers []CallerBytes
}

// RunnerBeat is one runner's last heartbeat.
type RunnerBeat struct {
	ID        string
	Heartbeat time.Time
	// Age is how long ago the heartbeat was, by the store's clock.
	Age time.Duration
}

// WebhookBacklog describes the webhook outbox.
type WebhookBacklog struct {
	// Pending counts the events in the outbox, claimed ones included (a
	// job with per-target events holds one from its create on).
	Pending int
	// Due counts the events due now: not under a claim's lease, and past
	// their retry's wait.
	Due int
	// Claimed counts the events under a claim (a delivery in flight, or a
	// claim whose runner died and whose lease has not passed yet).
	Claimed int
	// OldestDue is, of the events due now, how long ago the first one
	// became due (its job's end), by the store's clock: the age of the
	// backlog's head. 0 when none is due.
	OldestDue time.Duration
}

// TopCallers orders the callers of bytes (a caller's name to the bytes
// its jobs hold) as [Overview].Callers lists them, most bytes first, then
// by name in byte order, leaving out those holding none, and keeps the
// first limit. Each has only its name; an [Inspector] fills in the rest of
// the Caller from the caller's newest job.
func TopCallers(bytes map[string]int64, limit int) []CallerBytes {
	var out []CallerBytes
	for name, b := range bytes {
		if b != 0 {
			out = append(out, CallerBytes{Caller: Caller{Name: name}, Bytes: b})
		}
	}
	slices.SortFunc(out, func(a, b CallerBytes) int {
		return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), strings.Compare(a.Caller.Name, b.Caller.Name))
	})
	return out[:min(len(out), max(limit, 0))]
}

// CallerBytes is one caller's share of the byte budget.
type CallerBytes struct {
	// Caller is the caller as its newest job stored it; a caller none of
	// whose jobs the store finds is reported Restricted, so that a reader
	// that hides restricted callers' names never shows one it cannot tell.
	Caller Caller
	// Bytes are the result and error bytes its jobs hold.
	Bytes int64
}
