package batchdrivertest

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// readCases: owner-scoped reads, the list and the lease touch.
var readCases = map[string]func(*testing.T, batchdriver.Store){
	"GetJobOnly":       storeGetJobOnly,
	"GetTargetBounds":  storeGetTargetBounds,
	"ListNewestFirst":  storeList,
	"OwnerScope":       storeOwnerScope,
	"TouchSlidesLease": storeTouch,
}

func storeOwnerScope(t *testing.T, s batchdriver.Store) {
	id := runJob(t, s, "alice", "a", 10, t0)
	ctx := t.Context()
	_, _, err := s.Get(ctx, batchdriver.GetParams{Caller: "mallory", JobID: id, Results: true})
	wantErr(t, "Get by another caller", err, batch.ErrNotFound)
	_, _, err = s.GetTarget(ctx, batchdriver.GetTargetParams{Caller: "mallory", JobID: id})
	wantErr(t, "GetTarget by another caller", err, batch.ErrNotFound)
	err = s.Touch(ctx, batchdriver.TouchParams{Caller: "mallory", JobID: id, Now: nowAt(t0.Add(time.Hour))})
	wantErr(t, "Touch by another caller", err, batch.ErrNotFound)
	err = s.Cancel(ctx, batchdriver.CancelParams{Caller: "mallory", JobID: id, Now: nowAt(t0)})
	wantErr(t, "Cancel by another caller", err, batch.ErrNotFound)
	if jobs, err := s.List(ctx, batchdriver.ListParams{Caller: "mallory", Limit: 100}); err != nil || len(jobs) != 0 {
		t.Errorf("List by another caller = %v, %v; want none", jobs, err)
	}
	live := jobSpec("alice", "live", 1, t0)
	mustCreate(t, s, live)
	err = s.Cancel(ctx, batchdriver.CancelParams{Caller: "mallory", JobID: live.ID, Now: nowAt(t0)})
	wantErr(t, "Cancel of a live job by another caller", err, batch.ErrNotFound)
	if j, _ := getJob(t, s, "alice", live.ID); j.Status != batch.JobQueued {
		t.Errorf("after a foreign cancel the job is %s, want queued", j.Status)
	}
	if j, _ := getJob(t, s, "alice", id); !j.Lease.Equal(t0) {
		t.Errorf("a foreign touch moved the lease to %v", j.Lease)
	}
}

func storeGetTargetBounds(t *testing.T, s batchdriver.Store) {
	id := runJob(t, s, "alice", "a", 5, t0)
	j, tr, err := s.GetTarget(t.Context(), batchdriver.GetTargetParams{Caller: "alice", JobID: id})
	if err != nil || j.ID != id || string(tr.Result) != "xxxxx" || tr.Status != batch.TargetDone {
		t.Fatalf("GetTarget = %+v, %+v, %v", j, tr, err)
	}
	for _, idx := range []int{-1, 1, 1000} {
		_, _, err := s.GetTarget(t.Context(), batchdriver.GetTargetParams{Caller: "alice", JobID: id, Idx: idx})
		wantErr(t, fmt.Sprintf("GetTarget idx %d", idx), err, batch.ErrNotFound)
	}
	_, ts, err := s.Get(t.Context(), batchdriver.GetParams{Caller: "alice", JobID: id})
	if err != nil || ts[0].Result != nil {
		t.Fatalf("Get without results loaded result %q, err %v", ts[0].Result, err)
	}
}

func storeList(t *testing.T, s batchdriver.Store) {
	for i := range 5 {
		mustCreate(t, s, jobSpec("alice", fmt.Sprint(i), 1, t0.Add(time.Duration(i)*time.Second)))
	}
	mustCreate(t, s, jobSpec("bob", "0", 1, t0))
	jobs, err := s.List(t.Context(), batchdriver.ListParams{Caller: "alice", Limit: 3})
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
	if jobs, err := s.List(t.Context(), batchdriver.ListParams{Caller: "alice", Limit: 0}); err != nil || len(jobs) != 0 {
		t.Errorf("List with limit 0 = %d jobs, %v; want none", len(jobs), err)
	}
}

func storeTouch(t *testing.T, s batchdriver.Store) {
	id := runJob(t, s, "alice", "a", 1, t0)
	later := t0.Add(2 * batchdriver.LeaseGrain)
	touch := func(at time.Time) {
		t.Helper()
		if err := s.Touch(t.Context(), batchdriver.TouchParams{Caller: "alice", JobID: id, Now: nowAt(at)}); err != nil {
			t.Fatal(err)
		}
	}
	touch(later)
	if j, _ := getJob(t, s, "alice", id); !j.Lease.Equal(later) {
		t.Errorf("lease = %v, want %v", j.Lease, later)
	}
	// A touch within the grain may be skipped, but never moves the lease back.
	touch(later.Add(time.Second))
	touch(t0)
	if j, _ := getJob(t, s, "alice", id); j.Lease.Before(later) {
		t.Errorf("lease moved back to %v", j.Lease)
	}
	err := s.Touch(t.Context(), batchdriver.TouchParams{Caller: "alice", JobID: "nope", Now: nowAt(later)})
	wantErr(t, "Touch of unknown job", err, batch.ErrNotFound)
}

// storeGetJobOnly: the job-only read answers the same job as a full read,
// without targets, for a job held mid-drain as for a finished one.
func storeGetJobOnly(t *testing.T, s batchdriver.Store) {
	p := jobSpec("alice", "a", 3, t0)
	mustCreate(t, s, p)
	claimJob(t, s, runnerA, p.ID, t0)
	finish(t, s, runnerA, p.ID, okFinish(0, "zero"), t0.Add(2*batchdriver.LeaseGrain))
	check := func(what string) {
		t.Helper()
		full, _ := getJob(t, s, "alice", p.ID)
		j, ts, err := s.Get(t.Context(), batchdriver.GetParams{Caller: "alice", JobID: p.ID, JobOnly: true})
		if err != nil || ts != nil || !reflect.DeepEqual(j, full) {
			t.Fatalf("%s: job-only read = %+v, %d targets, %v; want %+v and none", what, j, len(ts), err, full)
		}
	}
	check("held")
	finish(t, s, runnerA, p.ID, failFinish(1, "x"), t0)
	finish(t, s, runnerA, p.ID, okFinish(2, "two"), t0)
	check("finished")
	_, _, err := s.Get(t.Context(), batchdriver.GetParams{Caller: "mallory", JobID: p.ID, JobOnly: true})
	wantErr(t, "job-only read by another caller", err, batch.ErrNotFound)
}
