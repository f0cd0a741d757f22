package batchdrivertest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// webhookTargetCases: per-target events. A job created with HookTargets
// has one outbox entry from its create on; its events go one at a time,
// the targets in idx order (those that finished while one was out
// together in the next), the completion last.
var webhookTargetCases = map[string]func(*testing.T, batchdriver.Store){
	"TargetEventsCancelAndReap":    storeTargetEventsCancelAndReap,
	"TargetEventsDropEndsThem":     storeTargetEventsDrop,
	"TargetEventsExpired":          storeTargetEventsExpired,
	"TargetEventsFixedAtFirstTry":  storeTargetEventsFixed,
	"TargetEventsHandedOn":         storeTargetEventsHandedOn,
	"TargetEventsInIdxOrder":       storeTargetEventsInOrder,
	"TargetEventsMaxPerEvent":      storeTargetEventsMax,
	"TargetEventsOnly":             storeTargetEventsOnly,
	"TargetEventsOutliveTheirJob":  storeTargetEventsOutliveJob,
	"TargetEventsPendingCapOnce":   storeTargetEventsPendingCap,
	"TargetEventsReleasedByReaper": storeTargetEventsReleased,
	"TargetEventsWithSkipped":      storeTargetEventsSkipped,
}

// bothEvents is the event set of the cases: per-target and completion.
const bothEvents = batchdriver.HookTargets | batchdriver.HookFinished

// targetHookSpec is hookSpec with per-target events and a custom id per
// target ("c<idx>").
func targetHookSpec(caller, key string, n int, now time.Time, events batchdriver.HookEvents) batchdriver.CreateParams {
	p := hookSpec(caller, key, n, now)
	p.WebhookEvents = events
	p.CustomIDs = make([]string, n)
	for i := range p.CustomIDs {
		p.CustomIDs[i] = fmt.Sprintf("c%d", i)
	}
	return p
}

// wantTargetEvent checks that d is a per-target event of job p at cursor
// from, carrying exactly the targets idxs, with their custom ids and
// statuses (ok ones done, the others failed, as the cases finish them).
func wantTargetEvent(t *testing.T, d batchdriver.WebhookDelivery, p batchdriver.CreateParams, from int, failed []int, idxs ...int) {
	t.Helper()
	var got []int
	for _, wt := range d.Targets {
		got = append(got, wt.Idx)
		wantStatus, wantOutcome := batch.TargetDone, batch.OutcomeOK
		if slices.Contains(failed, wt.Idx) {
			wantStatus, wantOutcome = batch.TargetFailed, ""
		}
		if wt.CustomID != p.CustomIDs[wt.Idx] || wt.Status != wantStatus || wantOutcome != "" && wt.Outcome != wantOutcome {
			t.Errorf("event of %s: target %+v, want custom id %q, %s", p.ID, wt, p.CustomIDs[wt.Idx], wantStatus)
		}
	}
	if d.JobID != p.ID || d.Event != batchdriver.HookTargets || d.Cursor != from || !slices.Equal(got, idxs) ||
		d.Caller != p.Caller.Name || d.URL != p.WebhookURL || d.TargetsTotal != len(p.Targets) {
		t.Fatalf("event = %+v\nwant the per-target event of %s at cursor %d with targets %v", d, p.ID, from, idxs)
	}
}

// deliverHook ends the claim of d as delivered.
func deliverHook(t *testing.T, s batchdriver.Store, d batchdriver.WebhookDelivery, runner string, now time.Time) {
	t.Helper()
	finishHook(t, s, batchdriver.FinishWebhookParams{JobID: d.JobID, Runner: runner, Attempt: d.Attempt, Cursor: d.Cursor, Now: nowAt(now)})
}

