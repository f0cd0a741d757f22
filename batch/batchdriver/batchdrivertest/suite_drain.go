package batchdrivertest

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// drainCases: the claim, one write per target, and the runner fence.
var drainCases = map[string]func(*testing.T, batchdriver.Store){
	"ClaimExclusiveUnderRace":     storeClaimExclusive,
	"ClaimOldestFirst":            storeClaimOrder,
	"ClaimStartsFirstTarget":      storeClaimStarts,
	"FinishTargetFenced":          storeFinishFenced,
	"FinishTargetFinalStatus":     storeFinishFinal,
	"FinishTargetRepeatIsNoop":    storeFinishRepeat,
	"FinishTargetStartsNext":      storeFinishStartsNext,
	"FinishTargetValidatesStatus": storeFinishValidates,
}

func storeClaimOrder(t *testing.T, s batchdriver.Store) {
	if _, ok, err := s.Claim(t.Context(), batchdriver.ClaimParams{Runner: runnerA, Now: nowAt(t0)}); err != nil || ok {
		t.Fatalf("Claim on empty store = %v, %v; want nothing, no error", ok, err)
	}
	later := jobSpec("b", "x", 2, t0.Add(time.Second))
	first := jobSpec("a", "x", 3, t0)
	mustCreate(t, s, later)
	mustCreate(t, s, first)
	// Equal creation times go in insertion order.
	tie1, tie2 := jobSpec("tie1", "x", 1, t0.Add(2*time.Second)), jobSpec("tie2", "x", 1, t0.Add(2*time.Second))
	mustCreate(t, s, tie1)
	mustCreate(t, s, tie2)
	c := claimJob(t, s, runnerA, first.ID, t0.Add(time.Minute))
	if c.Job.Status != batch.JobRunning || c.Job.Runner != runnerA || c.Job.Caller != first.Caller {
		t.Fatalf("first claim = %+v, want a's job running, held by %s", c.Job, runnerA)
	}
	if len(c.Targets) != 3 || c.Targets[1].Target.URL != first.Targets[1].URL || c.Targets[2].Idx != 2 {
		t.Fatalf("claimed targets = %+v", c.Targets)
	}
	if c.Queued != 3 {
		t.Errorf("claim saw %d still queued, want 3", c.Queued)
	}
	claimJob(t, s, runnerA, later.ID, t0.Add(time.Minute))
	claimJob(t, s, runnerB, tie1.ID, t0.Add(time.Minute))
	if c := claimJob(t, s, runnerB, tie2.ID, t0.Add(time.Minute)); c.Queued != 0 {
		t.Errorf("last claim saw %d still queued, want 0", c.Queued)
	}
	if _, ok, err := s.Claim(t.Context(), batchdriver.ClaimParams{Runner: runnerA, Now: nowAt(t0)}); err != nil || ok {
		t.Fatalf("claim of an empty queue = %v, %v; want nothing", ok, err)
	}
}

// storeClaimStarts: the claim itself starts target 0; no other target runs.
func storeClaimStarts(t *testing.T, s batchdriver.Store) {
	p := jobSpec("alice", "a", 3, t0)
	mustCreate(t, s, p)
	c := claimJob(t, s, runnerA, p.ID, t0)
	if c.Next != 0 {
		t.Fatalf("claim started target %d, want 0", c.Next)
	}
	wantStatuses(t, "claimed", c.Targets, batch.TargetRunning, batch.TargetPending, batch.TargetPending)
	_, ts := getJob(t, s, "alice", p.ID)
	wantStatuses(t, "stored after the claim", ts, batch.TargetRunning, batch.TargetPending, batch.TargetPending)
	if st := mustStats(t, s); st.Queued != 0 || st.Running != 1 {
		t.Errorf("stats after the claim = %+v, want 0 queued, 1 running", st)
	}
}

