package batchtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
)

// t0 is the instant the suites' fake time starts from.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// suiteLimits are generous caps, so that tests not about caps never hit one.
var suiteLimits = batch.Limits{JobsPerCaller: 100, JobsTotal: 1000, TTL: 24 * time.Hour}

// TestStore is the conformance suite of [batch.Store]: every implementation
// must pass it. newStore returns a new, empty store for one subtest (and
// registers its cleanup with t).
func TestStore(t *testing.T, newStore func(t *testing.T) batch.Store) {
	t.Helper()
	tests := map[string]func(t *testing.T, s batch.Store){
		"CancelFinishedJob":         storeCancelFinished,
		"CancelQueuedJob":           storeCancelQueued,
		"CancelRunningJob":          storeCancelRunning,
		"CapsAfterReuse":            storeCapsAfterReuse,
		"CapsPerCallerAndTotal":     storeCaps,
		"ClaimOldestFirst":          storeClaimOrder,
		"ConcurrentCallersCapped":   storeConcurrentCallers,
		"ConcurrentIdenticalSubmit": storeConcurrentIdentical,
		"CreateRoundTrip":           storeRoundTrip,
		"EvictOldestLeaseFirst":     storeEvict,
		"FinishJobAggregates":       storeFinishJob,
		"FinishTargetExactlyOnce":   storeFinishExactlyOnce,
		"GetTargetBounds":           storeGetTargetBounds,
		"ListNewestFirst":           storeList,
		"MarkInFlightFailed":        storeMarkInFlightFailed,
		"OwnerScope":                storeOwnerScope,
		"ReuseNotAfterCancelOrFail": storeNoReuseAfterCancel,
		"ReuseScopedByCaller":       storeReuseScoped,
		"ReuseWithinLease":          storeReuseWithinLease,
		"StatsCounts":               storeStats,
		"SweepExpiredFinished":      storeSweep,
		"TouchSlidesLease":          storeTouch,
	}
	runParallel(t, tests, newStore)
}

// runParallel runs each test as a parallel subtest on a new store, in name
// order.
func runParallel(t *testing.T, tests map[string]func(*testing.T, batch.Store), newStore func(*testing.T) batch.Store) {
	t.Helper()
	for _, name := range slices.Sorted(maps.Keys(tests)) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tests[name](t, newStore(t))
		})
	}
}

// jobSpec builds a NewJob for caller with n targets.
func jobSpec(caller, key string, n int, now time.Time) batch.NewJob {
	ctx := true
	ts := Targets(caller+"-"+key, n)
	if n > 0 {
		ts[0].Mode = batch.ModeClean
		ts[0].Question = "what?"
		ts[0].Context = &ctx
		ts[0].Recover = true
	}
	return batch.NewJob{
		ID:      fmt.Sprintf("%s-%s-%d", caller, key, now.UnixNano()),
		Caller:  batch.Caller{Name: caller, Class: "class-" + caller, Restricted: caller == "restricted"},
		IdemKey: batch.IdemKey(caller, ts),
		Targets: ts,
		Now:     now,
	}
}

func mustCreate(t *testing.T, s batch.Store, nj batch.NewJob, lim batch.Limits) batch.Job {
	t.Helper()
	j, reused, err := s.Create(t.Context(), nj, lim)
	if err != nil {
		t.Fatalf("Create(%s): %v", nj.ID, err)
	}
	if reused {
		t.Fatalf("Create(%s): reused %s, want a new job", nj.ID, j.ID)
	}
	return j
}

func mustClaim(t *testing.T, s batch.Store, now time.Time) (batch.Job, []batch.TargetRecord) {
	t.Helper()
	j, ts, err := s.Claim(t.Context(), "runner-1", now)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return j, ts
}

// finishTarget starts and finishes target idx of a running job.
func finishTarget(t *testing.T, s batch.Store, id string, fin batch.TargetFinish, now time.Time) batch.JobStatus {
	t.Helper()
	if err := s.StartTarget(t.Context(), id, fin.Idx, now); err != nil {
		t.Fatalf("StartTarget(%s, %d): %v", id, fin.Idx, err)
	}
	st, err := s.FinishTarget(t.Context(), id, fin, now)
	if err != nil {
		t.Fatalf("FinishTarget(%s, %d): %v", id, fin.Idx, err)
	}
	return st
}