// storeTargetEventsInOrder: nothing is due until a target finishes; one
// event at a time, targets that finish while one is out go together in
// the next, in idx order; the completion comes last, a snapshot of the
// job as it finished. The events round-trip with the job.
func storeTargetEventsInOrder(t *testing.T, s batchdriver.Store) {
	p := targetHookSpec("alice", "order", 5, t0, bothEvents)
	mustCreate(t, s, p)
	if j, _ := getJob(t, s, "alice", p.ID); j.WebhookEvents != bothEvents {
		t.Fatalf("stored events %b, want %b", j.WebhookEvents, bothEvents)
	}
	wantNoHooks(t, s, "queued", t0.Add(time.Hour))
	c := claimJob(t, s, runnerA, p.ID, t0)
	if c.Job.WebhookEvents != bothEvents {
		t.Errorf("claimed job's events = %b", c.Job.WebhookEvents)
	}
	wantNoHooks(t, s, "running, no target finished", t0.Add(time.Hour))

	t1 := t0.Add(time.Minute)
	finish(t, s, runnerA, p.ID, okFinish(0, "a"), t1)
	d := oneHook(t, s, runnerA, p.ID, t1.Add(time.Second))
	wantTargetEvent(t, d, p, 0, nil, 0)
	if d.Attempt != 1 || d.Age != time.Second || !d.Since.Equal(t1) {
		t.Errorf("first claim: attempt %d, age %s, since %v; want 1, 1s, %v", d.Attempt, d.Age, d.Since, t1)
	}
	// Two targets finish while the event is out: nothing more is due.
	finish(t, s, runnerA, p.ID, failFinish(1, "nope"), t1.Add(2*time.Second))
	finish(t, s, runnerA, p.ID, okFinish(2, "c"), t1.Add(3*time.Second))
	wantNoHooks(t, s, "one event out", t1.Add(4*time.Second))
	t2 := t1.Add(5 * time.Second)
	deliverHook(t, s, d, runnerA, t2)
	d = oneHook(t, s, runnerB, p.ID, t2)
	wantTargetEvent(t, d, p, 1, []int{1}, 1, 2)
	if d.Attempt != 1 || !d.Since.Equal(t2) {
		t.Errorf("next event: attempt %d, since %v; want 1, %v", d.Attempt, d.Since, t2)
	}
	deliverHook(t, s, d, runnerB, t2)
	wantNoHooks(t, s, "every finished target delivered", t2.Add(time.Hour))

	// The last two finish: their event, then the completion.
	finish(t, s, runnerA, p.ID, okFinish(3, "d"), t2.Add(time.Second))
	t3 := t2.Add(2 * time.Second)
	if st := finish(t, s, runnerA, p.ID, okFinish(4, "e"), t3); st.Status != batch.JobPartial {
		t.Fatalf("final step = %+v", st)
	}
	d = oneHook(t, s, runnerA, p.ID, t3)
	wantTargetEvent(t, d, p, 3, nil, 3, 4)
	deliverHook(t, s, d, runnerA, t3)
	d = oneHook(t, s, runnerA, p.ID, t3)
	if d.Event != batchdriver.HookFinished || d.Cursor != 5 || d.Attempt != 1 || len(d.Targets) != 0 {
		t.Fatalf("the completion: %+v", d)
	}
	wantHook(t, d, p, batch.JobPartial, "", 4, 1, t3)
	deliverHook(t, s, d, runnerA, t3)
	wantNoHooks(t, s, "after the completion", t3.Add(48*time.Hour))
}

// storeTargetEventsFixed: an event carries the same targets on every
// attempt, though more finished meanwhile; they go in the next. Only the
// claim of the event's cursor and attempt can end it.
func storeTargetEventsFixed(t *testing.T, s batchdriver.Store) {
	p := targetHookSpec("alice", "fixed", 3, t0, bothEvents)
	mustCreate(t, s, p)
	claimJob(t, s, runnerA, p.ID, t0)
	finish(t, s, runnerA, p.ID, okFinish(0, "a"), t0)
	d := oneHook(t, s, runnerA, p.ID, t0)
	wantTargetEvent(t, d, p, 0, nil, 0)
	finish(t, s, runnerA, p.ID, okFinish(1, "b"), t0.Add(time.Second))
	fenced := func(what string, fp batchdriver.FinishWebhookParams) {
		t.Helper()
		wantErr(t, what, s.FinishWebhook(t.Context(), fp), batchdriver.ErrNotHeld)
	}
	fenced("a finish at another cursor", batchdriver.FinishWebhookParams{JobID: p.ID, Runner: runnerA, Attempt: 1, Cursor: 1, Now: nowAt(t0)})
	finishHook(t, s, batchdriver.FinishWebhookParams{JobID: p.ID, Runner: runnerA, Attempt: 1, Retry: true, RetryIn: time.Hour, Now: nowAt(t0)})
	wantNoHooks(t, s, "before the retry, though a target finished", t0.Add(time.Hour-time.Second))
	t1 := t0.Add(time.Hour)
	d = oneHook(t, s, runnerB, p.ID, t1)
	wantTargetEvent(t, d, p, 0, nil, 0)
	if d.Attempt != 2 || d.Age != time.Hour || !d.Since.Equal(t0) {
		t.Errorf("the retry: attempt %d, age %s, since %v; want 2, 1h, %v", d.Attempt, d.Age, d.Since, t0)
	}
	// The lease passes: runner C takes it over, and B's late outcome is refused.
	t2 := t1.Add(hookLease)
	d = oneHook(t, s, runnerC, p.ID, t2)
	wantTargetEvent(t, d, p, 0, nil, 0)
	fenced("the finish of a claim taken over", batchdriver.FinishWebhookParams{JobID: p.ID, Runner: runnerB, Attempt: 2, Now: nowAt(t2)})
	deliverHook(t, s, d, runnerC, t2)
	d = oneHook(t, s, runnerA, p.ID, t2)
	wantTargetEvent(t, d, p, 1, nil, 1)
	if d.Attempt != 1 {
		t.Errorf("the next event's first claim: attempt %d", d.Attempt)
	}
	// An outcome of the event before is refused, though its runner and
	// attempt match this one's.
	fenced("the finish of the event before", batchdriver.FinishWebhookParams{JobID: p.ID, Runner: runnerA, Attempt: 1, Cursor: 0, Now: nowAt(t2)})
}

