package batchdrivertest

import (
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// deadlineCases: a job's deadline is stored; at it, the drain's write that
// says so ends the pending targets as expired, and Expire ends the queued
// jobs, each with what it has and error "deadline".
var deadlineCases = map[string]func(*testing.T, batchdriver.Store){
	"DeadlineStored":           storeDeadlineStored,
	"ExpireLeavesOthers":       storeExpireLeavesOthers,
	"ExpireQueuedJob":          storeExpireQueued,
	"FinishExpireCancelledJob": storeFinishExpireCancelled,
	"FinishExpireEndsJob":      storeFinishExpireEnds,
}

// deadlineSpec is jobSpec with a deadline d after now.
func deadlineSpec(caller, key string, n int, now time.Time, d time.Duration) batchdriver.CreateParams {
	p := jobSpec(caller, key, n, now)
	p.Deadline = now.Add(d)
	return p
}

func expire(t *testing.T, s batchdriver.Store, now time.Time) []batchdriver.Expired {
	t.Helper()
	ended, err := s.Expire(t.Context(), batchdriver.ExpireParams{Now: nowAt(now)})
	if err != nil {
		t.Fatalf("Expire: %v", err)
	}
	return ended
}

// wantExpired checks that targets from idx on failed as expired.
func wantExpired(t *testing.T, ts []batchdriver.TargetRecord, from int) {
	t.Helper()
	for _, x := range ts[from:] {
		if x.Status != batch.TargetFailed || x.Outcome != batch.OutcomeExpired || x.Error != batchdriver.DeadlineReason {
			t.Errorf("target %d = %s/%s/%q, want failed/expired/%q", x.Idx, x.Status, x.Outcome, x.Error, batchdriver.DeadlineReason)
		}
	}
}

// storeDeadlineStored: the deadline reads back as given, on every read;
// a job without one reads the zero time.
func storeDeadlineStored(t *testing.T, s batchdriver.Store) {
	p := deadlineSpec("alice", "a", 2, t0, 90*time.Second)
	if j := mustCreate(t, s, p); !j.Deadline.Equal(p.Deadline) {
		t.Errorf("Create's job deadline = %v, want %v", j.Deadline, p.Deadline)
	}
	if j, _ := getJob(t, s, "alice", p.ID); !j.Deadline.Equal(p.Deadline) {
		t.Errorf("Get's job deadline = %v, want %v", j.Deadline, p.Deadline)
	}
	if c := claimJob(t, s, runnerA, p.ID, t0); !c.Job.Deadline.Equal(p.Deadline) {
		t.Errorf("Claim's job deadline = %v, want %v", c.Job.Deadline, p.Deadline)
	}
	q := jobSpec("bob", "b", 1, t0)
	mustCreate(t, s, q)
	if j, _ := getJob(t, s, "bob", q.ID); !j.Deadline.IsZero() {
		t.Errorf("a job without a deadline reads %v", j.Deadline)
	}
}

// storeFinishExpireEnds: a write with Expire stores the target in flight,
// starts no next one, fails the pending ones as expired (counted done, with
// their error bytes) and gives the job its final status with error
// "deadline" and its webhook event.
func storeFinishExpireEnds(t *testing.T, s batchdriver.Store) {
	p := deadlineSpec("alice", "a", 4, t0, time.Minute)
	p.WebhookURL = "https://hooks.example/alice?token=secret"
	mustCreate(t, s, p)
	claimJob(t, s, runnerA, p.ID, t0)
	finish(t, s, runnerA, p.ID, okFinish(0, "a"), t0)
	at := t0.Add(2 * time.Minute)
	st, err := s.FinishTarget(t.Context(), batchdriver.FinishParams{JobID: p.ID, Runner: runnerA, Target: okFinish(1, "b"), Expire: true, Now: nowAt(at)})
	if err != nil {
		t.Fatalf("FinishTarget with Expire: %v", err)
	}
	if st != (batchdriver.Step{Status: batch.JobPartial, Next: -1}) {
		t.Fatalf("step = %+v, want partial with no next", st)
	}
	j, ts := getJob(t, s, "alice", p.ID)
	wantStatuses(t, "after the deadline", ts, batch.TargetDone, batch.TargetDone, batch.TargetFailed, batch.TargetFailed)
	wantExpired(t, ts, 2)
	if j.Status != batch.JobPartial || j.Error != batchdriver.DeadlineReason || j.TargetsDone != 4 || j.Runner != "" || !j.FinishedAt.Equal(at) {
		t.Errorf("job = %+v, want partial, error deadline, 4 done, released, finished at %v", j, at)
	}
	wantBytes := int64(2*len(`{"content":"a"}`) + 2*len(batchdriver.DeadlineReason))
	if j.Bytes != wantBytes || mustStats(t, s).Bytes != wantBytes {
		t.Errorf("job bytes = %d, store bytes = %d, want %d", j.Bytes, mustStats(t, s).Bytes, wantBytes)
	}
	d := oneHook(t, s, runnerB, p.ID, at)
	if d.Status != batch.JobPartial || d.Error != batchdriver.DeadlineReason || d.TargetsOK != 2 || d.TargetsFailed != 2 || !d.Deadline.Equal(p.Deadline) {
		t.Errorf("webhook event = %+v, want partial, deadline, 2 ok, 2 failed, deadline %v", d, p.Deadline)
	}
}

// storeFinishExpireCancelled: Expire on a cancelled job's last write
// changes nothing of the cancel: the pending targets stay pending.
func storeFinishExpireCancelled(t *testing.T, s batchdriver.Store) {
	p := deadlineSpec("alice", "a", 3, t0, time.Minute)
	mustCreate(t, s, p)
	claimJob(t, s, runnerA, p.ID, t0)
	cancel(t, s, "alice", p.ID, t0)
	st, err := s.FinishTarget(t.Context(), batchdriver.FinishParams{JobID: p.ID, Runner: runnerA, Target: okFinish(0, "a"), Expire: true, Now: nowAt(t0.Add(time.Hour))})
	if err != nil || st != (batchdriver.Step{Status: batch.JobCancelled, Next: -1}) {
		t.Fatalf("FinishTarget = %+v, %v; want cancelled with no next", st, err)
	}
	j, ts := getJob(t, s, "alice", p.ID)
	wantStatuses(t, "cancelled", ts, batch.TargetDone, batch.TargetPending, batch.TargetPending)
	if j.Status != batch.JobCancelled || j.Error != "" {
		t.Errorf("job = %s/%q, want cancelled with no error", j.Status, j.Error)
	}
}

// storeExpireQueued: Expire ends a queued job whose deadline has passed:
// every target expired, the job failed with error "deadline", not queued,
// and its event written; a second pass finds nothing.
func storeExpireQueued(t *testing.T, s batchdriver.Store) {
	p := deadlineSpec("alice", "a", 3, t0, time.Minute)
	p.WebhookURL = "https://hooks.example/alice?token=secret"
	mustCreate(t, s, p)
	if ended := expire(t, s, t0.Add(59*time.Second)); len(ended) != 0 {
		t.Fatalf("Expire before the deadline ended %+v", ended)
	}
	at := t0.Add(time.Minute) // at the deadline exactly
	ended := expire(t, s, at)
	want := batchdriver.Expired{JobID: p.ID, Caller: "alice", Status: batch.JobFailed, Targets: 3, Webhook: true}
	if len(ended) != 1 || ended[0] != want {
		t.Fatalf("Expire = %+v, want [%+v]", ended, want)
	}
	j, ts := getJob(t, s, "alice", p.ID)
	wantExpired(t, ts, 0)
	if j.Status != batch.JobFailed || j.Error != batchdriver.DeadlineReason || j.TargetsDone != 3 || !j.FinishedAt.Equal(at) || !j.Lease.Equal(at) {
		t.Errorf("job = %+v, want failed, error deadline, 3 done, finished and leased at %v", j, at)
	}
	if st := mustStats(t, s); st.Queued != 0 || st.Bytes != j.Bytes || j.Bytes != int64(3*len(batchdriver.DeadlineReason)) {
		t.Errorf("stats = %+v, job bytes %d; want none queued and the expired targets' error bytes", st, j.Bytes)
	}
	if _, ok, err := s.Claim(t.Context(), batchdriver.ClaimParams{Runner: runnerA, Now: nowAt(at)}); err != nil || ok {
		t.Errorf("Claim after Expire = %v, %v; want nothing", ok, err)
	}
	if d := oneHook(t, s, runnerB, p.ID, at); d.Status != batch.JobFailed || d.Error != batchdriver.DeadlineReason || d.TargetsFailed != 3 {
		t.Errorf("webhook event = %+v", d)
	}
	if ended := expire(t, s, at.Add(time.Hour)); len(ended) != 0 {
		t.Errorf("a second Expire ended %+v", ended)
	}
}

// storeExpireLeavesOthers: Expire leaves a job without a deadline, one
// whose deadline is later, a running one (its runner's to end) and a
// cancelled one.
func storeExpireLeavesOthers(t *testing.T, s batchdriver.Store) {
	running := deadlineSpec("alice", "run", 2, t0, time.Second)
	mustCreate(t, s, running)
	claimJob(t, s, runnerA, running.ID, t0)
	none := jobSpec("bob", "none", 1, t0.Add(time.Millisecond))
	mustCreate(t, s, none)
	later := deadlineSpec("carol", "later", 1, t0.Add(2*time.Millisecond), time.Hour)
	mustCreate(t, s, later)
	cancelled := deadlineSpec("dave", "c", 1, t0.Add(3*time.Millisecond), time.Second)
	mustCreate(t, s, cancelled)
	cancel(t, s, "dave", cancelled.ID, t0)
	if ended := expire(t, s, t0.Add(time.Minute)); len(ended) != 0 {
		t.Fatalf("Expire ended %+v, want none", ended)
	}
	for _, c := range []struct {
		caller, id string
		want       batch.JobStatus
	}{{"alice", running.ID, batch.JobRunning}, {"bob", none.ID, batch.JobQueued}, {"carol", later.ID, batch.JobQueued}, {"dave", cancelled.ID, batch.JobCancelled}} {
		if j, _ := getJob(t, s, c.caller, c.id); j.Status != c.want || j.Error != "" {
			t.Errorf("%s's job = %s/%q, want %s", c.caller, j.Status, j.Error, c.want)
		}
	}
}
