package batch_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// countingStore counts the status reads of one job.
type countingStore struct {
	batchdriver.Store
	watched atomic.Value // string
	reads   atomic.Int64
}

func (s *countingStore) Get(ctx context.Context, p batchdriver.GetParams) (batchdriver.Job, []batchdriver.TargetRecord, error) {
	if w, _ := s.watched.Load().(string); p.JobID == w {
		s.reads.Add(1)
	}
	return s.Store.Get(ctx, p)
}

// A waiter wakes for changes to its own job only: progress of another job
// on the same runner does not make it re-read the store.
func TestRunner_WaitWakesPerJob(t *testing.T) {
	t.Parallel()
	store := &countingStore{Store: batchtest.NewStore()}
	fetch := batchtest.NewBlockingFetcher()
	r := batchtest.NewRunner(t, batch.Config{Store: store, Fetch: fetch.Fetch, Workers: 1, PollInterval: batch.Duration(time.Hour)})
	busy, _, err := r.Submit(t.Context(), batch.Caller{Name: "a"}, batchtest.Targets("busy", 4))
	if err != nil {
		t.Fatal(err)
	}
	<-fetch.Started
	waiting, _, err := r.Submit(t.Context(), batch.Caller{Name: "b"}, batchtest.Targets("waiting", 1)) // queued behind it
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan batch.JobInfo, 1)
	go func() {
		info, err := r.Wait(context.Background(), batch.Caller{Name: "b"}, waiting.ID, batch.WaitOptions{Timeout: batch.MaxWait})
		if err != nil {
			t.Error(err)
		}
		waited <- info
	}()
	// Let the waiter read once, then count its reads from here on.
	time.Sleep(50 * time.Millisecond)
	store.watched.Store(waiting.ID)
	for i := range 3 { // three targets of the other job complete
		fetch.Release()
		<-fetch.Started
		deadline := time.Now().Add(10 * time.Second)
		for {
			info, err := r.Status(t.Context(), batch.Caller{Name: "a"}, busy.ID, batch.StatusOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if info.TargetsDone == i+1 || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if n := store.reads.Load(); n != 0 {
		t.Fatalf("the waiter on job b re-read it %d times while only job a changed", n)
	}
	fetch.Release() // job a's last target; then job b runs
	fetch.Release()
	select {
	case info := <-waited:
		if info.Status != batch.JobDone {
			t.Fatalf("waited job = %s, want done", info.Status)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not wake when its job finished")
	}
}
