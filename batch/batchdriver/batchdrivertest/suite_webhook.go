package batchdrivertest

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// webhookCases: the outbox. A job with a webhook gets exactly one event,
// written in the step that makes it finished and released; events are
// claimed by one runner at a time under a lease, and each claim's outcome
// is fenced by it.
var webhookCases = map[string]func(*testing.T, batchdriver.Store){
	"WebhookClaimedOnce":         storeWebhookClaimedOnce,
	"WebhookFinishFenced":        storeWebhookFinishFenced,
	"WebhookOnCancel":            storeWebhookOnCancel,
	"WebhookOnReap":              storeWebhookOnReap,
	"WebhookOutlivesItsJob":      storeWebhookOutlivesJob,
	"WebhookReapReleasesClaims":  storeWebhookReapReleases,
	"WebhookWrittenWithFinalJob": storeWebhookWrittenWithFinal,
}

// hookLease is the claim lease of the outbox cases.
const hookLease = time.Minute

// hookSpec is jobSpec with a webhook.
func hookSpec(caller, key string, n int, now time.Time) batchdriver.CreateParams {
	p := jobSpec(caller, key, n, now)
	p.WebhookURL = "https://hooks.example/" + caller + "/" + key + "?token=secret"
	return p
}

func claimHooks(t *testing.T, s batchdriver.Store, runner string, limit int, now time.Time) []batchdriver.WebhookDelivery {
	t.Helper()
	ds, err := s.ClaimWebhooks(t.Context(), batchdriver.ClaimWebhooksParams{Runner: runner, Limit: limit, Lease: hookLease, Now: nowAt(now)})
	if err != nil {
		t.Fatalf("ClaimWebhooks(%s): %v", runner, err)
	}
	return ds
}

// wantNoHooks checks that no event is due at now.
func wantNoHooks(t *testing.T, s batchdriver.Store, what string, now time.Time) {
	t.Helper()
	if ds := claimHooks(t, s, runnerB, 100, now); len(ds) != 0 {
		t.Fatalf("%s: claimed %d events, want none: %+v", what, len(ds), ds)
	}
}

// oneHook claims at now and checks that exactly the event of job id is due.
func oneHook(t *testing.T, s batchdriver.Store, runner, id string, now time.Time) batchdriver.WebhookDelivery {
	t.Helper()
	ds := claimHooks(t, s, runner, 100, now)
	if len(ds) != 1 || ds[0].JobID != id {
		t.Fatalf("claimed %+v, want the event of %s alone", ds, id)
	}
	return ds[0]
}

func finishHook(t *testing.T, s batchdriver.Store, p batchdriver.FinishWebhookParams) {
	t.Helper()
	if err := s.FinishWebhook(t.Context(), p); err != nil {
		t.Fatalf("FinishWebhook(%+v): %v", p, err)
	}
}

// wantHook checks an event's snapshot of its job.
func wantHook(t *testing.T, d batchdriver.WebhookDelivery, p batchdriver.CreateParams, status batch.JobStatus, errText string, ok, failed int, finished time.Time) {
	t.Helper()
	if d.JobID != p.ID || d.Caller != p.Caller.Name || d.URL != p.WebhookURL || d.Status != status || d.Error != errText ||
		d.TargetsTotal != len(p.Targets) || d.TargetsOK != ok || d.TargetsFailed != failed ||
		!d.CreatedAt.Equal(*p.Now) || !d.FinishedAt.Equal(finished) {
		t.Fatalf("event = %+v\nwant job %s %s (error %q), %d ok, %d failed of %d, created %v, finished %v",
			d, p.ID, status, errText, ok, failed, len(p.Targets), *p.Now, finished)
	}
}