func okFinish(idx int, body string) batch.TargetFinish {
	return batch.TargetFinish{Idx: idx, Status: batch.TargetDone, Outcome: batch.OutcomeOK,
		Result: []byte(`{"content":"` + body + `"}`)}
}

func failFinish(idx int, msg string) batch.TargetFinish {
	return batch.TargetFinish{Idx: idx, Status: batch.TargetFailed, Outcome: batch.OutcomeBlocked,
		Error: msg, Hint: "browser"}
}

// runJob creates, claims and finishes every target of a job ok with a body of
// size bytes, then finishes the job. It returns the job id.
func runJob(t *testing.T, s batch.Store, caller, key string, size int, now time.Time) string {
	t.Helper()
	nj := jobSpec(caller, key, 1, now)
	mustCreate(t, s, nj, suiteLimits)
	j, _ := mustClaim(t, s, now)
	if j.ID != nj.ID {
		t.Fatalf("claimed %s, want %s", j.ID, nj.ID)
	}
	body := make([]byte, size)
	for i := range body {
		body[i] = 'x'
	}
	finishTarget(t, s, j.ID, batch.TargetFinish{Idx: 0, Status: batch.TargetDone, Outcome: batch.OutcomeOK, Result: body}, now)
	if _, err := s.FinishJob(t.Context(), j.ID, now); err != nil {
		t.Fatalf("FinishJob: %v", err)
	}
	return j.ID
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want %v", what, err, want)
	}
}

func getJob(t *testing.T, s batch.Store, caller, id string) (batch.Job, []batch.TargetRecord) {
	t.Helper()
	j, ts, err := s.Get(t.Context(), caller, id, true)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return j, ts
}