// storeTargetEventsOnly: a job with per-target events alone gets no
// completion; its entry goes with its last target's event, and a job
// cancelled before any target finished gets none.
func storeTargetEventsOnly(t *testing.T, s batchdriver.Store) {
	p := targetHookSpec("alice", "only", 2, t0, batchdriver.HookTargets)
	mustCreate(t, s, p)
	claimJob(t, s, runnerA, p.ID, t0)
	finish(t, s, runnerA, p.ID, okFinish(0, "a"), t0)
	finish(t, s, runnerA, p.ID, okFinish(1, "b"), t0)
	d := oneHook(t, s, runnerA, p.ID, t0)
	wantTargetEvent(t, d, p, 0, nil, 0, 1)
	deliverHook(t, s, d, runnerA, t0)
	wantNoHooks(t, s, "no completion asked for", t0.Add(48*time.Hour))

	q := targetHookSpec("bob", "cancelled", 2, t0, batchdriver.HookTargets)
	mustCreate(t, s, q)
	cancel(t, s, "bob", q.ID, t0)
	wantNoHooks(t, s, "cancelled while queued", t0.Add(48*time.Hour))
	lim := suiteLimits
	lim.WebhooksPerCaller = 1
	mustCreate(t, s, withLimits(hookSpec("alice", "room", 1, t0.Add(time.Second)), lim))
	mustCreate(t, s, withLimits(hookSpec("bob", "room", 1, t0.Add(time.Second)), lim))
}

// storeTargetEventsCancelAndReap: a cancel lets the target in flight
// finish into an event before the completion; a reap's failed target
// goes in the events too.
func storeTargetEventsCancelAndReap(t *testing.T, s batchdriver.Store) {
	p := targetHookSpec("alice", "cancel", 3, t0, bothEvents)
	mustCreate(t, s, p)
	claimJob(t, s, runnerA, p.ID, t0)
	finish(t, s, runnerA, p.ID, okFinish(0, "a"), t0)
	t1 := t0.Add(time.Minute)
	cancel(t, s, "alice", p.ID, t1)
	finish(t, s, runnerA, p.ID, okFinish(1, "b"), t1.Add(time.Second))
	t2 := t1.Add(2 * time.Second)
	d := oneHook(t, s, runnerA, p.ID, t2)
	wantTargetEvent(t, d, p, 0, nil, 0, 1)
	deliverHook(t, s, d, runnerA, t2)
	d = oneHook(t, s, runnerA, p.ID, t2)
	wantHook(t, d, p, batch.JobCancelled, "", 2, 0, t1)
	deliverHook(t, s, d, runnerA, t2)
	wantNoHooks(t, s, "after the cancelled job's events", t2.Add(48*time.Hour))

	q := targetHookSpec("bob", "reaped", 3, t0.Add(time.Second), bothEvents)
	mustCreate(t, s, q)
	claimJob(t, s, runnerA, q.ID, t2)
	finish(t, s, runnerA, q.ID, okFinish(0, "a"), t2)
	d = oneHook(t, s, runnerB, q.ID, t2) // out when the reap comes
	t3 := t2.Add(time.Minute)
	reap(t, s, batchdriver.ReapParams{Runner: runnerA, Reason: "restart", Now: nowAt(t3)})
	wantTargetEvent(t, d, q, 0, nil, 0)
	deliverHook(t, s, d, runnerB, t3)
	d = oneHook(t, s, runnerB, q.ID, t3)
	wantTargetEvent(t, d, q, 1, []int{1}, 1)
	deliverHook(t, s, d, runnerB, t3)
	d = oneHook(t, s, runnerB, q.ID, t3)
	wantHook(t, d, q, batch.JobFailed, "restart", 1, 1, t3)
}