// storeWebhookWrittenWithFinal: no event while the job runs; one, with the
// job's final status and counts, from the write that stores its last
// target; none for a job without a webhook. The webhook URL round-trips.
func storeWebhookWrittenWithFinal(t *testing.T, s batchdriver.Store) {
	p := hookSpec("alice", "a", 2, t0)
	mustCreate(t, s, p)
	plain := jobSpec("bob", "b", 1, t0.Add(time.Second))
	mustCreate(t, s, plain)
	if j, _ := getJob(t, s, "alice", p.ID); j.WebhookURL != p.WebhookURL {
		t.Fatalf("stored webhook %q, want %q", j.WebhookURL, p.WebhookURL)
	}
	if j, _ := getJob(t, s, "bob", plain.ID); j.WebhookURL != "" {
		t.Fatalf("a job without a webhook has %q", j.WebhookURL)
	}
	wantNoHooks(t, s, "queued", t0)
	c := claimJob(t, s, runnerA, p.ID, t0)
	if c.Job.WebhookURL != p.WebhookURL {
		t.Errorf("claimed job's webhook = %q", c.Job.WebhookURL)
	}
	t1 := t0.Add(time.Minute)
	finish(t, s, runnerA, p.ID, okFinish(0, "a"), t1)
	wantNoHooks(t, s, "running", t1)
	t2 := t0.Add(2 * time.Minute)
	if st := finish(t, s, runnerA, p.ID, failFinish(1, "nope"), t2); st.Status != batch.JobPartial {
		t.Fatalf("final step = %+v", st)
	}
	claimJob(t, s, runnerA, plain.ID, t2)
	finish(t, s, runnerA, plain.ID, okFinish(0, "b"), t2)

	t3 := t2.Add(5 * time.Second)
	d := oneHook(t, s, runnerA, p.ID, t3)
	wantHook(t, d, p, batch.JobPartial, "", 1, 1, t2)
	if d.Attempt != 1 || d.Age != 5*time.Second || !d.Lease.Equal(t2) {
		t.Errorf("first claim: attempt %d, age %s, lease %v; want 1, 5s, %v", d.Attempt, d.Age, d.Lease, t2)
	}
	finishHook(t, s, batchdriver.FinishWebhookParams{JobID: p.ID, Runner: runnerA, Attempt: 1, Now: nowAt(t3)})
	wantNoHooks(t, s, "after the delivery", t3.Add(24*time.Hour))
	// A late repeat of the final write is refused, and makes no second event.
	_, err := s.FinishTarget(t.Context(), batchdriver.FinishParams{JobID: p.ID, Runner: runnerA, Target: failFinish(1, "nope"), Now: nowAt(t3)})
	wantErr(t, "repeat of the final write", err, batchdriver.ErrNotHeld)
	wantNoHooks(t, s, "after a repeated final write", t3.Add(24*time.Hour))
}

// storeWebhookOnCancel: a queued job's cancel writes its event; a running
// job's cancel does not, the write of its target in flight does.
func storeWebhookOnCancel(t *testing.T, s batchdriver.Store) {
	queued := hookSpec("alice", "q", 2, t0)
	mustCreate(t, s, queued)
	t1 := t0.Add(time.Minute)
	cancel(t, s, "alice", queued.ID, t1)
	d := oneHook(t, s, runnerA, queued.ID, t1)
	wantHook(t, d, queued, batch.JobCancelled, "", 0, 0, t1)
	finishHook(t, s, batchdriver.FinishWebhookParams{JobID: queued.ID, Runner: runnerA, Attempt: 1, Now: nowAt(t1)})

	running := hookSpec("bob", "r", 3, t1)
	mustCreate(t, s, running)
	claimJob(t, s, runnerA, running.ID, t1)
	t2 := t1.Add(time.Minute)
	cancel(t, s, "bob", running.ID, t2)
	wantNoHooks(t, s, "cancelled with a target in flight", t2)
	t3 := t2.Add(time.Minute)
	finish(t, s, runnerA, running.ID, okFinish(0, "r"), t3)
	d = oneHook(t, s, runnerA, running.ID, t3)
	wantHook(t, d, running, batch.JobCancelled, "", 1, 0, t2)
	finishHook(t, s, batchdriver.FinishWebhookParams{JobID: running.ID, Runner: runnerA, Attempt: 1, Now: nowAt(t3)})
	err := s.Cancel(t.Context(), batchdriver.CancelParams{Caller: "bob", JobID: running.ID, Now: nowAt(t3)})
	wantErr(t, "cancel of the cancelled job", err, batch.ErrFinished)
	wantNoHooks(t, s, "after a refused cancel", t3)
}

