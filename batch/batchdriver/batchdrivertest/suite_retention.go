package batchdrivertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// retentionCases: the TTL sweep, the byte budget (shared per caller, see
// suite_share.go) and the counters.
var retentionCases = map[string]func(*testing.T, batchdriver.Store){
	"EvictConcurrentNoOverEviction": storeEvictConcurrent,
	"EvictOldestLeaseFirst":         storeEvict,
	"StatsCounts":                   storeStats,
	"SweepExpiredFinished":          storeSweep,
	"SweepSparesHeldCancelledJob":   storeSweepHeld,
}

// sweep sweeps at now with a TTL of ttl: finished jobs whose lease is before
// now minus ttl go.
func sweep(t *testing.T, s batchdriver.Store, now time.Time, ttl time.Duration) int {
	t.Helper()
	n, err := s.Sweep(t.Context(), batchdriver.SweepParams{TTL: ttl, Now: nowAt(now)})
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	return n
}

func evict(t *testing.T, s batchdriver.Store, maxBytes int64) int {
	t.Helper()
	n, err := s.Evict(t.Context(), batchdriver.EvictParams{MaxBytes: maxBytes})
	if err != nil {
		t.Fatalf("Evict: %v", err)
	}
	return n
}

func storeSweep(t *testing.T, s batchdriver.Store) {
	old := runJob(t, s, "alice", "old", 100, t0)
	fresh := runJob(t, s, "alice", "fresh", 100, t0.Add(2*time.Hour))
	live := jobSpec("alice", "live", 1, t0.Add(-time.Hour)) // older lease, but live
	mustCreate(t, s, live)
	if n := sweep(t, s, t0.Add(2*time.Hour), time.Hour); n != 1 {
		t.Fatalf("Sweep = %d, want 1", n)
	}
	_, _, err := s.Get(t.Context(), batchdriver.GetParams{Caller: "alice", JobID: old})
	wantErr(t, "Get of a swept job", err, batch.ErrNotFound)
	getJob(t, s, "alice", fresh)
	getJob(t, s, "alice", live.ID)
	if st := mustStats(t, s); st.Bytes != 100 {
		t.Errorf("bytes after sweep = %d, want 100", st.Bytes)
	}
	if n := sweep(t, s, t0.Add(101*time.Hour), time.Hour); n != 1 {
		t.Fatalf("second Sweep = %d, want 1 (never the live job)", n)
	}
	getJob(t, s, "alice", live.ID)
}

// storeSweepHeld: a cancelled job whose target is still in flight is not
// swept or evicted until its runner stored that target.
func storeSweepHeld(t *testing.T, s batchdriver.Store) {
	p := jobSpec("alice", "a", 2, t0)
	mustCreate(t, s, p)
	claimJob(t, s, runnerA, p.ID, t0)
	finish(t, s, runnerA, p.ID, okFinish(0, "0123456789"), t0)
	cancel(t, s, "alice", p.ID, t0)
	if n := sweep(t, s, t0.Add(2*time.Hour), time.Hour); n != 0 {
		t.Fatalf("swept %d jobs while a cancelled job's target was in flight", n)
	}
	if n := evict(t, s, 0); n != 0 {
		t.Fatalf("evicted %d jobs while a cancelled job's target was in flight", n)
	}
	finish(t, s, runnerA, p.ID, okFinish(1, "b"), t0)
	if n := sweep(t, s, t0.Add(2*time.Hour), time.Hour); n != 1 {
		t.Fatalf("Sweep after the target was stored = %d, want 1", n)
	}
	if st := mustStats(t, s); st.Bytes != 0 {
		t.Errorf("bytes = %d after the sweep, want 0", st.Bytes)
	}
}

func storeEvict(t *testing.T, s batchdriver.Store) {
	var ids []string
	for i := range 4 { // leases t0, t0+1m, t0+2m, t0+3m; 100 bytes each
		ids = append(ids, runJob(t, s, "alice", fmt.Sprint(i), 100, t0.Add(time.Duration(i)*time.Minute)))
	}
	// A live job with the oldest lease and some bytes of its own.
	live := jobSpec("alice", "live", 2, t0.Add(-time.Hour))
	mustCreate(t, s, live)
	claimJob(t, s, runnerA, live.ID, t0.Add(-time.Hour))
	finish(t, s, runnerA, live.ID, okFinish(0, "0123456789"), t0.Add(-time.Hour)) // 24 bytes
	if st := mustStats(t, s); st.Bytes != 424 {
		t.Fatalf("bytes = %d, want 424", st.Bytes)
	}
	if n := evict(t, s, 1000); n != 0 {
		t.Fatalf("Evict under budget = %d, want 0", n)
	}
	if n := evict(t, s, 250); n != 2 {
		t.Fatalf("Evict(250) = %d, want 2", n)
	}
	for i, id := range ids {
		_, _, err := s.Get(t.Context(), batchdriver.GetParams{Caller: "alice", JobID: id})
		if gone := errors.Is(err, batch.ErrNotFound); gone != (i < 2) {
			t.Errorf("job %d gone = %v, want %v", i, gone, i < 2)
		}
	}
	if st := mustStats(t, s); st.Bytes != 224 {
		t.Errorf("bytes after evict = %d, want 224", st.Bytes)
	}
	if n := evict(t, s, 0); n != 2 {
		t.Fatalf("Evict(0) = %d, want 2", n)
	}
	if got, _ := getJob(t, s, "alice", live.ID); got.Status != batch.JobRunning {
		t.Errorf("live job is %s after eviction", got.Status)
	}
	if st := mustStats(t, s); st.Bytes != 24 {
		t.Errorf("bytes = %d, want 24 (the live job's)", st.Bytes)
	}
}

// storeEvictConcurrent: evictions racing (one per node, say) together
// delete no more jobs than one eviction alone would.
func storeEvictConcurrent(t *testing.T, s batchdriver.Store) {
	const jobs = 20
	for i := range jobs {
		runJob(t, s, fmt.Sprintf("c%d", i), "k", 100, t0.Add(time.Duration(i)*time.Minute))
	}
	// 2,000 bytes stored; a budget of 1,450 needs 6 jobs evicted.
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	start := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			<-start
			n, err := s.Evict(context.Background(), batchdriver.EvictParams{MaxBytes: 1450})
			if err != nil {
				t.Errorf("Evict: %v", err)
			}
			mu.Lock()
			total += n
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	if st := mustStats(t, s); total != 6 || st.Bytes != 1400 {
		t.Fatalf("racing evictions deleted %d jobs, leaving %d bytes; want 6 and 1400", total, st.Bytes)
	}
}

func storeStats(t *testing.T, s batchdriver.Store) {
	mustCreate(t, s, jobSpec("a", "1", 1, t0))
	mustCreate(t, s, jobSpec("b", "1", 1, t0.Add(1)))
	mustCreate(t, s, jobSpec("c", "1", 2, t0.Add(2)))
	claimJob(t, s, runnerA, jobSpec("a", "1", 1, t0).ID, t0)
	c := claimJob(t, s, runnerA, jobSpec("b", "1", 1, t0.Add(1)).ID, t0)
	finish(t, s, runnerA, c.Job.ID, okFinish(0, "abc"), t0) // b is done
	st := mustStats(t, s)
	if st.Queued != 1 || st.Running != 1 || st.Bytes != int64(len(`{"content":"abc"}`)) {
		t.Errorf("Stats = %+v", st)
	}
}