// storeTargetEventsExpired: the targets a deadline ends while the job is
// queued go in its events too, then the completion.
func storeTargetEventsExpired(t *testing.T, s batchdriver.Store) {
	p := targetHookSpec("alice", "expired", 3, t0, bothEvents)
	p.Deadline = t0.Add(time.Minute)
	mustCreate(t, s, p)
	t1 := t0.Add(time.Minute)
	if ended := expire(t, s, t1); len(ended) != 1 || ended[0].JobID != p.ID {
		t.Fatalf("expired %+v, want the job", ended)
	}
	d := oneHook(t, s, runnerA, p.ID, t1)
	wantTargetEvent(t, d, p, 0, []int{0, 1, 2}, 0, 1, 2)
	for _, wt := range d.Targets {
		if wt.Outcome != batch.OutcomeExpired {
			t.Errorf("an expired target's outcome: %+v", wt)
		}
	}
	deliverHook(t, s, d, runnerA, t1)
	d = oneHook(t, s, runnerA, p.ID, t1)
	wantHook(t, d, p, batch.JobFailed, batchdriver.DeadlineReason, 0, 3, t1)
}

// storeTargetEventsHandedOn: a job handed on to another runner goes on
// with its events where they stood: its interrupted target and the ones
// the next runner stores follow in idx order.
func storeTargetEventsHandedOn(t *testing.T, s batchdriver.Store) {
	p := targetHookSpec("alice", "handed", 3, t0, bothEvents)
	mustCreate(t, s, p)
	claimJob(t, s, runnerA, p.ID, t0)
	finish(t, s, runnerA, p.ID, okFinish(0, "a"), t0)
	d := oneHook(t, s, runnerC, p.ID, t0)
	wantTargetEvent(t, d, p, 0, nil, 0)
	deliverHook(t, s, d, runnerC, t0)
	t1 := t0.Add(time.Minute)
	if n := reap(t, s, batchdriver.ReapParams{Runner: runnerA, HandBack: true, Reason: reasonInterrupted, Now: nowAt(t1)}); n != 1 {
		t.Fatalf("handed back %d jobs, want 1", n)
	}
	if c := claimJob(t, s, runnerB, p.ID, t1); c.Next != 2 {
		t.Fatalf("the next runner starts at target %d, want 2", c.Next)
	}
	finish(t, s, runnerB, p.ID, okFinish(2, "c"), t1)
	d = oneHook(t, s, runnerC, p.ID, t1)
	wantTargetEvent(t, d, p, 1, []int{1}, 1, 2)
	if d.Targets[0].Outcome != batch.OutcomeInterrupted {
		t.Errorf("the interrupted target: %+v", d.Targets[0])
	}
	deliverHook(t, s, d, runnerC, t1)
	d = oneHook(t, s, runnerC, p.ID, t1)
	wantHook(t, d, p, batch.JobPartial, "", 2, 1, t1)
}

// storeTargetEventsDrop: a dropped event takes the job's later events
// with it.
func storeTargetEventsDrop(t *testing.T, s batchdriver.Store) {
	p := targetHookSpec("alice", "drop", 2, t0, bothEvents)
	mustCreate(t, s, p)
	claimJob(t, s, runnerA, p.ID, t0)
	finish(t, s, runnerA, p.ID, okFinish(0, "a"), t0)
	d := oneHook(t, s, runnerA, p.ID, t0)
	finishHook(t, s, batchdriver.FinishWebhookParams{JobID: p.ID, Runner: runnerA, Attempt: d.Attempt, Cursor: d.Cursor, Drop: true, Now: nowAt(t0)})
	finish(t, s, runnerA, p.ID, okFinish(1, "b"), t0.Add(time.Second))
	wantNoHooks(t, s, "after the drop and the job's end", t0.Add(48*time.Hour))
	lim := suiteLimits
	lim.WebhooksPerCaller = 1
	mustCreate(t, s, withLimits(hookSpec("alice", "room", 1, t0.Add(2*time.Second)), lim))
}