// storeWebhookOnReap: a reap writes the events of the jobs it finishes and
// releases: a held job, a queued one (AllLive) and a cancelled one whose
// target was in flight.
func storeWebhookOnReap(t *testing.T, s batchdriver.Store) {
	held := hookSpec("alice", "held", 3, t0)
	mustCreate(t, s, held)
	claimJob(t, s, runnerA, held.ID, t0)
	finish(t, s, runnerA, held.ID, okFinish(0, "kept"), t0)
	cancelled := hookSpec("bob", "cancelled", 2, t0.Add(time.Second))
	mustCreate(t, s, cancelled)
	claimJob(t, s, runnerA, cancelled.ID, t0)
	t1 := t0.Add(time.Minute)
	cancel(t, s, "bob", cancelled.ID, t1)
	queued := hookSpec("carol", "queued", 1, t0.Add(2*time.Second))
	mustCreate(t, s, queued)

	t2 := t1.Add(time.Minute)
	if n := reap(t, s, batchdriver.ReapParams{AllLive: true, Now: nowAt(t2)}); n != 2 {
		t.Fatalf("reaped %d live jobs, want 2", n)
	}
	ds := claimHooks(t, s, runnerA, 100, t2)
	byJob := map[string]batchdriver.WebhookDelivery{}
	for _, d := range ds {
		byJob[d.JobID] = d
	}
	if len(ds) != 3 || len(byJob) != 3 {
		t.Fatalf("claimed %+v, want the three reaped jobs' events", ds)
	}
	wantHook(t, byJob[held.ID], held, batch.JobFailed, "restart", 1, 1, t2)
	wantHook(t, byJob[cancelled.ID], cancelled, batch.JobCancelled, "", 0, 1, t1)
	wantHook(t, byJob[queued.ID], queued, batch.JobFailed, "restart", 0, 0, t2)
}

// storeWebhookClaimedOnce: racing claims never return one event twice;
// a claimed event is not due again until its lease has passed.
func storeWebhookClaimedOnce(t *testing.T, s batchdriver.Store) {
	const n = 6
	ids := map[string]bool{}
	for i := range n {
		p := hookSpec(fmt.Sprintf("c%d", i), "x", 1, t0.Add(time.Duration(i)*time.Second))
		mustCreate(t, s, p)
		cancel(t, s, p.Caller.Name, p.ID, t0)
		ids[p.ID] = true
	}
	now := t0.Add(time.Minute)
	claimed := map[string]int{}
	for _, d := range raceClaims(t, s, 2*n, func(i int) batchdriver.ClaimWebhooksParams {
		return batchdriver.ClaimWebhooksParams{Runner: fmt.Sprintf("r%d", i), Limit: 1 + i%2, Lease: hookLease, Now: nowAt(now)}
	}) {
		claimed[d.JobID]++
	}
	if t.Failed() {
		return
	}
	for id, c := range claimed {
		if c != 1 || !ids[id] {
			t.Errorf("event %s claimed %d times", id, c)
		}
	}
	if len(claimed) != n {
		t.Errorf("%d racing claims took %d of %d events: %v", 2*n, len(claimed), n, slices.Sorted(maps.Keys(claimed)))
	}
	wantNoHooks(t, s, "within the lease", now.Add(hookLease-time.Second))
	again := claimHooks(t, s, runnerA, 100, now.Add(hookLease))
	if len(again) != n {
		t.Fatalf("after the lease %d events were due again, want %d", len(again), n)
	}
	for _, d := range again {
		if d.Attempt != 2 {
			t.Errorf("event %s: attempt %d on its second claim", d.JobID, d.Attempt)
		}
	}
	// Oldest due first, and the limit holds.
	later := now.Add(hookLease)
	if ds := claimHooks(t, s, runnerA, 2, later.Add(hookLease)); len(ds) != 2 {
		t.Fatalf("a claim of 2 returned %d events", len(ds))
	}
}

