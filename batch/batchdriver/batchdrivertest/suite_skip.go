package batchdrivertest

import (
	"slices"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// skipCases: the targets a lenient submit skipped (CreateParams.Skipped)
// are stored finished at create, counted, kept at their idx, and never
// started by the drain, whatever ends the job.
var skipCases = map[string]func(*testing.T, batchdriver.Store){
	"SkippedCancelAndSweep":   storeSkippedCancelSweep,
	"SkippedEveryTarget":      storeSkippedEvery,
	"SkippedExpire":           storeSkippedExpire,
	"SkippedFinishedAtCreate": storeSkippedAtCreate,
	"SkippedHandBack":         storeSkippedHandBack,
	"SkippedInWebhook":        storeSkippedWebhook,
}

// Errors of skipped targets, as the runner stores them.
const (
	skipBlocked = "blocked: port 8080 not allowed"
	skipInvalid = "invalid target: empty url"
)

// skipSpec is jobSpec with the targets at idx skipped, alternately
// blocked (with a hint) and invalid.
func skipSpec(p batchdriver.CreateParams, idx ...int) batchdriver.CreateParams {
	for i, n := range idx {
		f := batchdriver.TargetFinish{Idx: n, Status: batch.TargetFailed, Outcome: batch.OutcomeBlocked, Error: skipBlocked, Hint: "local"}
		if i%2 == 1 {
			f = batchdriver.TargetFinish{Idx: n, Status: batch.TargetFailed, Outcome: batch.OutcomeInvalid, Error: skipInvalid}
		}
		p.Skipped = append(p.Skipped, f)
	}
	return p
}

// skippedBytes are the error bytes of p's skipped targets.
func skippedBytes(p batchdriver.CreateParams) int64 {
	var n int64
	for _, f := range p.Skipped {
		n += int64(len(f.Error))
	}
	return n
}

// wantSkipped checks p's skipped targets among ts: finished as given.
func wantSkipped(t *testing.T, what string, ts []batchdriver.TargetRecord, p batchdriver.CreateParams) {
	t.Helper()
	for _, f := range p.Skipped {
		if f.Idx >= len(ts) {
			t.Fatalf("%s: %d targets, want target %d", what, len(ts), f.Idx)
		}
		got := ts[f.Idx]
		if got.Idx != f.Idx || got.Status != batch.TargetFailed || got.Outcome != f.Outcome || got.Error != f.Error ||
			got.Hint != f.Hint || got.Target.URL != p.Targets[f.Idx].URL || got.Result != nil {
			t.Errorf("%s: skipped target %d = %+v, want failed %s %q hint %q", what, f.Idx, got, f.Outcome, f.Error, f.Hint)
		}
	}
}

// storeSkippedAtCreate: the skipped targets are finished from the create
// on, counted done with their error bytes, listed in Job.Skipped, and the
// drain takes the other targets in idx order; a reuse returns the job.
func storeSkippedAtCreate(t *testing.T, s batchdriver.Store) {
	p := skipSpec(jobSpec("alice", "s", 6, t0), 0, 2, 3)
	want := skippedBytes(p)
	j := mustCreate(t, s, p)
	if j.TargetsDone != 3 || j.Bytes != want || !slices.Equal(j.Skipped, []int{0, 2, 3}) || j.Status != batch.JobQueued {
		t.Fatalf("Create's job = %+v, want queued, 3 done, %d bytes, skipped [0 2 3]", j, want)
	}
	j, ts := getJob(t, s, "alice", p.ID)
	if j.TargetsDone != 3 || j.Bytes != want || !slices.Equal(j.Skipped, []int{0, 2, 3}) {
		t.Fatalf("Get's job = %+v, want 3 done, %d bytes, skipped [0 2 3]", j, want)
	}
	wantStatuses(t, "after create", ts, batch.TargetFailed, batch.TargetPending, batch.TargetFailed, batch.TargetFailed,
		batch.TargetPending, batch.TargetPending)
	wantSkipped(t, "after create", ts, p)
	if st := mustStats(t, s); st.Bytes != want || st.Queued != 1 {
		t.Errorf("Stats = %+v, want 1 queued, %d bytes", st, want)
	}
	if j, reused, err := s.Create(t.Context(), p); err != nil || !reused || j.ID != p.ID || !slices.Equal(j.Skipped, []int{0, 2, 3}) {
		t.Fatalf("Create again = %+v, %v, %v; want the job reused", j, reused, err)
	}

	c := claimJob(t, s, runnerA, p.ID, t0)
	if c.Next != 1 || !slices.Equal(c.Job.Skipped, []int{0, 2, 3}) {
		t.Fatalf("Claim = next %d, skipped %v; want next 1, skipped [0 2 3]", c.Next, c.Job.Skipped)
	}
	wantStatuses(t, "claimed", c.Targets, batch.TargetFailed, batch.TargetRunning, batch.TargetFailed, batch.TargetFailed,
		batch.TargetPending, batch.TargetPending)
	if j, _ := getJob(t, s, "alice", p.ID); j.TargetsDone != 3 || j.Bytes != want {
		t.Errorf("held job = %d done, %d bytes; want 3, %d", j.TargetsDone, j.Bytes, want)
	}
	if st := finish(t, s, runnerA, p.ID, okFinish(1, "a"), t0); st.Next != 4 || st.Status != batch.JobRunning {
		t.Fatalf("finishing target 1 = %+v, want running with target 4 next", st)
	}
	if st := finish(t, s, runnerA, p.ID, okFinish(4, "b"), t0); st.Next != 5 {
		t.Fatalf("finishing target 4 = %+v, want target 5 next", st)
	}
	// A repeat of an applied write gets the current step.
	if st := finish(t, s, runnerA, p.ID, okFinish(4, "b"), t0); st.Next != 5 || st.Status != batch.JobRunning {
		t.Fatalf("repeating target 4 = %+v, want running with target 5 next", st)
	}
	if st := finish(t, s, runnerA, p.ID, okFinish(5, "c"), t0); st.Next != -1 || st.Status != batch.JobPartial {
		t.Fatalf("finishing target 5 = %+v, want partial with no next", st)
	}
	j, ts = getJob(t, s, "alice", p.ID)
	want += 3 * int64(len(`{"content":"a"}`))
	if j.Status != batch.JobPartial || j.TargetsDone != 6 || j.Bytes != want || j.Runner != "" {
		t.Fatalf("finished job = %+v, want partial, 6 done, %d bytes, released", j, want)
	}
	wantStatuses(t, "finished", ts, batch.TargetFailed, batch.TargetDone, batch.TargetFailed, batch.TargetFailed,
		batch.TargetDone, batch.TargetDone)
	wantSkipped(t, "finished", ts, p)
	if st := mustStats(t, s); st.Bytes != want || st.Queued != 0 || st.Running != 0 {
		t.Errorf("Stats = %+v, want nothing live, %d bytes", st, want)
	}
	_, tr, err := s.GetTarget(t.Context(), batchdriver.GetTargetParams{Caller: "alice", JobID: p.ID, Idx: 3})
	if err != nil {
		t.Fatal(err)
	}
	wantSkipped(t, "GetTarget", []batchdriver.TargetRecord{3: tr}, batchdriver.CreateParams{Targets: p.Targets, Skipped: p.Skipped[2:]})
}

// storeSkippedEvery: a create that skips every target is refused with
// ErrNoTargets, and stores nothing.
func storeSkippedEvery(t *testing.T, s batchdriver.Store) {
	p := skipSpec(jobSpec("alice", "all", 2, t0), 0, 1)
	_, _, err := s.Create(t.Context(), p)
	wantErr(t, "Create skipping every target", err, batch.ErrNoTargets)
	if jobs, err := s.List(t.Context(), batchdriver.ListParams{Caller: "alice", Limit: 10}); err != nil || len(jobs) != 0 {
		t.Fatalf("List = %v, %v; want no job", jobs, err)
	}
	if st := mustStats(t, s); st != (batchdriver.Stats{}) {
		t.Errorf("Stats = %+v, want zero", st)
	}
}

// storeSkippedExpire: a deadline ends the pending targets as expired and
// leaves the skipped ones as they were, for a queued job (Expire) and a
// running one (FinishParams.Expire).
func storeSkippedExpire(t *testing.T, s batchdriver.Store) {
	q := skipSpec(deadlineSpec("alice", "queued", 4, t0, time.Minute), 1, 2)
	mustCreate(t, s, q)
	ended := expire(t, s, t0.Add(time.Minute))
	if len(ended) != 1 || ended[0].JobID != q.ID || ended[0].Targets != 2 || ended[0].Status != batch.JobFailed {
		t.Fatalf("Expire = %+v, want %s failed with 2 targets expired", ended, q.ID)
	}
	j, ts := getJob(t, s, "alice", q.ID)
	wantSkipped(t, "queued job expired", ts, q)
	for _, i := range []int{0, 3} {
		wantExpired(t, ts[i:i+1], 0)
	}
	want := skippedBytes(q) + 2*int64(len(batchdriver.DeadlineReason))
	if j.TargetsDone != 4 || j.Bytes != want {
		t.Errorf("queued job expired = %+v, want 4 done, %d bytes", j, want)
	}

	r := skipSpec(deadlineSpec("bob", "running", 5, t0, time.Minute), 2, 4)
	mustCreate(t, s, r)
	claimJob(t, s, runnerA, r.ID, t0)
	st, err := s.FinishTarget(t.Context(), batchdriver.FinishParams{JobID: r.ID, Runner: runnerA, Target: okFinish(0, "a"),
		Expire: true, Now: nowAt(t0.Add(time.Minute))})
	if err != nil || st.Next != -1 || st.Status != batch.JobPartial {
		t.Fatalf("FinishTarget past the deadline = %+v, %v; want partial with no next", st, err)
	}
	j, ts = getJob(t, s, "bob", r.ID)
	wantSkipped(t, "running job expired", ts, r)
	for _, i := range []int{1, 3} {
		wantExpired(t, ts[i:i+1], 0)
	}
	want = skippedBytes(r) + 2*int64(len(batchdriver.DeadlineReason)) + int64(len(`{"content":"a"}`))
	if j.TargetsDone != 5 || j.Bytes != want || j.Error != batchdriver.DeadlineReason {
		t.Errorf("running job expired = %+v, want 5 done, %d bytes, error deadline", j, want)
	}
	want += skippedBytes(q) + 2*int64(len(batchdriver.DeadlineReason))
	if st := mustStats(t, s); st.Bytes != want {
		t.Errorf("Stats bytes = %d, want %d", st.Bytes, want)
	}
}

// storeSkippedHandBack: a job handed back whose targets left are all
// skipped ends, as its last write would have ended it; one with a
// pending target left is claimed again at that target.
func storeSkippedHandBack(t *testing.T, s batchdriver.Store) {
	p := skipSpec(jobSpec("alice", "end", 3, t0), 1, 2)
	mustCreate(t, s, p)
	claimJob(t, s, runnerA, p.ID, t0)
	if n := reap(t, s, batchdriver.ReapParams{Runner: runnerA, HandBack: true, Reason: reasonInterrupted, Now: nowAt(t0)}); n != 1 {
		t.Fatalf("Reap = %d, want 1", n)
	}
	j, ts := getJob(t, s, "alice", p.ID)
	if j.Status != batch.JobFailed || j.Runner != "" || j.TargetsDone != 3 || j.FinishedAt.IsZero() {
		t.Fatalf("job handed back with only skipped targets left = %+v, want failed, released, 3 done", j)
	}
	wantSkipped(t, "ended at the hand-back", ts, p)

	q := skipSpec(jobSpec("bob", "on", 5, t0.Add(time.Second)), 1, 3)
	mustCreate(t, s, q)
	claimJob(t, s, runnerA, q.ID, t0)
	if st := finish(t, s, runnerA, q.ID, okFinish(0, "a"), t0); st.Next != 2 {
		t.Fatalf("finishing target 0 = %+v, want target 2 next", st)
	}
	reap(t, s, batchdriver.ReapParams{Runner: runnerA, HandBack: true, Reason: reasonInterrupted, Now: nowAt(t0)})
	j, ts = getJob(t, s, "bob", q.ID)
	if j.Status != batch.JobQueued || j.TargetsDone != 4 {
		t.Fatalf("job handed back with a target left = %+v, want queued, 4 done", j)
	}
	wantStatuses(t, "handed back", ts, batch.TargetDone, batch.TargetFailed, batch.TargetFailed, batch.TargetFailed, batch.TargetPending)
	if c := claimJob(t, s, runnerB, q.ID, t0); c.Next != 4 {
		t.Fatalf("claim after the hand-back starts target %d, want 4", c.Next)
	}
	if st := finish(t, s, runnerB, q.ID, okFinish(4, "b"), t0); st.Next != -1 || st.Status != batch.JobPartial {
		t.Fatalf("finishing target 4 = %+v, want partial with no next", st)
	}
	j, ts = getJob(t, s, "bob", q.ID)
	wantSkipped(t, "drained after the hand-back", ts, q)
	if want := skippedBytes(q) + 2*int64(len(`{"content":"a"}`)) + int64(len(reasonInterrupted)); j.Bytes != want || j.TargetsDone != 5 {
		t.Errorf("job = %+v, want 5 done, %d bytes", j, want)
	}
}

// storeSkippedCancelSweep: a cancel of a queued job leaves its skipped
// targets finished, and their bytes go with the job's sweep.
func storeSkippedCancelSweep(t *testing.T, s batchdriver.Store) {
	p := skipSpec(jobSpec("alice", "c", 3, t0), 1)
	mustCreate(t, s, p)
	if err := s.Cancel(t.Context(), batchdriver.CancelParams{Caller: "alice", JobID: p.ID, Now: nowAt(t0)}); err != nil {
		t.Fatal(err)
	}
	j, ts := getJob(t, s, "alice", p.ID)
	if j.Status != batch.JobCancelled || j.TargetsDone != 1 || j.Bytes != skippedBytes(p) {
		t.Fatalf("cancelled job = %+v, want cancelled, 1 done, %d bytes", j, skippedBytes(p))
	}
	wantStatuses(t, "cancelled", ts, batch.TargetPending, batch.TargetFailed, batch.TargetPending)
	wantSkipped(t, "cancelled", ts, p)
	if st := mustStats(t, s); st.Bytes != skippedBytes(p) {
		t.Errorf("Stats bytes = %d, want %d", st.Bytes, skippedBytes(p))
	}
	if _, ok, err := s.Claim(t.Context(), batchdriver.ClaimParams{Runner: runnerA, Now: nowAt(t0)}); err != nil || ok {
		t.Fatalf("Claim = %v, %v; want nothing to claim", ok, err)
	}
	if n := sweep(t, s, t0.Add(25*time.Hour), 24*time.Hour); n != 1 {
		t.Fatalf("Sweep = %d, want 1", n)
	}
	if st := mustStats(t, s); st.Bytes != 0 {
		t.Errorf("Stats bytes after the sweep = %d, want 0", st.Bytes)
	}
}

// storeSkippedWebhook: the event of a job with skipped targets counts
// them failed.
func storeSkippedWebhook(t *testing.T, s batchdriver.Store) {
	p := skipSpec(hookSpec("alice", "h", 3, t0), 0)
	mustCreate(t, s, p)
	claimJob(t, s, runnerA, p.ID, t0)
	finish(t, s, runnerA, p.ID, okFinish(1, "a"), t0)
	finish(t, s, runnerA, p.ID, okFinish(2, "b"), t0)
	wantHook(t, oneHook(t, s, runnerA, p.ID, t0), p, batch.JobPartial, "", 2, 1, t0)
}