// storeTargetEventsPendingCap: a job with per-target events counts as one
// pending event from its create until its last event is delivered, with
// no gap and never twice.
func storeTargetEventsPendingCap(t *testing.T, s batchdriver.Store) {
	lim := suiteLimits
	lim.WebhooksPerCaller = 2
	p := withLimits(targetHookSpec("alice", "cap", 2, t0, bothEvents), lim)
	mustCreate(t, s, p)
	other := withLimits(targetHookSpec("alice", "other", 1, t0.Add(time.Second), bothEvents), lim)
	mustCreate(t, s, other)
	refused := func(what string, now time.Time) {
		t.Helper()
		_, _, err := s.Create(t.Context(), withLimits(hookSpec("alice", "x", 1, now), lim))
		wantErr(t, what, err, batch.ErrWebhooksBusy)
	}
	refused("two jobs with per-target events", t0.Add(2*time.Second))
	claimJob(t, s, runnerA, p.ID, t0)
	finish(t, s, runnerA, p.ID, okFinish(0, "a"), t0)
	refused("an event due", t0.Add(3*time.Second))
	finish(t, s, runnerA, p.ID, okFinish(1, "b"), t0.Add(4*time.Second))
	refused("finished, its events pending", t0.Add(5*time.Second))
	d := oneHook(t, s, runnerA, p.ID, t0.Add(6*time.Second))
	deliverHook(t, s, d, runnerA, t0.Add(6*time.Second))
	refused("its completion pending", t0.Add(7*time.Second))
	d = oneHook(t, s, runnerA, p.ID, t0.Add(8*time.Second))
	deliverHook(t, s, d, runnerA, t0.Add(8*time.Second))
	mustCreate(t, s, withLimits(hookSpec("alice", "next", 1, t0.Add(9*time.Second)), lim))
	refused("two again", t0.Add(10*time.Second))
}

// storeTargetEventsMax: one event carries at most MaxEventTargets; the
// rest go in the next.
func storeTargetEventsMax(t *testing.T, s batchdriver.Store) {
	n := batchdriver.MaxEventTargets + 3
	p := targetHookSpec("alice", "max", n, t0, batchdriver.HookTargets)
	mustCreate(t, s, p)
	claimJob(t, s, runnerA, p.ID, t0)
	for i := range n {
		finish(t, s, runnerA, p.ID, okFinish(i, "x"), t0)
	}
	d := oneHook(t, s, runnerA, p.ID, t0)
	first := make([]int, batchdriver.MaxEventTargets)
	for i := range first {
		first[i] = i
	}
	wantTargetEvent(t, d, p, 0, nil, first...)
	deliverHook(t, s, d, runnerA, t0)
	d = oneHook(t, s, runnerA, p.ID, t0)
	wantTargetEvent(t, d, p, batchdriver.MaxEventTargets, nil, n-3, n-2, n-1)
}

// storeTargetEventsOutliveJob: the sweep of a finished job leaves its
// entry: an event whose targets are gone carries none, and the
// completion, a snapshot, still comes.
func storeTargetEventsOutliveJob(t *testing.T, s batchdriver.Store) {
	p := targetHookSpec("alice", "swept", 1, t0, bothEvents)
	mustCreate(t, s, p)
	claimJob(t, s, runnerA, p.ID, t0)
	finish(t, s, runnerA, p.ID, okFinish(0, "a"), t0)
	if n := sweep(t, s, t0.Add(2*time.Hour), time.Hour); n != 1 {
		t.Fatalf("swept %d jobs, want 1", n)
	}
	now := t0.Add(2 * time.Hour)
	d := oneHook(t, s, runnerA, p.ID, now)
	if d.Event != batchdriver.HookTargets || d.Cursor != 0 || len(d.Targets) != 0 {
		t.Fatalf("the event of a swept job's targets: %+v, want one with no target", d)
	}
	deliverHook(t, s, d, runnerA, now)
	d = oneHook(t, s, runnerA, p.ID, now)
	wantHook(t, d, p, batch.JobDone, "", 1, 0, t0)
}