// storeWebhookFinishFenced: only the runner holding the current claim can
// end it; a retry is due again after its delay; a delivered event is gone.
func storeWebhookFinishFenced(t *testing.T, s batchdriver.Store) {
	p := hookSpec("alice", "f", 1, t0)
	mustCreate(t, s, p)
	cancel(t, s, "alice", p.ID, t0)
	d := oneHook(t, s, runnerA, p.ID, t0)
	fenced := func(what string, fp batchdriver.FinishWebhookParams) {
		t.Helper()
		wantErr(t, what, s.FinishWebhook(t.Context(), fp), batchdriver.ErrNotHeld)
	}
	fenced("another runner's finish", batchdriver.FinishWebhookParams{JobID: p.ID, Runner: runnerB, Attempt: d.Attempt, Now: nowAt(t0)})
	fenced("a finish of another attempt", batchdriver.FinishWebhookParams{JobID: p.ID, Runner: runnerA, Attempt: d.Attempt + 1, Now: nowAt(t0)})
	fenced("a finish of an unknown job", batchdriver.FinishWebhookParams{JobID: "nope", Runner: runnerA, Attempt: 1, Now: nowAt(t0)})

	// The lease passes: runner B takes it over, and A's late outcome is refused.
	t1 := t0.Add(hookLease)
	d2 := oneHook(t, s, runnerB, p.ID, t1)
	if d2.Attempt != 2 {
		t.Fatalf("taken-over claim: attempt %d, want 2", d2.Attempt)
	}
	fenced("the finish of a claim taken over", batchdriver.FinishWebhookParams{JobID: p.ID, Runner: runnerA, Attempt: 1, Now: nowAt(t1)})

	// B's attempt failed: due again in an hour, not before.
	finishHook(t, s, batchdriver.FinishWebhookParams{JobID: p.ID, Runner: runnerB, Attempt: 2, Retry: true, RetryIn: time.Hour, Now: nowAt(t1)})
	fenced("a second outcome of one claim", batchdriver.FinishWebhookParams{JobID: p.ID, Runner: runnerB, Attempt: 2, Now: nowAt(t1)})
	wantNoHooks(t, s, "before the retry", t1.Add(time.Hour-time.Second))
	d3 := oneHook(t, s, runnerA, p.ID, t1.Add(time.Hour))
	if d3.Attempt != 3 || d3.Age != time.Hour+hookLease {
		t.Fatalf("retry claim: attempt %d, age %s; want 3, %s", d3.Attempt, d3.Age, time.Hour+hookLease)
	}
	finishHook(t, s, batchdriver.FinishWebhookParams{JobID: p.ID, Runner: runnerA, Attempt: 3, Now: nowAt(t1.Add(time.Hour))})
	wantNoHooks(t, s, "after the delivery", t1.Add(48*time.Hour))
	fenced("a finish after the delivery", batchdriver.FinishWebhookParams{JobID: p.ID, Runner: runnerA, Attempt: 3, Now: nowAt(t1)})
}

