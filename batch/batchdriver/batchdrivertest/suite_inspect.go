package batchdrivertest

import (
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// inspectCases: the operator's store-wide reads ([batch.Inspector]). A
// store without it skips them.
var inspectCases = map[string]func(*testing.T, batchdriver.Store){
	"CallersByBytes":   storeInspectCallers,
	"FailuresInWindow": storeInspectFailures,
	"JobAnyCaller":     storeInspectJob,
	"JobsRecentAndRun": storeInspectJobs,
	"ReadsDoNotWrite":  storeInspectNoWrite,
	"RunnerHeartbeats": storeInspectRunners,
	"WebhookBacklog":   storeInspectWebhooks,
}

// requireInspector returns s as an Inspector, or skips.
func requireInspector(t *testing.T, s batchdriver.Store) batchdriver.Inspector {
	t.Helper()
	in, ok := s.(batchdriver.Inspector)
	if !ok {
		t.Skip("the store has no batch.Inspector")
	}
	return in
}

// allParams asks for everything, with the failure window open from the
// start of time.
func allParams(now time.Time) batchdriver.OverviewParams {
	return batchdriver.OverviewParams{Recent: 100, Running: 100, Callers: 100, Now: nowAt(now)}
}

func overview(t *testing.T, in batchdriver.Inspector, p batchdriver.OverviewParams) batchdriver.Overview {
	t.Helper()
	ov, err := in.Overview(t.Context(), p)
	if err != nil {
		t.Fatalf("Overview: %v", err)
	}
	return ov
}

func jobIDs(jobs []batchdriver.Job) []string {
	var ids []string
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	return ids
}

func storeInspectJobs(t *testing.T, s batchdriver.Store) {
	in := requireInspector(t, s)
	done := runJob(t, s, "erin", "done", 4, t0.Add(time.Hour))
	var ids []string
	for i, caller := range []string{"alice", "bob", "carol", "dave"} {
		p := jobSpec(caller, "j", 2, t0.Add(time.Duration(i)*time.Second))
		mustCreate(t, s, p)
		ids = append(ids, p.ID)
	}
	// alice's and bob's jobs run (oldest first); carol's and dave's wait.
	claimJob(t, s, runnerA, ids[0], t0.Add(time.Minute))
	claimJob(t, s, runnerB, ids[1], t0.Add(time.Minute))
	finish(t, s, runnerA, ids[0], okFinish(0, "abc"), t0.Add(time.Minute))

	ov := overview(t, in, allParams(t0.Add(time.Hour)))
	if st := mustStats(t, s); ov.Stats != st || st.Queued != 2 || st.Running != 2 {
		t.Errorf("Overview.Stats = %+v, Stats = %+v; want them equal, 2 queued and 2 running", ov.Stats, st)
	}
	if got, want := jobIDs(ov.Running), ids[:2]; !slices.Equal(got, want) {
		t.Errorf("Running = %v, want %v (oldest first)", got, want)
	}
	if got, want := jobIDs(ov.Recent), []string{ids[3], ids[2], ids[1], ids[0], done}; !slices.Equal(got, want) {
		t.Errorf("Recent = %v, want %v (newest first)", got, want)
	}
	for _, j := range ov.Recent {
		if j.ID == ids[0] && (j.TargetsDone != 1 || j.Runner != runnerA || j.Status != batch.JobRunning) {
			t.Errorf("a held job reads %+v; want running, held by %s, 1 target done", j, runnerA)
		}
		if j.ID == done && (j.Status != batch.JobDone || j.TargetsDone != 1 || j.Bytes != 4 || j.FinishedAt.IsZero()) {
			t.Errorf("a finished job reads %+v; want done, 1 target, 4 bytes, a finish time", j)
		}
	}

	p := allParams(t0.Add(time.Hour))
	p.Recent, p.Running = 2, 1
	ov = overview(t, in, p)
	if got, want := jobIDs(ov.Recent), []string{ids[3], ids[2]}; !slices.Equal(got, want) {
		t.Errorf("Recent with a limit of 2 = %v, want %v", got, want)
	}
	if got, want := jobIDs(ov.Running), ids[:1]; !slices.Equal(got, want) {
		t.Errorf("Running with a limit of 1 = %v, want %v", got, want)
	}
	ov = overview(t, in, batchdriver.OverviewParams{Now: nowAt(t0.Add(time.Hour))})
	if len(ov.Recent)+len(ov.Running)+len(ov.Callers) != 0 {
		t.Errorf("limits of 0 returned %d recent, %d running, %d callers; want none", len(ov.Recent), len(ov.Running), len(ov.Callers))
	}
}

func storeInspectFailures(t *testing.T, s batchdriver.Store) {
	in := requireInspector(t, s)
	fail := func(idx int, o batch.Outcome) batchdriver.TargetFinish {
		return batchdriver.TargetFinish{Idx: idx, Status: batch.TargetFailed, Outcome: o, Error: "boom"}
	}
	// An old job, finished two hours before the window's end: outside it.
	old := jobSpec("alice", "old", 1, t0)
	mustCreate(t, s, old)
	claimJob(t, s, runnerA, old.ID, t0)
	finish(t, s, runnerA, old.ID, fail(0, batch.OutcomeTimeout), t0)
	// A job finished inside the window: two failures and one ok.
	now := t0.Add(2 * time.Hour)
	in1 := jobSpec("bob", "in", 3, now.Add(-30*time.Minute))
	mustCreate(t, s, in1)
	claimJob(t, s, runnerA, in1.ID, now.Add(-30*time.Minute))
	finish(t, s, runnerA, in1.ID, fail(0, batch.OutcomeTimeout), now.Add(-20*time.Minute))
	finish(t, s, runnerA, in1.ID, okFinish(1, "x"), now.Add(-20*time.Minute))
	finish(t, s, runnerA, in1.ID, fail(2, batch.OutcomeUpstream5xx), now.Add(-10*time.Minute))
	// A job still held, one failure so far: counted.
	held := jobSpec("carol", "held", 2, now.Add(-time.Minute))
	mustCreate(t, s, held)
	claimJob(t, s, runnerB, held.ID, now.Add(-time.Minute))
	finish(t, s, runnerB, held.ID, fail(0, batch.OutcomeBlocked), now.Add(-time.Minute))

	p := allParams(now)
	p.FailureWindow = time.Hour
	ov := overview(t, in, p)
	want := map[batch.Outcome]int{batch.OutcomeTimeout: 1, batch.OutcomeUpstream5xx: 1, batch.OutcomeBlocked: 1}
	if !maps.Equal(ov.Failures, want) {
		t.Errorf("Failures in the last hour = %v, want %v", ov.Failures, want)
	}
	p.FailureWindow = 0
	want[batch.OutcomeTimeout] = 2
	if ov := overview(t, in, p); !maps.Equal(ov.Failures, want) {
		t.Errorf("Failures since the start = %v, want %v", ov.Failures, want)
	}
}

func storeInspectRunners(t *testing.T, s batchdriver.Store) {
	in := requireInspector(t, s)
	ctx := t.Context()
	if err := s.Heartbeat(ctx, batchdriver.HeartbeatParams{Runner: runnerB, Now: nowAt(t0)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Heartbeat(ctx, batchdriver.HeartbeatParams{Runner: runnerA, Now: nowAt(t0.Add(50 * time.Second))}); err != nil {
		t.Fatal(err)
	}
	ov := overview(t, in, allParams(t0.Add(time.Minute)))
	want := []batchdriver.RunnerBeat{
		{ID: runnerA, Heartbeat: t0.Add(50 * time.Second), Age: 10 * time.Second},
		{ID: runnerB, Heartbeat: t0, Age: time.Minute},
	}
	if len(ov.Runners) != len(want) {
		t.Fatalf("Runners = %+v, want %+v", ov.Runners, want)
	}
	for i, r := range ov.Runners {
		if r.ID != want[i].ID || !r.Heartbeat.Equal(want[i].Heartbeat) || r.Age != want[i].Age {
			t.Errorf("Runners[%d] = %+v, want %+v", i, r, want[i])
		}
	}
	// A reap that judges runnerB stale forgets it.
	if _, err := s.Reap(ctx, batchdriver.ReapParams{StaleAfter: 30 * time.Second, Reason: "restart", Now: nowAt(t0.Add(time.Minute))}); err != nil {
		t.Fatal(err)
	}
	ov = overview(t, in, allParams(t0.Add(time.Minute)))
	if len(ov.Runners) != 1 || ov.Runners[0].ID != runnerA {
		t.Errorf("after the reap Runners = %+v, want %s alone", ov.Runners, runnerA)
	}
}

func storeInspectWebhooks(t *testing.T, s batchdriver.Store) {
	in := requireInspector(t, s)
	if ov := overview(t, in, allParams(t0)); ov.Webhooks != (batchdriver.WebhookBacklog{}) {
		t.Errorf("empty outbox = %+v, want zero", ov.Webhooks)
	}
	var ids []string
	for i, caller := range []string{"alice", "bob", "carol"} {
		at := t0.Add(time.Duration(i) * time.Minute)
		p := hookSpec(caller, "h", 1, at)
		mustCreate(t, s, p)
		claimJob(t, s, runnerA, p.ID, at)
		finish(t, s, runnerA, p.ID, okFinish(0, "x"), at)
		ids = append(ids, p.ID)
	}
	now := t0.Add(10 * time.Minute)
	ov := overview(t, in, allParams(now))
	if want := (batchdriver.WebhookBacklog{Pending: 3, Due: 3, OldestDue: 10 * time.Minute}); ov.Webhooks != want {
		t.Errorf("three due events = %+v, want %+v", ov.Webhooks, want)
	}
	// One claim takes alice's (the oldest): two due, one claimed, and the
	// oldest due is bob's.
	if ds := claimHooks(t, s, runnerB, 1, now); len(ds) != 1 || ds[0].JobID != ids[0] {
		t.Fatalf("claimed %+v, want %s", ds, ids[0])
	}
	ov = overview(t, in, allParams(now))
	if want := (batchdriver.WebhookBacklog{Pending: 3, Due: 2, Claimed: 1, OldestDue: 9 * time.Minute}); ov.Webhooks != want {
		t.Errorf("after a claim = %+v, want %+v", ov.Webhooks, want)
	}
	// Delivered: gone from the outbox.
	finishHook(t, s, batchdriver.FinishWebhookParams{JobID: ids[0], Runner: runnerB, Attempt: 1, Now: nowAt(now)})
	ov = overview(t, in, allParams(now))
	if want := (batchdriver.WebhookBacklog{Pending: 2, Due: 2, OldestDue: 9 * time.Minute}); ov.Webhooks != want {
		t.Errorf("after the delivery = %+v, want %+v", ov.Webhooks, want)
	}
}

func storeInspectCallers(t *testing.T, s batchdriver.Store) {
	in := requireInspector(t, s)
	runJob(t, s, "alice", "a", 10, t0)
	runJob(t, s, "alice", "b", 5, t0.Add(time.Second))
	runJob(t, s, "restricted", "a", 30, t0)
	runJob(t, s, "bob", "a", 15, t0)
	// carol's job is held, 7 bytes stored so far: they count.
	held := jobSpec("carol", "held", 2, t0)
	mustCreate(t, s, held)
	claimJob(t, s, runnerB, held.ID, t0)
	finish(t, s, runnerB, held.ID, batchdriver.TargetFinish{Idx: 0, Status: batch.TargetDone, Outcome: batch.OutcomeOK, Result: []byte("1234567")}, t0)
	mustCreate(t, s, jobSpec("dave", "queued", 1, t0)) // no bytes: absent

	ov := overview(t, in, allParams(t0.Add(time.Minute)))
	type share struct {
		name, class string
		restricted  bool
		bytes       int64
	}
	var got []share
	for _, c := range ov.Callers {
		got = append(got, share{c.Caller.Name, c.Caller.Class, c.Caller.Restricted, c.Bytes})
	}
	want := []share{
		{"restricted", "class-restricted", true, 30},
		{"alice", "class-alice", false, 15},
		{"bob", "class-bob", false, 15},
		{"carol", "class-carol", false, 7},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Callers = %+v\nwant %+v", got, want)
	}
	var sum int64
	for _, c := range ov.Callers {
		sum += c.Bytes
	}
	if ov.Stats.Bytes != sum {
		t.Errorf("the callers' bytes sum to %d, the store total is %d", sum, ov.Stats.Bytes)
	}
	p := allParams(t0.Add(time.Minute))
	p.Callers = 2
	if ov := overview(t, in, p); len(ov.Callers) != 2 || ov.Callers[1].Caller.Name != "alice" {
		t.Errorf("Callers with a limit of 2 = %+v, want restricted and alice", ov.Callers)
	}
}

func storeInspectJob(t *testing.T, s batchdriver.Store) {
	in := requireInspector(t, s)
	p := jobSpec("alice", "j", 3, t0)
	mustCreate(t, s, p)
	claimJob(t, s, runnerA, p.ID, t0)
	finish(t, s, runnerA, p.ID, okFinish(0, "body"), t0)
	finish(t, s, runnerA, p.ID, failFinish(1, "nope"), t0)
	j, ts, err := in.InspectJob(t.Context(), p.ID)
	if err != nil {
		t.Fatalf("InspectJob: %v", err)
	}
	if j.ID != p.ID || j.Caller.Name != "alice" || j.Status != batch.JobRunning || j.TargetsDone != 2 {
		t.Errorf("InspectJob job = %+v; want alice's, running, 2 done", j)
	}
	wantStatuses(t, "InspectJob", ts, batch.TargetDone, batch.TargetFailed, batch.TargetRunning)
	for _, tr := range ts {
		if tr.Result != nil {
			t.Errorf("target %d carries a result: InspectJob reads no result body", tr.Idx)
		}
		if tr.Target.URL != p.Targets[tr.Idx].URL {
			t.Errorf("target %d URL = %q, want %q", tr.Idx, tr.Target.URL, p.Targets[tr.Idx].URL)
		}
	}
	if ts[1].Outcome != batch.OutcomeBlocked || ts[0].Outcome != batch.OutcomeOK {
		t.Errorf("outcomes %q, %q; want ok, blocked", ts[0].Outcome, ts[1].Outcome)
	}
	if _, _, err := in.InspectJob(t.Context(), "no-such-job"); !errors.Is(err, batch.ErrNotFound) {
		t.Errorf("InspectJob of an unknown id: %v, want ErrNotFound", err)
	}
}

func storeInspectNoWrite(t *testing.T, s batchdriver.Store) {
	in := requireInspector(t, s)
	id := runJob(t, s, "alice", "a", 3, t0)
	before, _ := getJob(t, s, "alice", id)
	later := t0.Add(48 * time.Hour)
	overview(t, in, allParams(later))
	if _, _, err := in.InspectJob(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	after, _ := getJob(t, s, "alice", id)
	if !after.Lease.Equal(before.Lease) {
		t.Errorf("the console's reads moved the lease from %v to %v", before.Lease, after.Lease)
	}
	// Nor do they sweep: the job is still there, long expired.
	if n, err := s.Sweep(t.Context(), batchdriver.SweepParams{TTL: 24 * time.Hour, Now: nowAt(later)}); err != nil || n != 1 {
		t.Errorf("Sweep after the reads = %d, %v; want the one expired job", n, err)
	}
}
