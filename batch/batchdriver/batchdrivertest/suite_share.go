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
// count, and a caller within its share is spared, even when that leaves
// the store over budget.
var shareCases = map[string]func(*testing.T, batchdriver.Store){
	"EvictShareCountsLive":        storeEvictShareCountsLive,
	"EvictShareLargestFirst":      storeEvictShareLargestFirst,
	"EvictShareLiveSparesOthers":  storeEvictShareLiveSparesOthers,
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
// of a caller over its share, eviction stops rather than take from a
// caller within its share: the store stays over budget until the live
// bytes are released, and then they go first.
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
	// bob holds 500 (400 of them live), alice 300, the share 350: bob's
	// finished job goes.
	if n := evict(t, s, 700); n != 1 {
		t.Fatalf("Evict(700) = %d, want 1", n)
	}
	wantKept(t, s, "bob", []string{b}, false)
	wantKept(t, s, "alice", []string{a}, true)
	if st := mustStats(t, s); st.Bytes != 700 {
		t.Errorf("bytes = %d, want 700", st.Bytes)
	}
	// A share of 300: bob holds 400, all of it live, and alice 300, within
	// her share. Nothing goes: the store stays over budget.
	n := evict(t, s, 600)
	wantKept(t, s, "alice", []string{a}, true)
	if n != 0 {
		t.Fatalf("Evict(600) = %d with only live bytes over their share, want 0", n)
	}
	if st := mustStats(t, s); st.Bytes != 700 {
		t.Errorf("bytes = %d, want 700 (over the budget of 600 until the live bytes are released)", st.Bytes)
	}
	// bob's job ends (14 bytes more): his 414 bytes are evictable now, and
	// over his share, so they go, and alice keeps hers.
	finish(t, s, runnerA, live.ID, okFinish(1, ""), t0.Add(3*time.Minute))
	if n := evict(t, s, 600); n != 1 {
		t.Fatalf("Evict(600) after the live job ended = %d, want 1", n)
	}
	wantKept(t, s, "bob", []string{live.ID}, false)
	wantKept(t, s, "alice", []string{a}, true)
	if st := mustStats(t, s); st.Bytes != 300 {
		t.Errorf("bytes = %d, want 300 (alice's)", st.Bytes)
	}
}

// storeEvictShareLiveSparesOthers: the review's attack. A
// budget of 1,200 bytes; alice and carol each hold 300 bytes in one
// finished job, within their share of 400; mallory holds 700 in one live
// job. No eviction takes alice's or carol's job: the store stays over
// budget until mallory's bytes are released, and then hers go.
func storeEvictShareLiveSparesOthers(t *testing.T, s batchdriver.Store) {
	const budget = 1200
	alice := runJob(t, s, "alice", "a", 300, t0)
	carol := runJob(t, s, "carol", "c", 300, t0.Add(time.Minute))
	live := jobSpec("mallory", "live", 2, t0.Add(2*time.Minute))
	mustCreate(t, s, live)
	claimJob(t, s, runnerA, live.ID, t0.Add(2*time.Minute))
	finish(t, s, runnerA, live.ID, batchdriver.TargetFinish{Idx: 0, Status: batch.TargetDone, Outcome: batch.OutcomeOK,
		Result: make([]byte, 700)}, t0.Add(2*time.Minute))
	if st := mustStats(t, s); st.Bytes != 1300 {
		t.Fatalf("bytes = %d, want 1300", st.Bytes)
	}
	for range 2 { // a second pass changes nothing either
		n := evict(t, s, budget)
		wantKept(t, s, "alice", []string{alice}, true)
		wantKept(t, s, "carol", []string{carol}, true)
		if n != 0 {
			t.Fatalf("Evict(%d) = %d while only mallory's live bytes are over her share, want 0", budget, n)
		}
	}
	if st := mustStats(t, s); st.Bytes != 1300 {
		t.Errorf("bytes = %d, want 1300 (over the budget until the live bytes are released)", st.Bytes)
	}
	// mallory's job ends (14 bytes more): her job is evictable, and she is
	// over her share, so it goes, and alice and carol keep theirs.
	finish(t, s, runnerA, live.ID, okFinish(1, ""), t0.Add(3*time.Minute))
	if n := evict(t, s, budget); n != 1 {
		t.Fatalf("Evict(%d) after mallory's job ended = %d, want 1", budget, n)
	}
	wantKept(t, s, "mallory", []string{live.ID}, false)
	wantKept(t, s, "alice", []string{alice}, true)
	wantKept(t, s, "carol", []string{carol}, true)
	if st := mustStats(t, s); st.Bytes != 600 {
		t.Errorf("bytes = %d, want 600", st.Bytes)
	}
}