// storeWebhookReapReleases: a reap of a runner releases its claims, due at
// once: the restart of a node does not wait for their leases.
func storeWebhookReapReleases(t *testing.T, s batchdriver.Store) {
	a := hookSpec("alice", "r", 1, t0)
	b := hookSpec("bob", "r", 1, t0.Add(time.Second))
	for _, p := range []batchdriver.CreateParams{a, b} {
		mustCreate(t, s, p)
		cancel(t, s, p.Caller.Name, p.ID, t0)
	}
	oneHookOf := func(runner string, p batchdriver.CreateParams) {
		t.Helper()
		ds := claimHooks(t, s, runner, 1, t0)
		if len(ds) != 1 || ds[0].JobID != p.ID {
			t.Fatalf("%s claimed %+v, want %s", runner, ds, p.ID)
		}
	}
	oneHookOf(runnerA, a)
	oneHookOf(runnerB, b)
	reap(t, s, batchdriver.ReapParams{Runner: runnerA, Now: nowAt(t0)})
	d := oneHook(t, s, "runner-c", a.ID, t0) // b stays with runner B
	if d.Attempt != 2 {
		t.Errorf("released claim: attempt %d, want 2", d.Attempt)
	}
	reap(t, s, batchdriver.ReapParams{AllLive: true, Now: nowAt(t0)})
	if ds := claimHooks(t, s, runnerA, 100, t0); len(ds) != 2 {
		t.Fatalf("after an AllLive reap %d events were due, want both", len(ds))
	}
}

// storeWebhookOutlivesJob: the sweep of a finished job leaves its pending
// event.
func storeWebhookOutlivesJob(t *testing.T, s batchdriver.Store) {
	p := hookSpec("alice", "swept", 1, t0)
	mustCreate(t, s, p)
	cancel(t, s, "alice", p.ID, t0)
	if n := sweep(t, s, t0.Add(2*time.Hour), time.Hour); n != 1 {
		t.Fatalf("swept %d jobs, want 1", n)
	}
	d := oneHook(t, s, runnerA, p.ID, t0.Add(time.Hour))
	wantHook(t, d, p, batch.JobCancelled, "", 0, 0, t0)
}

// storeWebhookSurvivesReopen: pending webhook events survive a store's
// reopening, with their claims.
func storeWebhookSurvivesReopen(t *testing.T, newStore func(t *testing.T) (s batchdriver.Store, reopen func() batchdriver.Store)) {
	s, reopen := newStore(t)
	claimed := hookSpec("alice", "claimed", 1, t0)
	due := hookSpec("bob", "due", 1, t0.Add(time.Second))
	for _, p := range []batchdriver.CreateParams{claimed, due} {
		mustCreate(t, s, p)
		cancel(t, s, p.Caller.Name, p.ID, t0)
	}
	if ds := claimHooks(t, s, runnerA, 1, t0); len(ds) != 1 || ds[0].JobID != claimed.ID {
		t.Fatalf("claimed %+v", ds)
	}
	s = reopen()
	d := oneHook(t, s, runnerB, due.ID, t0)
	wantHook(t, d, due, batch.JobCancelled, "", 0, 0, t0)
	finishHook(t, s, batchdriver.FinishWebhookParams{JobID: due.ID, Runner: runnerB, Attempt: 1, Now: nowAt(t0)})
	d = oneHook(t, s, runnerB, claimed.ID, t0.Add(hookLease))
	if d.Attempt != 2 {
		t.Errorf("the claim before the reopen was lost: attempt %d", d.Attempt)
	}
}

// raceClaims runs n claims at once, the i-th with params(i), and returns
// every event they took; a claim that fails fails t.
func raceClaims(t *testing.T, s batchdriver.Store, n int, params func(i int) batchdriver.ClaimWebhooksParams) []batchdriver.WebhookDelivery {
	t.Helper()
	var mu sync.Mutex
	var all []batchdriver.WebhookDelivery
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ds, err := s.ClaimWebhooks(t.Context(), params(i))
			if err != nil {
				t.Errorf("ClaimWebhooks: %v", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			all = append(all, ds...)
		})
	}
	wg.Wait()
	return all
}
