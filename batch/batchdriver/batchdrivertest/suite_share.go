package batchdrivertest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// shareCases are the cases of the byte budget shared per caller (SPEC §12):
// eviction takes from the caller that holds the most bytes first, so one
// caller's writes evict its own results before anyone else's; live bytes
// count, and a small caller is spared.
var shareCases = map[string]func(*testing.T, batchdriver.Store){
	"EvictShareCountsLive":        storeEvictShareCountsLive,
	"EvictShareLargestFirst":      storeEvictShareLargestFirst,
	"EvictShareSparesSmallCaller": storeEvictShareSparesSmallCaller,
}

// wantKept checks which of a caller's jobs are still stored: kept[i] for
// ids[i].
func wantKept(t *testing.T, s batchdriver.Store, caller string, ids []string, kept ...bool) {
	t.Helper()
	for i, id := range ids {
		_, _, err := s.Get(t.Context(), batchdriver.GetParams{Caller: caller, JobID: id, JobOnly: true})
		if err != nil && !errors.Is(err, batch.ErrNotFound) {
			t.Fatalf("Get(%s): %v", id, err)
		}
		if got := err == nil; got != kept[i] {
			t.Errorf("%s's job %d (of %d) stored = %v, want %v", caller, i, len(ids), got, kept[i])
		}
	}
}

// storeEvictShareSparesSmallCaller: caller A's one finished job, with the
// oldest lease of the store, stays readable byte for byte while caller B
// writes three times the budget and a sweep runs after each of B's jobs;
// B loses its own oldest jobs, and the total stays exact.
func storeEvictShareSparesSmallCaller(t *testing.T, s batchdriver.Store) {
	const budget, size = 1000, 100
	a := runJob(t, s, "alice", "a", 2*size, t0)
	var bs []string
	for i := range 3 * budget / size {
		bs = append(bs, runJob(t, s, "bob", fmt.Sprint(i), size, t0.Add(time.Duration(i+1)*time.Minute)))
		evict(t, s, budget)
		if st := mustStats(t, s); st.Bytes > budget {
			t.Fatalf("after bob's job %d: %d bytes stored, over the budget of %d", i, st.Bytes, budget)
		}
	}
	_, ts := getJob(t, s, "alice", a)
	if len(ts) != 1 || len(ts[0].Result) != 2*size {
		t.Fatalf("alice's job lost its result: %+v", ts)
	}
	// alice holds 200 bytes, so bob keeps 800: his 8 newest jobs.
	kept := make([]bool, len(bs))
	for i := len(bs) - 8; i < len(bs); i++ {
		kept[i] = true
	}
	wantKept(t, s, "bob", bs, kept...)
	if st := mustStats(t, s); st.Bytes != budget {
		t.Errorf("bytes = %d after the evictions, want %d", st.Bytes, budget)
	}
}

// storeEvictShareLargestFirst: each eviction takes the oldest lease of the
// caller holding the most bytes, equal holders in name order; a touched
// job's lease moves it behind its caller's other jobs; the smallest caller
// keeps everything.
func storeEvictShareLargestFirst(t *testing.T, s batchdriver.Store) {
	// Leases: carol's the oldest, then alice's, then bob's; 100 bytes a job.
	carol := runJob(t, s, "carol", "0", 100, t0)
	var alice, bob []string
	for i := range 3 {
		alice = append(alice, runJob(t, s, "alice", fmt.Sprint(i), 100, t0.Add(time.Duration(1+i)*time.Minute)))
	}
	for i := range 5 {
		bob = append(bob, runJob(t, s, "bob", fmt.Sprint(i), 100, t0.Add(time.Duration(10+i)*time.Minute)))
	}
	// An owner read of bob's oldest job moves its lease past his others.
	if err := s.Touch(t.Context(), batchdriver.TouchParams{Caller: "bob", JobID: bob[0], Now: nowAt(t0.Add(time.Hour))}); err != nil {
		t.Fatalf("Touch: %v", err)
	}
	// 900 bytes over a budget of 600: bob 500 → 400 → 300, then alice and
	// bob hold 300 each and alice's name comes first.
	if n := evict(t, s, 600); n != 3 {
		t.Fatalf("Evict(600) = %d, want 3", n)
	}
	wantKept(t, s, "bob", bob, true, false, false, true, true)
	wantKept(t, s, "alice", alice, false, true, true)
	wantKept(t, s, "carol", []string{carol}, true)
	if st := mustStats(t, s); st.Bytes != 600 {
		t.Errorf("bytes = %d after the eviction, want 600", st.Bytes)
	}
}

// storeEvictShareCountsLive: a caller's live bytes count toward what it
// holds, though a live job is never evicted; once only a live job is left
// of the largest caller, eviction falls back to the next one.
func storeEvictShareCountsLive(t *testing.T, s batchdriver.Store) {
	a := runJob(t, s, "alice", "a", 300, t0)
	b := runJob(t, s, "bob", "b", 100, t0.Add(time.Minute))
	live := jobSpec("bob", "live", 2, t0.Add(2*time.Minute))
	mustCreate(t, s, live)
	claimJob(t, s, runnerA, live.ID, t0.Add(2*time.Minute))
	finish(t, s, runnerA, live.ID, batchdriver.TargetFinish{Idx: 0, Status: batch.TargetDone, Outcome: batch.OutcomeOK,
		Result: make([]byte, 400)}, t0.Add(2*time.Minute))
	if st := mustStats(t, s); st.Bytes != 800 {
		t.Fatalf("bytes = %d, want 800", st.Bytes)
	}
	// bob holds 500 (400 of them live), alice 300: bob's finished job goes.
	if n := evict(t, s, 700); n != 1 {
		t.Fatalf("Evict(700) = %d, want 1", n)
	}
	wantKept(t, s, "bob", []string{b}, false)
	wantKept(t, s, "alice", []string{a}, true)
	if st := mustStats(t, s); st.Bytes != 700 {
		t.Errorf("bytes = %d, want 700", st.Bytes)
	}
	// Nothing of bob's can go now: alice's job is the only one left.
	if n := evict(t, s, 0); n != 1 {
		t.Fatalf("Evict(0) = %d, want 1", n)
	}
	wantKept(t, s, "alice", []string{a}, false)
	if got, _ := getJob(t, s, "bob", live.ID); got.Status != batch.JobRunning {
		t.Errorf("the live job is %s after the evictions", got.Status)
	}
	if st := mustStats(t, s); st.Bytes != 400 {
		t.Errorf("bytes = %d, want 400 (the live job's)", st.Bytes)
	}
}
