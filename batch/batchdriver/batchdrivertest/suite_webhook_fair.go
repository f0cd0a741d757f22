package batchdrivertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// webhookFairCases: the outbox is fair across callers. Claims take every
// caller's oldest due event before anyone's second, never more of one
// caller than the claim's PerCaller allows (its events under an unexpired
// claim counted, whoever claimed them), and Create refuses a webhook to a
// caller at its cap of pending events.
var webhookFairCases = map[string]func(*testing.T, batchdriver.Store){
	"WebhookClaimPerCallerCap":      storeWebhookPerCallerCap,
	"WebhookClaimPerCallerRacing":   storeWebhookPerCallerRacing,
	"WebhookClaimRoundRobin":        storeWebhookRoundRobin,
	"WebhookPendingCapAtCreate":     storeWebhookPendingCap,
	"WebhookPendingCapCountsJobEnd": storeWebhookPendingCapJobEnd,
}

// queueHooks creates n jobs of caller with a webhook, created (and so
// due) a second apart from start, and cancels each one, which writes its
// event at once. It returns their ids, oldest first.
func queueHooks(t *testing.T, s batchdriver.Store, caller string, n int, start time.Time) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range n {
		at := start.Add(time.Duration(i) * time.Second)
		p := hookSpec(caller, fmt.Sprint("k", i), 1, at)
		mustCreate(t, s, p)
		cancel(t, s, caller, p.ID, at)
		ids[i] = p.ID
	}
	return ids
}

// claimFair claims for runner with a per-caller cap, and returns the
// events by caller.
func claimFair(t *testing.T, s batchdriver.Store, runner string, limit, perCaller int, now time.Time) map[string][]batchdriver.WebhookDelivery {
	t.Helper()
	ds, err := s.ClaimWebhooks(t.Context(), batchdriver.ClaimWebhooksParams{
		Runner: runner, Limit: limit, PerCaller: perCaller, Lease: hookLease, Now: nowAt(now),
	})
	if err != nil {
		t.Fatalf("ClaimWebhooks(%s): %v", runner, err)
	}
	by := map[string][]batchdriver.WebhookDelivery{}
	for _, d := range ds {
		by[d.Caller] = append(by[d.Caller], d)
	}
	return by
}

func countOf(by map[string][]batchdriver.WebhookDelivery) map[string]int {
	out := map[string]int{}
	for c, ds := range by {
		out[c] = len(ds)
	}
	return out
}

// storeWebhookRoundRobin: a caller with many older events does not push
// back another caller's one newer event; each caller's events come oldest
// first; the events carry their caller.
func storeWebhookRoundRobin(t *testing.T, s batchdriver.Store) {
	alice := queueHooks(t, s, "alice", 5, t0)
	bob := queueHooks(t, s, "bob", 1, t0.Add(time.Minute))
	carol := queueHooks(t, s, "carol", 2, t0.Add(2*time.Minute))
	now := t0.Add(time.Hour)
	by := claimFair(t, s, runnerA, 3, 0, now)
	if got := countOf(by); got["alice"] != 1 || got["bob"] != 1 || got["carol"] != 1 {
		t.Fatalf("a claim of 3 took %v, want one event of each caller", got)
	}
	if by["alice"][0].JobID != alice[0] || by["bob"][0].JobID != bob[0] || by["carol"][0].JobID != carol[0] {
		t.Errorf("the first round is not each caller's oldest event: %+v", by)
	}
	by = claimFair(t, s, runnerA, 2, 0, now)
	if got := countOf(by); got["alice"] != 1 || got["carol"] != 1 {
		t.Fatalf("the second round took %v, want alice's and carol's second events", got)
	}
	if by["alice"][0].JobID != alice[1] || by["carol"][0].JobID != carol[1] {
		t.Errorf("the second round is not each caller's next event: %+v", by)
	}
	by = claimFair(t, s, runnerA, 100, 0, now)
	if got := countOf(by); got["alice"] != 3 || len(got) != 1 {
		t.Fatalf("the rest: %v, want alice's last three", got)
	}
}

// storeWebhookPerCallerCap: a claim leaves out a caller's events beyond
// PerCaller, counting those another runner holds; a delivered event, a
// released retry or a passed lease makes room again.
func storeWebhookPerCallerCap(t *testing.T, s batchdriver.Store) {
	queueHooks(t, s, "alice", 5, t0)
	queueHooks(t, s, "bob", 3, t0.Add(time.Minute))
	now := t0.Add(time.Hour)
	by := claimFair(t, s, runnerA, 100, 2, now)
	if got := countOf(by); got["alice"] != 2 || got["bob"] != 2 || len(got) != 2 {
		t.Fatalf("a claim with a cap of 2 per caller took %v", got)
	}
	if got := countOf(claimFair(t, s, runnerB, 100, 2, now)); len(got) != 0 {
		t.Fatalf("another runner claimed %v while both callers are at their cap", got)
	}
	// One of alice's is delivered, one of bob's is to be retried later.
	a, b := by["alice"][0], by["bob"][0]
	finishHook(t, s, batchdriver.FinishWebhookParams{JobID: a.JobID, Runner: runnerA, Attempt: a.Attempt, Now: nowAt(now)})
	finishHook(t, s, batchdriver.FinishWebhookParams{JobID: b.JobID, Runner: runnerA, Attempt: b.Attempt, Retry: true, RetryIn: time.Hour, Now: nowAt(now)})
	if got := countOf(claimFair(t, s, runnerB, 100, 2, now)); got["alice"] != 1 || got["bob"] != 1 || len(got) != 2 {
		t.Fatalf("after a delivery and a retry: claimed %v, want one more of each", got)
	}
	if got := countOf(claimFair(t, s, runnerB, 100, 2, now)); len(got) != 0 {
		t.Fatalf("claimed %v beyond the cap", got)
	}
	// Without a cap the rest comes at once; once the leases pass, the
	// claims held count no more.
	later := now.Add(hookLease)
	if got := countOf(claimFair(t, s, runnerA, 100, 0, later)); got["alice"] != 4 || got["bob"] != 2 {
		t.Fatalf("after the leases passed, an uncapped claim took %v, want alice 4, bob 2", got)
	}
}