// storeClaimExclusive: many runners claiming at once get each job exactly
// once, and every job is claimed.
func storeClaimExclusive(t *testing.T, s batchdriver.Store) {
	const jobs, claimers = 40, 8
	want := map[string]bool{}
	for i := range jobs {
		p := jobSpec(fmt.Sprintf("c%d", i), "k", 1, t0.Add(time.Duration(i)))
		mustCreate(t, s, p)
		want[p.ID] = true
	}
	var mu sync.Mutex
	got := map[string]string{} // job → runner
	var wg sync.WaitGroup
	start := make(chan struct{})
	for r := range claimers {
		runner := fmt.Sprintf("claimer-%d", r)
		wg.Go(func() {
			<-start
			for {
				c, ok, err := s.Claim(context.Background(), batchdriver.ClaimParams{Runner: runner, Now: nowAt(t0)})
				if err != nil {
					t.Errorf("%s: Claim: %v", runner, err)
					return
				}
				if !ok {
					return
				}
				mu.Lock()
				if other, dup := got[c.Job.ID]; dup {
					t.Errorf("job %s claimed by %s and %s", c.Job.ID, other, runner)
				}
				got[c.Job.ID] = runner
				mu.Unlock()
				if c.Job.Runner != runner {
					t.Errorf("claim by %s returned a job held by %q", runner, c.Job.Runner)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if len(got) != jobs {
		t.Fatalf("%d of %d jobs claimed", len(got), jobs)
	}
	for id := range want {
		if _, ok := got[id]; !ok {
			t.Errorf("job %s never claimed", id)
		}
	}
	if st := mustStats(t, s); st.Queued != 0 || st.Running != jobs {
		t.Errorf("stats = %+v, want 0 queued and %d running", st, jobs)
	}
}

// storeFinishStartsNext: storing target i starts target i+1 in the same
// write, and counts, bytes and lease move exactly once.
func storeFinishStartsNext(t *testing.T, s batchdriver.Store) {
	p := jobSpec("alice", "a", 3, t0)
	mustCreate(t, s, p)
	claimJob(t, s, runnerA, p.ID, t0)
	now := t0.Add(10 * time.Minute)
	fin := okFinish(0, "hello")
	if st := finish(t, s, runnerA, p.ID, fin, now); st != (batchdriver.Step{Status: batch.JobRunning, Next: 1}) {
		t.Fatalf("step after target 0 = %+v, want running with next 1", st)
	}
	j, ts := getJob(t, s, "alice", p.ID)
	wantStatuses(t, "after target 0", ts, batch.TargetDone, batch.TargetRunning, batch.TargetPending)
	if j.TargetsDone != 1 || !j.Lease.Equal(now) || j.Bytes != int64(len(fin.Result)) || j.Runner != runnerA {
		t.Errorf("job after target 0 = %+v", j)
	}
	if string(ts[0].Result) != string(fin.Result) || ts[0].Outcome != batch.OutcomeOK {
		t.Errorf("target 0 = %+v", ts[0])
	}
	failed := failFinish(1, "blocked: private address")
	if st := finish(t, s, runnerA, p.ID, failed, now); st.Next != 2 {
		t.Fatalf("step after target 1 = %+v, want next 2", st)
	}
	j, ts = getJob(t, s, "alice", p.ID)
	if ts[1].Error != failed.Error || ts[1].Hint != "browser" || ts[1].Outcome != batch.OutcomeBlocked || ts[1].Result != nil {
		t.Errorf("target 1 = %+v", ts[1])
	}
	if want := int64(len(fin.Result) + len(failed.Error)); j.Bytes != want || mustStats(t, s).Bytes != want {
		t.Errorf("job bytes = %d, store bytes = %d; want %d", j.Bytes, mustStats(t, s).Bytes, want)
	}
}

// storeFinishFinal: the write that stores the last target gives the job its
// final status from all its targets and releases it.
func storeFinishFinal(t *testing.T, s batchdriver.Store) {
	f := func(name string, fins []batchdriver.TargetFinish, want batch.JobStatus) {
		t.Helper()
		p := jobSpec(name, "k", len(fins), t0)
		mustCreate(t, s, p)
		claimJob(t, s, runnerA, p.ID, t0)
		end := t0.Add(time.Hour)
		for i, fin := range fins {
			at := t0
			if i == len(fins)-1 {
				at = end
			}
			st := finish(t, s, runnerA, p.ID, fin, at)
			if last := i == len(fins)-1; last && st != (batchdriver.Step{Status: want, Next: -1}) {
				t.Fatalf("%s: last step = %+v, want %s with no next", name, st, want)
			} else if !last && st.Next != i+1 {
				t.Fatalf("%s: step %d = %+v", name, i, st)
			}
		}
		job, _ := getJob(t, s, name, p.ID)
		if job.Status != want || !job.FinishedAt.Equal(end) || !job.Lease.Equal(end) || job.Runner != "" || job.TargetsDone != len(fins) {
			t.Errorf("%s: job = %+v", name, job)
		}
	}
	f("done", []batchdriver.TargetFinish{okFinish(0, "a"), okFinish(1, "b")}, batch.JobDone)
	f("partial", []batchdriver.TargetFinish{okFinish(0, "a"), failFinish(1, "x")}, batch.JobPartial)
	f("failed", []batchdriver.TargetFinish{failFinish(0, "x"), failFinish(1, "y")}, batch.JobFailed)
	if st := mustStats(t, s); st.Running != 0 || st.Queued != 0 {
		t.Errorf("stats = %+v, want nothing live", st)
	}
}

// storeFinishRepeat: a write repeated after it was applied changes nothing
// and answers the job's current step.
func storeFinishRepeat(t *testing.T, s batchdriver.Store) {
	p := jobSpec("alice", "a", 2, t0)
	mustCreate(t, s, p)
	claimJob(t, s, runnerA, p.ID, t0)
	fin := okFinish(0, "hello")
	first := finish(t, s, runnerA, p.ID, fin, t0)
	again := finish(t, s, runnerA, p.ID, okFinish(0, "different"), t0.Add(time.Minute))
	if again != first {
		t.Fatalf("repeat = %+v, want %+v", again, first)
	}
	j, ts := getJob(t, s, "alice", p.ID)
	if j.TargetsDone != 1 || j.Bytes != int64(len(fin.Result)) || string(ts[0].Result) != string(fin.Result) || !j.Lease.Equal(t0) {
		t.Fatalf("after a repeated write: job %+v, target 0 %q", j, ts[0].Result)
	}
	wantStatuses(t, "after a repeat", ts, batch.TargetDone, batch.TargetRunning)
	// A write for a target not started yet is refused.
	_, err := s.FinishTarget(t.Context(), batchdriver.FinishParams{JobID: p.ID, Runner: runnerA, Target: okFinish(5, "x"), Now: nowAt(t0)})
	wantErr(t, "finish of an idx outside the job", err, batchdriver.ErrNotHeld)
	_, err = s.FinishTarget(t.Context(), batchdriver.FinishParams{JobID: "no-such-job", Runner: runnerA, Target: okFinish(0, "x"), Now: nowAt(t0)})
	wantErr(t, "finish of an unknown job", err, batch.ErrNotFound)
}

// storeFinishFenced: only the runner that holds the job may write to it.
func storeFinishFenced(t *testing.T, s batchdriver.Store) {
	p := jobSpec("alice", "a", 2, t0)
	mustCreate(t, s, p)
	claimJob(t, s, runnerA, p.ID, t0)
	before, beforeTs := getJob(t, s, "alice", p.ID)
	_, err := s.FinishTarget(t.Context(), batchdriver.FinishParams{JobID: p.ID, Runner: runnerB, Target: okFinish(0, "intruder"), Now: nowAt(t0.Add(time.Hour))})
	wantErr(t, "finish by a runner that does not hold the job", err, batchdriver.ErrNotHeld)
	after, afterTs := getJob(t, s, "alice", p.ID)
	if !reflect.DeepEqual(after, before) || statuses(afterTs)[0] != statuses(beforeTs)[0] || afterTs[0].Result != nil {
		t.Fatalf("a refused write changed the job: %+v → %+v, %+v", before, after, afterTs[0])
	}
	finish(t, s, runnerA, p.ID, okFinish(0, "a"), t0)
	finish(t, s, runnerA, p.ID, okFinish(1, "b"), t0)
	// Finished: released, so no runner holds it any more.
	_, err = s.FinishTarget(t.Context(), batchdriver.FinishParams{JobID: p.ID, Runner: runnerB, Target: okFinish(1, "late"), Now: nowAt(t0)})
	wantErr(t, "finish of a released job by another runner", err, batchdriver.ErrNotHeld)
}

func storeFinishValidates(t *testing.T, s batchdriver.Store) {
	p := jobSpec("alice", "a", 1, t0)
	mustCreate(t, s, p)
	claimJob(t, s, runnerA, p.ID, t0)
	_, err := s.FinishTarget(t.Context(), batchdriver.FinishParams{JobID: p.ID, Runner: runnerA,
		Target: batchdriver.TargetFinish{Idx: 0, Status: batch.TargetRunning}, Now: nowAt(t0)})
	if err == nil {
		t.Fatal("FinishTarget with status running succeeded")
	}
	if _, ts := getJob(t, s, "alice", p.ID); ts[0].Status != batch.TargetRunning {
		t.Fatalf("a refused write changed target 0 to %s", ts[0].Status)
	}
}