func storeRoundTrip(t *testing.T, s batch.Store) {
	nj := jobSpec("alice", "a", 3, t0)
	j := mustCreate(t, s, nj, suiteLimits)
	if j.ID != nj.ID || j.Status != batch.JobQueued || j.TargetsTotal != 3 || j.TargetsDone != 0 {
		t.Fatalf("created job = %+v", j)
	}
	got, ts, err := s.Get(t.Context(), "alice", nj.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	if got.Caller != nj.Caller {
		t.Errorf("caller = %+v, want %+v", got.Caller, nj.Caller)
	}
	if got.IdemKey != nj.IdemKey || !got.CreatedAt.Equal(t0) || !got.Lease.Equal(t0) || got.Bytes != 0 {
		t.Errorf("job = %+v", got)
	}
	if len(ts) != 3 {
		t.Fatalf("got %d targets, want 3", len(ts))
	}
	for i, tr := range ts {
		if tr.Idx != i || tr.Status != batch.TargetPending || tr.Result != nil || tr.Error != "" {
			t.Errorf("target %d = %+v", i, tr)
		}
		if tr.Target.URL != nj.Targets[i].URL || tr.Target.Mode != nj.Targets[i].Mode ||
			tr.Target.Question != nj.Targets[i].Question || tr.Target.Recover != nj.Targets[i].Recover {
			t.Errorf("target %d = %+v, want %+v", i, tr.Target, nj.Targets[i])
		}
		if (tr.Target.Context == nil) != (nj.Targets[i].Context == nil) {
			t.Errorf("target %d: context presence lost", i)
		}
	}
	if ts[0].Target.Context == nil || !*ts[0].Target.Context {
		t.Errorf("target 0 context = %v, want true", ts[0].Target.Context)
	}
}

func storeReuseWithinLease(t *testing.T, s batch.Store) {
	lim := suiteLimits
	lim.TTL = time.Hour
	nj := jobSpec("alice", "a", 2, t0)
	first := mustCreate(t, s, nj, lim)

	again := nj
	again.ID, again.Now = "other-id", t0.Add(30*time.Minute)
	j, reused, err := s.Create(t.Context(), again, lim)
	if err != nil || !reused || j.ID != first.ID {
		t.Fatalf("resubmit = %s, %v, %v; want %s reused", j.ID, reused, err, first.ID)
	}
	got, _ := getJob(t, s, "alice", first.ID)
	if !got.Lease.Equal(again.Now) {
		t.Errorf("lease = %v, want bumped to %v", got.Lease, again.Now)
	}
	// Finished (done) jobs are reused too while their lease is unexpired.
	j, _ = mustClaim(t, s, again.Now)
	finishTarget(t, s, j.ID, okFinish(0, "a"), again.Now)
	finishTarget(t, s, j.ID, okFinish(1, "b"), again.Now)
	if _, err := s.FinishJob(t.Context(), j.ID, again.Now); err != nil {
		t.Fatal(err)
	}
	again.Now = again.Now.Add(59 * time.Minute)
	if j, reused, err = s.Create(t.Context(), again, lim); err != nil || !reused || j.Status != batch.JobDone {
		t.Fatalf("resubmit of done job = %+v, %v, %v; want reused done", j, reused, err)
	}
	// After the lease expires, the same list makes a new job.
	again.ID, again.Now = "third-id", again.Now.Add(time.Hour+time.Second)
	if j, reused, err = s.Create(t.Context(), again, lim); err != nil || reused || j.ID != "third-id" {
		t.Fatalf("resubmit after expiry = %s, %v, %v; want new job third-id", j.ID, reused, err)
	}
}

func storeReuseScoped(t *testing.T, s batch.Store) {
	nj := jobSpec("alice", "a", 1, t0)
	mustCreate(t, s, nj, suiteLimits)
	bob := nj
	bob.ID, bob.Caller = "bob-job", batch.Caller{Name: "bob"}
	j, reused, err := s.Create(t.Context(), bob, suiteLimits)
	if err != nil || reused || j.ID != "bob-job" {
		t.Fatalf("other caller, same key = %s, %v, %v; want a new job", j.ID, reused, err)
	}
}

func storeNoReuseAfterCancel(t *testing.T, s batch.Store) {
	nj := jobSpec("alice", "a", 1, t0)
	mustCreate(t, s, nj, suiteLimits)
	if err := s.Cancel(t.Context(), "alice", nj.ID, t0); err != nil {
		t.Fatal(err)
	}
	retry := nj
	retry.ID = "retry-after-cancel"
	mustCreate(t, s, retry, suiteLimits)
	if n, err := s.MarkInFlightFailed(t.Context(), "r", "restart", t0, t0); err != nil || n != 1 {
		t.Fatalf("MarkInFlightFailed = %d, %v; want 1", n, err)
	}
	retry.ID = "retry-after-restart"
	mustCreate(t, s, retry, suiteLimits)
}

func storeCaps(t *testing.T, s batch.Store) {
	lim := batch.Limits{JobsPerCaller: 2, JobsTotal: 3, TTL: time.Hour}
	mustCreate(t, s, jobSpec("alice", "1", 1, t0), lim)
	mustCreate(t, s, jobSpec("alice", "2", 1, t0.Add(1)), lim)
	_, _, err := s.Create(t.Context(), jobSpec("alice", "3", 1, t0.Add(2)), lim)
	wantErr(t, "third alice job", err, batch.ErrCallerBusy)
	mustCreate(t, s, jobSpec("bob", "1", 1, t0.Add(3)), lim)
	_, _, err = s.Create(t.Context(), jobSpec("carol", "1", 1, t0.Add(4)), lim)
	wantErr(t, "fourth live job", err, batch.ErrBusy)
	// A finished job no longer counts.
	j, _ := mustClaim(t, s, t0.Add(5))
	if err := s.Cancel(t.Context(), j.Caller.Name, j.ID, t0.Add(5)); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, jobSpec("carol", "1", 1, t0.Add(6)), lim)
}

func storeCapsAfterReuse(t *testing.T, s batch.Store) {
	lim := batch.Limits{JobsPerCaller: 1, JobsTotal: 1, TTL: time.Hour}
	nj := jobSpec("alice", "1", 1, t0)
	mustCreate(t, s, nj, lim)
	again := nj
	again.ID = "again"
	j, reused, err := s.Create(t.Context(), again, lim)
	if err != nil || !reused || j.ID != nj.ID {
		t.Fatalf("resubmit at the caps = %s, %v, %v; want reuse of %s", j.ID, reused, err, nj.ID)
	}
}