// storeTargetEventsReleased: a reap of the runner that holds a job's
// event releases it at once, with its targets as they were.
func storeTargetEventsReleased(t *testing.T, s batchdriver.Store) {
	p := targetHookSpec("alice", "released", 2, t0, bothEvents)
	mustCreate(t, s, p)
	claimJob(t, s, runnerA, p.ID, t0)
	finish(t, s, runnerA, p.ID, okFinish(0, "a"), t0)
	d := oneHook(t, s, runnerB, p.ID, t0)
	finish(t, s, runnerA, p.ID, okFinish(1, "b"), t0)
	reap(t, s, batchdriver.ReapParams{Runner: runnerB, Now: nowAt(t0)})
	d2 := oneHook(t, s, runnerC, p.ID, t0)
	wantTargetEvent(t, d2, p, 0, nil, 0)
	if d2.Attempt != d.Attempt+1 {
		t.Errorf("released event: attempt %d, want %d", d2.Attempt, d.Attempt+1)
	}
}

// storeTargetEventsSurviveReopen: a job's event stream survives a store's
// reopening: the event out, its targets, and what finished meanwhile.
func storeTargetEventsSurviveReopen(t *testing.T, newStore func(t *testing.T) (s batchdriver.Store, reopen func() batchdriver.Store)) {
	s, reopen := newStore(t)
	p := targetHookSpec("alice", "reopen", 3, t0, bothEvents)
	mustCreate(t, s, p)
	claimJob(t, s, runnerA, p.ID, t0)
	finish(t, s, runnerA, p.ID, okFinish(0, "a"), t0)
	d := oneHook(t, s, runnerA, p.ID, t0)
	finish(t, s, runnerA, p.ID, okFinish(1, "b"), t0)
	s = reopen()
	deliverHook(t, s, d, runnerA, t0)
	d = oneHook(t, s, runnerA, p.ID, t0)
	wantTargetEvent(t, d, p, 1, nil, 1)
}

// storeTargetEventsSkipped: the targets a lenient submit skipped go in the
// per-target events at their idx, failed with their outcome, with the
// targets fetched around them; the completion counts them failed.
func storeTargetEventsSkipped(t *testing.T, s batchdriver.Store) {
	p := skipSpec(targetHookSpec("alice", "skipped", 5, t0, bothEvents), 1, 3)
	mustCreate(t, s, p)
	claimJob(t, s, runnerA, p.ID, t0)
	finish(t, s, runnerA, p.ID, okFinish(0, "a"), t0)
	d := oneHook(t, s, runnerA, p.ID, t0)
	wantTargetEvent(t, d, p, 0, nil, 0)
	deliverHook(t, s, d, runnerA, t0)
	finish(t, s, runnerA, p.ID, okFinish(2, "c"), t0)
	d = oneHook(t, s, runnerA, p.ID, t0)
	wantTargetEvent(t, d, p, 1, []int{1}, 1, 2)
	if d.Targets[0].Outcome != batch.OutcomeBlocked {
		t.Errorf("skipped target 1 in its event: %+v, want outcome %s", d.Targets[0], batch.OutcomeBlocked)
	}
	deliverHook(t, s, d, runnerA, t0)
	if st := finish(t, s, runnerA, p.ID, okFinish(4, "e"), t0); st.Status != batch.JobPartial {
		t.Fatalf("final step = %+v", st)
	}
	d = oneHook(t, s, runnerA, p.ID, t0)
	wantTargetEvent(t, d, p, 3, []int{3}, 3, 4)
	if d.Targets[0].Outcome != batch.OutcomeInvalid {
		t.Errorf("skipped target 3 in its event: %+v, want outcome %s", d.Targets[0], batch.OutcomeInvalid)
	}
	deliverHook(t, s, d, runnerA, t0)
	d = oneHook(t, s, runnerA, p.ID, t0)
	if d.Event != batchdriver.HookFinished || d.Cursor != 5 || len(d.Targets) != 0 {
		t.Fatalf("the completion: %+v", d)
	}
	wantHook(t, d, p, batch.JobPartial, "", 3, 2, t0)
	deliverHook(t, s, d, runnerA, t0)
	wantNoHooks(t, s, "after the completion", t0.Add(48*time.Hour))
}
