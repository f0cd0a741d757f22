package pgstore

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// Three nodes release jobs of six callers (each release moves a counter
// row and appends its caller's delta in one statement) while every node
// evicts and sweeps in a loop, folding the deltas into the caller rows, and
// owners touch their jobs: no statement fails (a deadlock between the
// counter rows and the caller rows would, with 40P01), and the
// per-caller counters match the rows afterwards (checkCounters, at
// cleanup).
func TestCluster_EvictWhileReleasing(t *testing.T) {
	t.Parallel()
	stores := cluster(t, 3)
	const callers, perCaller = 6, 8
	var wg sync.WaitGroup
	var created atomic.Int64
	done := make(chan struct{})
	for c := range callers {
		s := stores[c%len(stores)]
		wg.Go(func() {
			caller := fmt.Sprintf("ev%d", c)
			for i := range perCaller {
				id := fmt.Sprintf("%s-%d", caller, i)
				_, _, err := s.Create(t.Context(), batchdriver.CreateParams{
					ID: id, Caller: batchdriver.Caller{Name: caller}, IdemKey: id,
					Targets: []batchdriver.Target{{URL: "https://example.test/" + id + "/0"}, {URL: "https://example.test/" + id + "/1"}},
					Limits:  testLimits,
				})
				if err != nil {
					t.Errorf("Create(%s): %v", id, err)
					return
				}
			}
			created.Add(1)
		})
	}
	wg.Wait()
	// Drain every job through some node, one runner per node.
	for n, s := range stores {
		runner := fmt.Sprintf("node-%d", n)
		wg.Go(func() {
			for {
				c, ok, err := s.Claim(t.Context(), batchdriver.ClaimParams{Runner: runner})
				if err != nil {
					t.Errorf("Claim: %v", err)
					return
				}
				if !ok {
					return
				}
				for idx := range c.Job.TargetsTotal {
					fin := batchdriver.TargetFinish{Idx: idx, Status: batchdriver.TargetDone, Outcome: batchdriver.OutcomeOK,
						Result: make([]byte, 100*(1+idx))}
					if _, err := s.FinishTarget(t.Context(), batchdriver.FinishParams{JobID: c.Job.ID, Runner: runner, Target: fin}); err != nil {
						t.Errorf("FinishTarget(%s, %d): %v", c.Job.ID, idx, err)
						return
					}
				}
			}
		})
	}
	var gc sync.WaitGroup
	var evicted atomic.Int64
	for n, s := range stores {
		gc.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				k, err := s.Evict(t.Context(), batchdriver.EvictParams{MaxBytes: 3000})
				if err != nil {
					t.Errorf("node %d: Evict: %v", n, err)
					return
				}
				evicted.Add(int64(k))
				if _, err := s.Sweep(t.Context(), batchdriver.SweepParams{TTL: time.Hour}); err != nil {
					t.Errorf("node %d: Sweep: %v", n, err)
					return
				}
				caller := fmt.Sprintf("ev%d", i%callers)
				id := fmt.Sprintf("%s-%d", caller, i%perCaller)
				err = s.Touch(t.Context(), batchdriver.TouchParams{Caller: caller, JobID: id})
				if err != nil && !errors.Is(err, batchdriver.ErrNotFound) {
					t.Errorf("node %d: Touch: %v", n, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(done)
	gc.Wait()
	// One pass after the drain: the store ends within its budget.
	if _, err := stores[0].Evict(t.Context(), batchdriver.EvictParams{MaxBytes: 3000}); err != nil {
		t.Fatalf("Evict: %v", err)
	}
	st, err := stores[0].Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Bytes > 3000 || st.Queued != 0 || st.Running != 0 {
		t.Errorf("after the drain: %+v, want no live job and at most 3000 bytes", st)
	}
	t.Logf("%d callers × %d jobs drained on 3 nodes; %d evicted while draining; %d bytes left", created.Load(), perCaller, evicted.Load(), st.Bytes)
}