func storeClaimOrder(t *testing.T, s batch.Store) {
	if _, _, err := s.Claim(t.Context(), "r", t0); !errors.Is(err, batch.ErrNotFound) {
		t.Fatalf("Claim on empty store: %v, want ErrNotFound", err)
	}
	mustCreate(t, s, jobSpec("b", "x", 2, t0.Add(time.Second)), suiteLimits)
	mustCreate(t, s, jobSpec("a", "x", 3, t0), suiteLimits)
	j, ts := mustClaim(t, s, t0.Add(time.Minute))
	if j.Caller.Name != "a" || j.Status != batch.JobRunning || j.Runner != "runner-1" {
		t.Fatalf("first claim = %+v, want a's running job", j)
	}
	if len(ts) != 3 || ts[0].Idx != 0 || ts[2].Idx != 2 || ts[1].Target.URL != jobSpec("a", "x", 3, t0).Targets[1].URL {
		t.Fatalf("claimed targets = %+v", ts)
	}
	j2, _ := mustClaim(t, s, t0.Add(time.Minute))
	if j2.Caller.Name != "b" {
		t.Fatalf("second claim = %s, want b's job", j2.Caller.Name)
	}
	if _, _, err := s.Claim(t.Context(), "r", t0); !errors.Is(err, batch.ErrNotFound) {
		t.Fatalf("third claim: %v, want ErrNotFound", err)
	}
}

func storeFinishExactlyOnce(t *testing.T, s batch.Store) {
	nj := jobSpec("alice", "a", 2, t0)
	mustCreate(t, s, nj, suiteLimits)
	j, _ := mustClaim(t, s, t0)
	now := t0.Add(10 * time.Minute)
	wantErr(t, "FinishTarget of a pending target", func() error {
		_, err := s.FinishTarget(t.Context(), j.ID, okFinish(0, "x"), now)
		return err
	}(), batch.ErrFinished)
	fin := okFinish(0, "hello")
	if st := finishTarget(t, s, j.ID, fin, now); st != batch.JobRunning {
		t.Fatalf("FinishTarget status = %s, want running", st)
	}
	_, err := s.FinishTarget(t.Context(), j.ID, okFinish(0, "again"), now.Add(time.Minute))
	wantErr(t, "second FinishTarget", err, batch.ErrFinished)
	wantErr(t, "StartTarget of a done target", s.StartTarget(t.Context(), j.ID, 0, now), batch.ErrFinished)

	got, ts := getJob(t, s, "alice", j.ID)
	if got.TargetsDone != 1 {
		t.Errorf("TargetsDone = %d, want 1", got.TargetsDone)
	}
	if !got.Lease.Equal(now) {
		t.Errorf("lease = %v, want %v", got.Lease, now)
	}
	if got.Bytes != int64(len(fin.Result)) {
		t.Errorf("job bytes = %d, want %d", got.Bytes, len(fin.Result))
	}
	if string(ts[0].Result) != string(fin.Result) || ts[0].Status != batch.TargetDone || ts[0].Outcome != batch.OutcomeOK {
		t.Errorf("target 0 = %+v", ts[0])
	}
	failed := failFinish(1, "blocked: private address")
	finishTarget(t, s, j.ID, failed, now)
	got, ts = getJob(t, s, "alice", j.ID)
	if ts[1].Error != failed.Error || ts[1].Hint != "browser" || ts[1].Outcome != batch.OutcomeBlocked || ts[1].Result != nil {
		t.Errorf("target 1 = %+v", ts[1])
	}
	if want := int64(len(fin.Result) + len(failed.Error)); got.Bytes != want {
		t.Errorf("job bytes = %d, want %d", got.Bytes, want)
	}
	st, err := s.Stats(t.Context())
	if err != nil || st.Bytes != got.Bytes {
		t.Errorf("Stats = %+v, %v; want bytes %d", st, err, got.Bytes)
	}
}