// storeWebhookPerCallerRacing: racing claims of several runners together
// never exceed a caller's cap.
func storeWebhookPerCallerRacing(t *testing.T, s batchdriver.Store) {
	queueHooks(t, s, "alice", 6, t0)
	queueHooks(t, s, "bob", 6, t0.Add(time.Minute))
	now := t0.Add(time.Hour)
	const perCaller = 2
	total := map[string]int{}
	for _, d := range raceClaims(t, s, 8, func(i int) batchdriver.ClaimWebhooksParams {
		return batchdriver.ClaimWebhooksParams{Runner: fmt.Sprintf("r%d", i), Limit: 1 + i%3, PerCaller: perCaller, Lease: hookLease, Now: nowAt(now)}
	}) {
		total[d.Caller]++
	}
	if t.Failed() {
		return
	}
	for caller, n := range total {
		if n > perCaller {
			t.Errorf("racing claims took %d events of %s, over its cap of %d", n, caller, perCaller)
		}
	}
	if total["alice"] == 0 && total["bob"] == 0 {
		t.Errorf("racing claims took nothing")
	}
}

// storeWebhookPendingCap: Create refuses a webhook to a caller whose jobs
// with a webhook and pending events reach the cap, and nothing else: a job
// without a webhook, another caller's, a reuse. A delivery makes room.
func storeWebhookPendingCap(t *testing.T, s batchdriver.Store) {
	lim := suiteLimits
	lim.WebhooksPerCaller = 2
	capped := func(p batchdriver.CreateParams) batchdriver.CreateParams { return withLimits(p, lim) }
	live := capped(hookSpec("alice", "live", 1, t0))
	mustCreate(t, s, live)
	queued := capped(hookSpec("alice", "queued", 1, t0.Add(time.Second)))
	mustCreate(t, s, queued)
	cancel(t, s, "alice", queued.ID, t0.Add(time.Second)) // now a pending event
	over := capped(hookSpec("alice", "over", 1, t0.Add(2*time.Second)))
	_, _, err := s.Create(t.Context(), over)
	wantErr(t, "a third webhook at a cap of 2", err, batch.ErrWebhooksBusy)
	mustCreate(t, s, capped(jobSpec("alice", "plain", 1, t0.Add(3*time.Second))))
	mustCreate(t, s, capped(hookSpec("bob", "other", 1, t0.Add(4*time.Second))))
	again := capped(live)
	again.ID, again.Now = "alice-live-again", nowAt(t0.Add(5*time.Second))
	if j, reused, err := s.Create(t.Context(), again); err != nil || !reused || j.ID != live.ID {
		t.Fatalf("resubmit at the cap = %s, %v, %v; want %s reused", j.ID, reused, err, live.ID)
	}
	// alice's queued job's event is delivered: room for one.
	now := t0.Add(time.Minute)
	var ev batchdriver.WebhookDelivery
	for _, d := range claimHooks(t, s, runnerA, 100, now) {
		if d.JobID == queued.ID {
			ev = d
		}
	}
	if ev.JobID == "" || ev.Caller != "alice" {
		t.Fatalf("the cancelled job's event was not claimed with its caller: %+v", ev)
	}
	finishHook(t, s, batchdriver.FinishWebhookParams{JobID: ev.JobID, Runner: runnerA, Attempt: ev.Attempt, Now: nowAt(now)})
	over.Now = nowAt(now)
	mustCreate(t, s, over)
	_, _, err = s.Create(t.Context(), capped(hookSpec("alice", "over2", 1, now.Add(time.Second))))
	wantErr(t, "a webhook at the cap again", err, batch.ErrWebhooksBusy)
}

// storeWebhookPendingCapJobEnd: a job with a webhook counts from its
// create to its event's end, with no gap: while it runs, once cancelled
// with its target in flight, once finished.
func storeWebhookPendingCapJobEnd(t *testing.T, s batchdriver.Store) {
	lim := suiteLimits
	lim.WebhooksPerCaller = 1
	p := withLimits(hookSpec("alice", "end", 2, t0), lim)
	mustCreate(t, s, p)
	refused := func(what string, now time.Time) {
		t.Helper()
		_, _, err := s.Create(t.Context(), withLimits(hookSpec("alice", "x", 1, now), lim))
		wantErr(t, what, err, batch.ErrWebhooksBusy)
	}
	refused("while queued", t0)
	claimJob(t, s, runnerA, p.ID, t0)
	refused("while running", t0.Add(time.Second))
	cancel(t, s, "alice", p.ID, t0.Add(2*time.Second))
	refused("cancelled with its target in flight", t0.Add(3*time.Second))
	finish(t, s, runnerA, p.ID, okFinish(0, "a"), t0.Add(4*time.Second))
	refused("finished, its event pending", t0.Add(5*time.Second))
	d := oneHook(t, s, runnerA, p.ID, t0.Add(6*time.Second))
	finishHook(t, s, batchdriver.FinishWebhookParams{JobID: d.JobID, Runner: runnerA, Attempt: d.Attempt, Now: nowAt(t0.Add(6 * time.Second))})
	mustCreate(t, s, withLimits(hookSpec("alice", "next", 1, t0.Add(7*time.Second)), lim))
}
