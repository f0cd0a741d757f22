package batchdrivertest

import (
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// cancelCases: a cancel flips the job at once; the target the last write
// started finishes and is stored; nothing after it starts.
var cancelCases = map[string]func(*testing.T, batchdriver.Store){
	"CancelFinishedJob":          storeCancelFinished,
	"CancelLastTargetInFlight":   storeCancelLastTarget,
	"CancelQueuedJob":            storeCancelQueued,
	"CancelRunningJob":           storeCancelRunning,
	"CancelThroughAnyConnection": storeCancelByOwnerOnly,
}

func cancel(t *testing.T, s batchdriver.Store, caller, id string, now time.Time) {
	t.Helper()
	if err := s.Cancel(t.Context(), batchdriver.CancelParams{Caller: caller, JobID: id, Now: nowAt(now)}); err != nil {
		t.Fatalf("Cancel(%s): %v", id, err)
	}
}

func storeCancelQueued(t *testing.T, s batchdriver.Store) {
	p := jobSpec("alice", "a", 2, t0)
	mustCreate(t, s, p)
	now := t0.Add(time.Hour)
	cancel(t, s, "alice", p.ID, now)
	j, ts := getJob(t, s, "alice", p.ID)
	if j.Status != batch.JobCancelled || !j.Lease.Equal(now) || !j.FinishedAt.Equal(now) {
		t.Errorf("job = %+v, want cancelled at %v", j, now)
	}
	wantStatuses(t, "cancelled while queued", ts, batch.TargetPending, batch.TargetPending)
	if _, ok, err := s.Claim(t.Context(), batchdriver.ClaimParams{Runner: runnerA, Now: nowAt(now)}); err != nil || ok {
		t.Errorf("Claim after cancel = %v, %v; want nothing", ok, err)
	}
	if st := mustStats(t, s); st.Queued != 0 {
		t.Errorf("queued = %d after the cancel, want 0", st.Queued)
	}
}

// storeCancelRunning: a cancel after target 0 was stored (and target 1
// started by that same write) lets target 1 finish and be stored; target 2
// never starts.
func storeCancelRunning(t *testing.T, s batchdriver.Store) {
	p := jobSpec("alice", "a", 3, t0)
	mustCreate(t, s, p)
	claimJob(t, s, runnerA, p.ID, t0)
	finish(t, s, runnerA, p.ID, okFinish(0, "a"), t0)
	cancelAt := t0.Add(time.Minute)
	cancel(t, s, "alice", p.ID, cancelAt)
	j, ts := getJob(t, s, "alice", p.ID)
	if j.Status != batch.JobCancelled {
		t.Fatalf("status right after cancel = %s", j.Status)
	}
	wantStatuses(t, "right after the cancel", ts, batch.TargetDone, batch.TargetRunning, batch.TargetPending)
	st := finish(t, s, runnerA, p.ID, okFinish(1, "b"), t0.Add(2*time.Minute))
	if st != (batchdriver.Step{Status: batch.JobCancelled, Next: -1}) {
		t.Fatalf("storing the target in flight after the cancel = %+v, want cancelled with no next", st)
	}
	j, ts = getJob(t, s, "alice", p.ID)
	wantStatuses(t, "after the in-flight target", ts, batch.TargetDone, batch.TargetDone, batch.TargetPending)
	if j.Status != batch.JobCancelled || j.TargetsDone != 2 || j.Runner != "" || !j.FinishedAt.Equal(cancelAt) {
		t.Errorf("job = %+v", j)
	}
	if string(ts[1].Result) != `{"content":"b"}` {
		t.Errorf("in-flight result = %q", ts[1].Result)
	}
	if got := mustStats(t, s).Bytes; got != j.Bytes {
		t.Errorf("store bytes = %d, want the job's %d", got, j.Bytes)
	}
}

// storeCancelLastTarget: a cancel while the last target is in flight; the
// target is stored and the job stays cancelled.
func storeCancelLastTarget(t *testing.T, s batchdriver.Store) {
	p := jobSpec("alice", "a", 1, t0)
	mustCreate(t, s, p)
	claimJob(t, s, runnerA, p.ID, t0)
	cancel(t, s, "alice", p.ID, t0)
	if st := finish(t, s, runnerA, p.ID, okFinish(0, "a"), t0); st.Status != batch.JobCancelled || st.Next != -1 {
		t.Fatalf("step = %+v, want cancelled", st)
	}
	err := s.Cancel(t.Context(), batchdriver.CancelParams{Caller: "alice", JobID: p.ID, Now: nowAt(t0)})
	wantErr(t, "second cancel", err, batch.ErrFinished)
}

func storeCancelFinished(t *testing.T, s batchdriver.Store) {
	id := runJob(t, s, "alice", "a", 10, t0)
	err := s.Cancel(t.Context(), batchdriver.CancelParams{Caller: "alice", JobID: id, Now: nowAt(t0)})
	wantErr(t, "Cancel of a done job", err, batch.ErrFinished)
	err = s.Cancel(t.Context(), batchdriver.CancelParams{Caller: "alice", JobID: "nope", Now: nowAt(t0)})
	wantErr(t, "Cancel of unknown job", err, batch.ErrNotFound)
}

// storeCancelByOwnerOnly: a cancel is owner scoped, not runner scoped: any
// connection can write it, but only for the job's caller.
func storeCancelByOwnerOnly(t *testing.T, s batchdriver.Store) {
	p := jobSpec("alice", "a", 2, t0)
	mustCreate(t, s, p)
	claimJob(t, s, runnerA, p.ID, t0)
	err := s.Cancel(t.Context(), batchdriver.CancelParams{Caller: "mallory", JobID: p.ID, Now: nowAt(t0)})
	wantErr(t, "Cancel by another caller", err, batch.ErrNotFound)
	if j, _ := getJob(t, s, "alice", p.ID); j.Status != batch.JobRunning {
		t.Fatalf("after a foreign cancel the job is %s", j.Status)
	}
	cancel(t, s, "alice", p.ID, t0)
	if st := finish(t, s, runnerA, p.ID, okFinish(0, "a"), t0); st.Next != -1 {
		t.Fatalf("the drain went on after the owner's cancel: %+v", st)
	}
}