func storeFinishJob(t *testing.T, s batch.Store) {
	f := func(name string, fins []batch.TargetFinish, want batch.JobStatus) {
		t.Helper()
		nj := jobSpec(name, "k", len(fins), t0)
		mustCreate(t, s, nj, suiteLimits)
		j, _ := mustClaim(t, s, t0)
		for _, fin := range fins {
			finishTarget(t, s, j.ID, fin, t0)
		}
		end := t0.Add(time.Hour)
		got, err := s.FinishJob(t.Context(), j.ID, end)
		if err != nil || got != want {
			t.Fatalf("%s: FinishJob = %s, %v; want %s", name, got, err, want)
		}
		job, _ := getJob(t, s, name, j.ID)
		if job.Status != want || !job.FinishedAt.Equal(end) || !job.Lease.Equal(end) {
			t.Errorf("%s: job = %+v", name, job)
		}
		if again, err := s.FinishJob(t.Context(), j.ID, end.Add(time.Hour)); err != nil || again != want {
			t.Errorf("%s: second FinishJob = %s, %v; want %s unchanged", name, again, err, want)
		}
	}
	f("done", []batch.TargetFinish{okFinish(0, "a"), okFinish(1, "b")}, batch.JobDone)
	f("partial", []batch.TargetFinish{okFinish(0, "a"), failFinish(1, "x")}, batch.JobPartial)
	f("failed", []batch.TargetFinish{failFinish(0, "x"), failFinish(1, "y")}, batch.JobFailed)
	_, err := s.FinishJob(t.Context(), "no-such-job", t0)
	wantErr(t, "FinishJob of unknown job", err, batch.ErrNotFound)
}

func storeCancelQueued(t *testing.T, s batch.Store) {
	nj := jobSpec("alice", "a", 2, t0)
	mustCreate(t, s, nj, suiteLimits)
	now := t0.Add(time.Hour)
	if err := s.Cancel(t.Context(), "alice", nj.ID, now); err != nil {
		t.Fatal(err)
	}
	j, ts := getJob(t, s, "alice", nj.ID)
	if j.Status != batch.JobCancelled || !j.Lease.Equal(now) {
		t.Errorf("job = %+v, want cancelled with lease %v", j, now)
	}
	for _, tr := range ts {
		if tr.Status != batch.TargetPending {
			t.Errorf("target %d = %s, want pending", tr.Idx, tr.Status)
		}
	}
	if _, _, err := s.Claim(t.Context(), "r", now); !errors.Is(err, batch.ErrNotFound) {
		t.Errorf("Claim after cancel: %v, want ErrNotFound", err)
	}
}

