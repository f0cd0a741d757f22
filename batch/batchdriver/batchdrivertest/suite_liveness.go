package batchdrivertest

import (
	"reflect"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// livenessCases: heartbeats and the reaper. Which jobs a runner's Start
// reaps depends on the store's capabilities; what Reap does with the
// jobs it selects does not.
var livenessCases = map[string]func(*testing.T, batchdriver.Store){
	"HeartbeatNeverMovesBack": storeHeartbeatMonotonic,
	"ReapAllLive":             storeReapAllLive,
	"ReapByRunner":            storeReapByRunner,
	"ReapStaleRunners":        storeReapStale,
}

func reap(t *testing.T, s batchdriver.Store, p batchdriver.ReapParams) int {
	t.Helper()
	if p.Reason == "" {
		p.Reason = "restart"
	}
	n, err := s.Reap(t.Context(), p)
	if err != nil {
		t.Fatalf("Reap(%+v): %v", p, err)
	}
	return n
}

func heartbeat(t *testing.T, s batchdriver.Store, runner string, at time.Time) {
	t.Helper()
	if err := s.Heartbeat(t.Context(), batchdriver.HeartbeatParams{Runner: runner, Now: nowAt(at)}); err != nil {
		t.Fatalf("Heartbeat(%s): %v", runner, err)
	}
}

// heldJob creates a job of n targets, claims it for runner and finishes
// its first done targets ok, so that target done is in flight.
func heldJob(t *testing.T, s batchdriver.Store, runner, caller string, n, done int, now time.Time) string {
	t.Helper()
	p := jobSpec(caller, "held", n, now)
	mustCreate(t, s, p)
	claimJob(t, s, runner, p.ID, now)
	for i := range done {
		finish(t, s, runner, p.ID, okFinish(i, "kept"), now)
	}
	return p.ID
}

// wantReaped checks a job failed by a reap: its finished targets intact,
// its target in flight (idx inFlight) failed with the reason, the rest
// pending, and the job released.
func wantReaped(t *testing.T, s batchdriver.Store, caller, id string, status batch.JobStatus, inFlight int) {
	t.Helper()
	j, ts := getJob(t, s, caller, id)
	if j.Status != status || j.Runner != "" || j.TargetsDone != inFlight+1 {
		t.Fatalf("reaped job = %+v, want %s, released, %d done", j, status, inFlight+1)
	}
	if status == batch.JobFailed && j.Error != "restart" {
		t.Errorf("reaped job error = %q, want restart", j.Error)
	}
	for i, tr := range ts {
		switch {
		case i < inFlight:
			if tr.Status != batch.TargetDone || string(tr.Result) != `{"content":"kept"}` {
				t.Errorf("finished target %d = %+v, want kept", i, tr)
			}
		case i == inFlight:
			if tr.Status != batch.TargetFailed || tr.Error != "restart" || tr.Outcome != batch.OutcomeOther {
				t.Errorf("in-flight target %d = %+v, want failed restart", i, tr)
			}
		default:
			if tr.Status != batch.TargetPending {
				t.Errorf("target %d = %s, want pending", i, tr.Status)
			}
		}
	}
}

// wantUntouched checks that a refused write or a reap elsewhere left a job
// exactly as it was.
func wantUntouched(t *testing.T, s batchdriver.Store, caller, id string, before batchdriver.Job, beforeTs []batchdriver.TargetRecord) {
	t.Helper()
	j, ts := getJob(t, s, caller, id)
	if !reflect.DeepEqual(j, before) {
		t.Fatalf("job changed: %+v → %+v", before, j)
	}
	for i := range ts {
		if ts[i].Status != beforeTs[i].Status || string(ts[i].Result) != string(beforeTs[i].Result) || ts[i].Error != beforeTs[i].Error {
			t.Fatalf("target %d changed: %+v → %+v", i, beforeTs[i], ts[i])
		}
	}
}

// storeReapAllLive: the start of a runner on a store that serves one
// process fails every live job and every target in flight.
func storeReapAllLive(t *testing.T, s batchdriver.Store) {
	done := runJob(t, s, "alice", "done", 10, t0)
	running := heldJob(t, s, runnerA, "carol", 3, 1, t0)
	queued := jobSpec("bob", "q", 2, t0.Add(time.Second))
	mustCreate(t, s, queued)
	// A job cancelled while its target was in flight, then interrupted.
	cancelled := heldJob(t, s, runnerB, "dave", 2, 0, t0.Add(-time.Second))
	cancel(t, s, "dave", cancelled, t0)
	before := mustStats(t, s)
	now := t0.Add(time.Hour)
	if n := reap(t, s, batchdriver.ReapParams{AllLive: true, Now: nowAt(now)}); n != 2 {
		t.Fatalf("Reap(AllLive) = %d, want 2", n)
	}
	wantReaped(t, s, "carol", running, batch.JobFailed, 1)
	wantReaped(t, s, "dave", cancelled, batch.JobCancelled, 0)
	qj, qts := getJob(t, s, "bob", queued.ID)
	if qj.Status != batch.JobFailed || qj.Error != "restart" || !qj.FinishedAt.Equal(now) {
		t.Errorf("queued job = %+v", qj)
	}
	wantStatuses(t, "queued job's targets", qts, batch.TargetPending, batch.TargetPending)
	if dj, _ := getJob(t, s, "alice", done); dj.Status != batch.JobDone {
		t.Errorf("done job = %s, want untouched", dj.Status)
	}
	after := mustStats(t, s)
	if after.Queued != 0 || after.Running != 0 || after.Bytes != before.Bytes+2*int64(len("restart")) {
		t.Errorf("stats after = %+v, before = %+v", after, before)
	}
	// The reaped runners' writes are refused.
	_, err := s.FinishTarget(t.Context(), batchdriver.FinishParams{JobID: running, Runner: runnerA, Target: okFinish(1, "late"), Now: nowAt(now)})
	wantErr(t, "a write to a reaped job", err, batchdriver.ErrNotHeld)
}

// storeReapByRunner: a restarting or closing runner fails only the jobs it
// holds; other runners' jobs and queued jobs are left alone, and the reaped
// runner's next write changes nothing.
func storeReapByRunner(t *testing.T, s batchdriver.Store) {
	mine := heldJob(t, s, runnerA, "alice", 3, 1, t0)
	mineCancelled := heldJob(t, s, runnerA, "erin", 2, 0, t0.Add(time.Second))
	cancel(t, s, "erin", mineCancelled, t0)
	theirs := heldJob(t, s, runnerB, "bob", 2, 0, t0.Add(2*time.Second))
	queued := jobSpec("carol", "q", 1, t0.Add(3*time.Second))
	mustCreate(t, s, queued)
	theirJob, theirTs := getJob(t, s, "bob", theirs)
	queuedJob, queuedTs := getJob(t, s, "carol", queued.ID)
	if n := reap(t, s, batchdriver.ReapParams{Runner: runnerA, Now: nowAt(t0.Add(time.Hour))}); n != 1 {
		t.Fatalf("Reap(runner a) = %d, want 1", n)
	}
	wantReaped(t, s, "alice", mine, batch.JobFailed, 1)
	wantReaped(t, s, "erin", mineCancelled, batch.JobCancelled, 0)
	wantUntouched(t, s, "bob", theirs, theirJob, theirTs)
	wantUntouched(t, s, "carol", queued.ID, queuedJob, queuedTs)

	reaped, reapedTs := getJob(t, s, "alice", mine)
	_, err := s.FinishTarget(t.Context(), batchdriver.FinishParams{JobID: mine, Runner: runnerA, Target: okFinish(1, "late"), Now: nowAt(t0.Add(2 * time.Hour))})
	wantErr(t, "the reaped runner's next write", err, batchdriver.ErrNotHeld)
	wantUntouched(t, s, "alice", mine, reaped, reapedTs)
	// Runner b drains on.
	if st := finish(t, s, runnerB, theirs, okFinish(0, "b"), t0); st.Next != 1 {
		t.Fatalf("runner b's job after a's reap: %+v", st)
	}
}

// storeReapStale: the jobs of a runner whose heartbeat is older than the
// bound are failed; those of a runner that beat since are not.
func storeReapStale(t *testing.T, s batchdriver.Store) {
	dead := heldJob(t, s, runnerA, "alice", 3, 1, t0) // the claim is a's last heartbeat
	alive := heldJob(t, s, runnerB, "bob", 2, 0, t0)
	heartbeat(t, s, runnerB, t0.Add(10*time.Minute))
	queued := jobSpec("carol", "q", 1, t0)
	mustCreate(t, s, queued)
	if n := reap(t, s, batchdriver.ReapParams{StaleAfter: time.Minute, Now: nowAt(t0.Add(time.Minute))}); n != 0 {
		t.Fatalf("Reap before anyone is stale = %d, want 0", n)
	}
	aliveJob, aliveTs := getJob(t, s, "bob", alive)
	queuedJob, queuedTs := getJob(t, s, "carol", queued.ID)
	if n := reap(t, s, batchdriver.ReapParams{StaleAfter: 6 * time.Minute, Now: nowAt(t0.Add(11 * time.Minute))}); n != 1 {
		t.Fatalf("Reap(stale before t0+5m) = %d, want 1", n)
	}
	wantReaped(t, s, "alice", dead, batch.JobFailed, 1)
	wantUntouched(t, s, "bob", alive, aliveJob, aliveTs)
	wantUntouched(t, s, "carol", queued.ID, queuedJob, queuedTs)
	reaped, reapedTs := getJob(t, s, "alice", dead)
	_, err := s.FinishTarget(t.Context(), batchdriver.FinishParams{JobID: dead, Runner: runnerA, Target: okFinish(1, "late"), Now: nowAt(t0.Add(12 * time.Minute))})
	wantErr(t, "the stale runner's next write", err, batchdriver.ErrNotHeld)
	wantUntouched(t, s, "alice", dead, reaped, reapedTs)
	if st := mustStats(t, s); st.Running != 1 || st.Queued != 1 {
		t.Errorf("stats = %+v, want b's job running and c's queued", st)
	}
}

// storeHeartbeatMonotonic: a heartbeat written late with an older time does
// not make a live runner look stale.
func storeHeartbeatMonotonic(t *testing.T, s batchdriver.Store) {
	id := heldJob(t, s, runnerA, "alice", 2, 0, t0)
	heartbeat(t, s, runnerA, t0.Add(10*time.Minute))
	heartbeat(t, s, runnerA, t0.Add(time.Minute))
	if n := reap(t, s, batchdriver.ReapParams{StaleAfter: 6 * time.Minute, Now: nowAt(t0.Add(11 * time.Minute))}); n != 0 {
		t.Fatalf("Reap = %d: an older heartbeat moved runner a's back", n)
	}
	if j, _ := getJob(t, s, "alice", id); j.Status != batch.JobRunning || j.Runner != runnerA {
		t.Fatalf("job = %+v, want still running under a", j)
	}
}