func storeCancelRunning(t *testing.T, s batch.Store) {
	nj := jobSpec("alice", "a", 3, t0)
	mustCreate(t, s, nj, suiteLimits)
	j, _ := mustClaim(t, s, t0)
	finishTarget(t, s, j.ID, okFinish(0, "a"), t0)
	if err := s.StartTarget(t.Context(), j.ID, 1, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.Cancel(t.Context(), "alice", j.ID, t0); err != nil {
		t.Fatal(err)
	}
	// The in-flight target is still stored, and reports the cancel.
	st, err := s.FinishTarget(t.Context(), j.ID, okFinish(1, "b"), t0)
	if err != nil || st != batch.JobCancelled {
		t.Fatalf("FinishTarget after cancel = %s, %v; want cancelled", st, err)
	}
	wantErr(t, "StartTarget after cancel", s.StartTarget(t.Context(), j.ID, 2, t0), batch.ErrFinished)
	if got, err := s.FinishJob(t.Context(), j.ID, t0); err != nil || got != batch.JobCancelled {
		t.Fatalf("FinishJob after cancel = %s, %v; want cancelled", got, err)
	}
	job, ts := getJob(t, s, "alice", j.ID)
	if job.Status != batch.JobCancelled || job.TargetsDone != 2 {
		t.Errorf("job = %+v", job)
	}
	if ts[1].Status != batch.TargetDone || ts[2].Status != batch.TargetPending {
		t.Errorf("targets = %s, %s; want done, pending", ts[1].Status, ts[2].Status)
	}
}

func storeCancelFinished(t *testing.T, s batch.Store) {
	id := runJob(t, s, "alice", "a", 10, t0)
	wantErr(t, "Cancel of a done job", s.Cancel(t.Context(), "alice", id, t0), batch.ErrFinished)
	wantErr(t, "Cancel of unknown job", s.Cancel(t.Context(), "alice", "nope", t0), batch.ErrNotFound)
}

func storeOwnerScope(t *testing.T, s batch.Store) {
	id := runJob(t, s, "alice", "a", 10, t0)
	ctx := t.Context()
	_, _, err := s.Get(ctx, "mallory", id, true)
	wantErr(t, "Get by another caller", err, batch.ErrNotFound)
	_, _, err = s.GetTarget(ctx, "mallory", id, 0)
	wantErr(t, "GetTarget by another caller", err, batch.ErrNotFound)
	wantErr(t, "Touch by another caller", s.Touch(ctx, "mallory", id, t0.Add(time.Hour)), batch.ErrNotFound)
	wantErr(t, "Cancel by another caller", s.Cancel(ctx, "mallory", id, t0), batch.ErrNotFound)
	if jobs, err := s.List(ctx, "mallory", 100); err != nil || len(jobs) != 0 {
		t.Errorf("List by another caller = %v, %v; want none", jobs, err)
	}
	live := jobSpec("alice", "live", 1, t0)
	mustCreate(t, s, live, suiteLimits)
	wantErr(t, "Cancel of a live job by another caller", s.Cancel(ctx, "mallory", live.ID, t0), batch.ErrNotFound)
	if j, _ := getJob(t, s, "alice", live.ID); j.Status != batch.JobQueued {
		t.Errorf("after a foreign cancel the job is %s, want queued", j.Status)
	}
	if j, _ := getJob(t, s, "alice", id); !j.Lease.Equal(t0) {
		t.Errorf("a foreign touch moved the lease to %v", j.Lease)
	}
}

func storeGetTargetBounds(t *testing.T, s batch.Store) {
	id := runJob(t, s, "alice", "a", 5, t0)
	j, tr, err := s.GetTarget(t.Context(), "alice", id, 0)
	if err != nil || j.ID != id || string(tr.Result) != "xxxxx" || tr.Status != batch.TargetDone {
		t.Fatalf("GetTarget = %+v, %+v, %v", j, tr, err)
	}
	for _, idx := range []int{-1, 1, 1000} {
		_, _, err := s.GetTarget(t.Context(), "alice", id, idx)
		wantErr(t, fmt.Sprintf("GetTarget idx %d", idx), err, batch.ErrNotFound)
	}
	_, ts, err := s.Get(t.Context(), "alice", id, false)
	if err != nil || ts[0].Result != nil {
		t.Fatalf("Get without results loaded result %q, err %v", ts[0].Result, err)
	}
}

func storeList(t *testing.T, s batch.Store) {
	for i := range 5 {
		mustCreate(t, s, jobSpec("alice", fmt.Sprint(i), 1, t0.Add(time.Duration(i)*time.Second)), suiteLimits)
	}
	mustCreate(t, s, jobSpec("bob", "0", 1, t0), suiteLimits)
	jobs, err := s.List(t.Context(), "alice", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 3 {
		t.Fatalf("List returned %d jobs, want 3", len(jobs))
	}
	for i, j := range jobs {
		if want := t0.Add(time.Duration(4-i) * time.Second); !j.CreatedAt.Equal(want) || j.Caller.Name != "alice" {
			t.Errorf("jobs[%d] created %v by %s, want %v by alice", i, j.CreatedAt, j.Caller.Name, want)
		}
	}
}

func storeTouch(t *testing.T, s batch.Store) {
	id := runJob(t, s, "alice", "a", 1, t0)
	later := t0.Add(2 * batch.LeaseGrain)
	if err := s.Touch(t.Context(), "alice", id, later); err != nil {
		t.Fatal(err)
	}
	if j, _ := getJob(t, s, "alice", id); !j.Lease.Equal(later) {
		t.Errorf("lease = %v, want %v", j.Lease, later)
	}
	// A touch within the grain may be skipped, but never moves the lease back.
	if err := s.Touch(t.Context(), "alice", id, later.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if j, _ := getJob(t, s, "alice", id); j.Lease.Before(later) {
		t.Errorf("lease moved back to %v", j.Lease)
	}
	wantErr(t, "Touch of unknown job", s.Touch(t.Context(), "alice", "nope", later), batch.ErrNotFound)
}

func storeSweep(t *testing.T, s batch.Store) {
	old := runJob(t, s, "alice", "old", 100, t0)
	fresh := runJob(t, s, "alice", "fresh", 100, t0.Add(2*time.Hour))
	live := jobSpec("alice", "live", 1, t0.Add(-time.Hour)) // older lease, but live
	mustCreate(t, s, live, suiteLimits)
	n, err := s.Sweep(t.Context(), t0.Add(time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1", n, err)
	}
	_, _, err = s.Get(t.Context(), "alice", old, false)
	wantErr(t, "Get of a swept job", err, batch.ErrNotFound)
	getJob(t, s, "alice", fresh)
	getJob(t, s, "alice", live.ID)
	if st, _ := s.Stats(t.Context()); st.Bytes != 100 {
		t.Errorf("bytes after sweep = %d, want 100", st.Bytes)
	}
	if n, err := s.Sweep(t.Context(), t0.Add(100*time.Hour)); err != nil || n != 1 {
		t.Fatalf("second Sweep = %d, %v; want 1 (never the live job)", n, err)
	}
	getJob(t, s, "alice", live.ID)
}

func storeEvict(t *testing.T, s batch.Store) {
	var ids []string
	for i := range 4 { // leases t0, t0+1m, t0+2m, t0+3m; 100 bytes each
		ids = append(ids, runJob(t, s, "alice", fmt.Sprint(i), 100, t0.Add(time.Duration(i)*time.Minute)))
	}
	// A live job with the oldest lease and some bytes of its own.
	live := jobSpec("alice", "live", 2, t0.Add(-time.Hour))
	mustCreate(t, s, live, suiteLimits)
	j, _ := mustClaim(t, s, t0.Add(-time.Hour))
	finishTarget(t, s, j.ID, okFinish(0, "0123456789"), t0.Add(-time.Hour)) // 24 bytes
	st, _ := s.Stats(t.Context())
	if st.Bytes != 424 {
		t.Fatalf("bytes = %d, want 424", st.Bytes)
	}
	if n, err := s.Evict(t.Context(), 1000); err != nil || n != 0 {
		t.Fatalf("Evict under budget = %d, %v; want 0", n, err)
	}
	n, err := s.Evict(t.Context(), 250)
	if err != nil || n != 2 {
		t.Fatalf("Evict(250) = %d, %v; want 2", n, err)
	}
	for i, id := range ids {
		_, _, err := s.Get(t.Context(), "alice", id, false)
		if gone := errors.Is(err, batch.ErrNotFound); gone != (i < 2) {
			t.Errorf("job %d gone = %v, want %v", i, gone, i < 2)
		}
	}
	if st, _ := s.Stats(t.Context()); st.Bytes != 224 {
		t.Errorf("bytes after evict = %d, want 224", st.Bytes)
	}
	if n, err := s.Evict(t.Context(), 0); err != nil || n != 2 {
		t.Fatalf("Evict(0) = %d, %v; want 2", n, err)
	}
	if got, _ := getJob(t, s, "alice", live.ID); got.Status != batch.JobRunning {
		t.Errorf("live job is %s after eviction", got.Status)
	}
	if st, _ := s.Stats(t.Context()); st.Bytes != 24 {
		t.Errorf("bytes = %d, want 24 (the live job's)", st.Bytes)
	}
}

func storeMarkInFlightFailed(t *testing.T, s batch.Store) {
	done := runJob(t, s, "alice", "done", 10, t0)
	queued := jobSpec("bob", "q", 2, t0.Add(time.Second))
	running := jobSpec("carol", "r", 3, t0)
	mustCreate(t, s, running, suiteLimits)
	j, _ := mustClaim(t, s, t0)
	mustCreate(t, s, queued, suiteLimits)
	finishTarget(t, s, j.ID, okFinish(0, "kept"), t0)
	if err := s.StartTarget(t.Context(), j.ID, 1, t0); err != nil {
		t.Fatal(err)
	}
	// A job cancelled while its target was in flight, then interrupted.
	cancelled := jobSpec("dave", "c", 2, t0.Add(-time.Second))
	mustCreate(t, s, cancelled, suiteLimits)
	cj, _ := mustClaim(t, s, t0)
	if cj.ID != cancelled.ID {
		t.Fatalf("claimed %s, want %s", cj.ID, cancelled.ID)
	}
	if err := s.StartTarget(t.Context(), cj.ID, 0, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.Cancel(t.Context(), "dave", cj.ID, t0); err != nil {
		t.Fatal(err)
	}
	before, _ := s.Stats(t.Context())
	now := t0.Add(time.Hour)
	n, err := s.MarkInFlightFailed(t.Context(), "runner-2", "restart", now, now)
	if err != nil || n != 2 {
		t.Fatalf("MarkInFlightFailed = %d, %v; want 2", n, err)
	}
	rj, ts := getJob(t, s, "carol", running.ID)
	if rj.Status != batch.JobFailed || rj.Error != "restart" || rj.TargetsDone != 2 {
		t.Errorf("running job = %+v", rj)
	}
	if ts[0].Status != batch.TargetDone || string(ts[0].Result) != `{"content":"kept"}` {
		t.Errorf("finished target = %+v, want kept", ts[0])
	}
	if ts[1].Status != batch.TargetFailed || ts[1].Error != "restart" || ts[2].Status != batch.TargetPending {
		t.Errorf("targets = %+v", ts[1:])
	}
	if qj, _ := getJob(t, s, "bob", queued.ID); qj.Status != batch.JobFailed || qj.Error != "restart" {
		t.Errorf("queued job = %+v", qj)
	}
	if dj, _ := getJob(t, s, "alice", done); dj.Status != batch.JobDone {
		t.Errorf("done job = %s, want untouched", dj.Status)
	}
	cjob, cts := getJob(t, s, "dave", cancelled.ID)
	if cjob.Status != batch.JobCancelled || cts[0].Status != batch.TargetFailed || cts[0].Error != "restart" ||
		cts[1].Status != batch.TargetPending || cjob.TargetsDone != 1 {
		t.Errorf("cancelled job = %s %+v, want cancelled with its in-flight target failed", cjob.Status, cts)
	}
	after, _ := s.Stats(t.Context())
	if after.Queued != 0 || after.Running != 0 || after.Bytes != before.Bytes+2*int64(len("restart")) {
		t.Errorf("stats after = %+v, before = %+v", after, before)
	}
}

func storeStats(t *testing.T, s batch.Store) {
	mustCreate(t, s, jobSpec("a", "1", 1, t0), suiteLimits)
	mustCreate(t, s, jobSpec("b", "1", 1, t0.Add(1)), suiteLimits)
	mustCreate(t, s, jobSpec("c", "1", 1, t0.Add(2)), suiteLimits)
	j, _ := mustClaim(t, s, t0)
	finishTarget(t, s, j.ID, okFinish(0, "abc"), t0)
	st, err := s.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Queued != 2 || st.Running != 1 || st.Bytes != int64(len(`{"content":"abc"}`)) {
		t.Errorf("Stats = %+v", st)
	}
}

func storeConcurrentIdentical(t *testing.T, s batch.Store) {
	const rounds = 200
	for round := range rounds {
		nj := jobSpec(fmt.Sprintf("caller%d", round), "same", 2, t0)
		var wg sync.WaitGroup
		var mu sync.Mutex
		ids := map[string]int{}
		created := 0
		start := make(chan struct{})
		for i := range 2 {
			wg.Go(func() {
				<-start
				req := nj
				req.ID = fmt.Sprintf("%s-%d", nj.ID, i)
				j, reused, err := s.Create(context.Background(), req, suiteLimits)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("round %d: Create: %v", round, err)
					return
				}
				ids[j.ID]++
				if !reused {
					created++
				}
			})
		}
		close(start)
		wg.Wait()
		if len(ids) != 1 || created != 1 {
			t.Fatalf("round %d: ids %v, %d created; want one job", round, ids, created)
		}
	}
}

func storeConcurrentCallers(t *testing.T, s batch.Store) {
	lim := batch.Limits{JobsPerCaller: 1, JobsTotal: 8, TTL: time.Hour}
	const callers = 50
	var wg sync.WaitGroup
	var mu sync.Mutex
	created, busy := 0, 0
	start := make(chan struct{})
	for i := range callers {
		wg.Go(func() {
			<-start
			_, _, err := s.Create(context.Background(), jobSpec(fmt.Sprintf("c%d", i), "k", 1, t0), lim)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created++
			case errors.Is(err, batch.ErrBusy):
				busy++
			default:
				t.Errorf("caller %d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if created != 8 || busy != callers-8 {
		t.Fatalf("created %d, busy %d; want 8 and %d", created, busy, callers-8)
	}
	if st, _ := s.Stats(t.Context()); st.Queued != 8 {
		t.Fatalf("queued = %d, want 8", st.Queued)
	}
}
