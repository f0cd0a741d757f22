package batch_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// waitAsync runs r.Wait in a goroutine of its own and returns where its
// answer arrives.
func waitAsync(t *testing.T, r *batch.Runner, c batch.Caller, id string, opts batch.WaitOptions) <-chan batch.JobInfo {
	t.Helper()
	got := make(chan batch.JobInfo, 1)
	go func() {
		info, err := r.Wait(context.Background(), c, id, opts)
		if err != nil {
			t.Error(err)
		}
		got <- info
	}()
	return got
}

// fetching starts a runner of one worker on store, which polls hourly,
// submits alice's job of n targets, and returns once its first fetch
// started.
func fetching(t *testing.T, store batchdriver.Store, name string, n int) (*batch.Runner, *batchtest.BlockingFetcher, batch.JobInfo) {
	t.Helper()
	fetch := batchtest.NewBlockingFetcher()
	r := batchtest.NewRunner(t, batch.Config{Store: store, Fetch: fetch.Fetch, Workers: 1, PollInterval: batch.Duration(time.Hour)})
	job, _, err := r.Submit(t.Context(), batch.Caller{Name: "alice"}, batchtest.Targets(name, n))
	if err != nil {
		t.Fatal(err)
	}
	<-fetch.Started
	return r, fetch, job
}

// done checks that the wait answering on got wakes, with its job done.
func done(t *testing.T, got <-chan batch.JobInfo) {
	t.Helper()
	select {
	case info := <-got:
		if info.Status != batch.JobDone {
			t.Fatalf("waited job = %s, want done", info.Status)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not wake when its job finished")
	}
}

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
	waited := waitAsync(t, r, batch.Caller{Name: "b"}, waiting.ID, batch.WaitOptions{Timeout: batch.MaxWait})
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
	done(t, waited)
}

// slowFedStore is a countingStore with a change feed that reports a
// target write before the write returns, and a write that takes a while to
// return after its commit, as a database's round trip does.
type slowFedStore struct {
	countingStore
	feed batchdriver.ChangeFeed
}

func (s *slowFedStore) Subscribe(fn func(string)) func() { return s.feed.Subscribe(fn) }

func (s *slowFedStore) FinishTarget(ctx context.Context, p batchdriver.FinishParams) (batchdriver.Step, error) {
	step, err := s.Store.FinishTarget(ctx, p)
	time.Sleep(20 * time.Millisecond)
	return step, err
}

// A wait for a job's end does not read the job at each of its target
// writes that leave it live, though both the store's feed and the runner
// report each write; the last write wakes it.
func TestRunner_WaitForEndSleepsThroughWrites(t *testing.T) {
	t.Parallel()
	mem := batchtest.NewStore()
	store := &slowFedStore{countingStore: countingStore{Store: mem}, feed: mem}
	r, fetch, job := fetching(t, store, "waited", 5)
	alice := batch.Caller{Name: "alice"}
	waited := waitAsync(t, r, alice, job.ID, batch.WaitOptions{Timeout: batch.MaxWait})
	time.Sleep(50 * time.Millisecond) // the waiter's first reads
	store.watched.Store(job.ID)
	for range 4 {
		fetch.Release()
		<-fetch.Started // the write returned: the next target started
	}
	time.Sleep(50 * time.Millisecond)
	if n := store.reads.Load(); n != 0 {
		t.Fatalf("the wait for the job's end read it %d times over 4 writes that left it live", n)
	}
	// A wait for progress wakes at the next write.
	since := 4
	progress := waitAsync(t, r, alice, job.ID, batch.WaitOptions{Timeout: batch.MaxWait, Since: &since})
	time.Sleep(50 * time.Millisecond)
	fetch.Release()
	done(t, progress)
	done(t, waited)
}

// watchingStore records the watches a runner's waits make.
type watchingStore struct {
	batchdriver.Store
	mu      sync.Mutex
	watches map[string]int // job id → watches under way
	total   int
}

func (s *watchingStore) Subscribe(fn func(string)) func() {
	return s.Store.(batchdriver.ChangeFeed).Subscribe(fn)
}

func (s *watchingStore) Watch(_ context.Context, id string) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watches[id]++
	s.total++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.watches[id]--
	}
}

func (s *watchingStore) state(id string) (now, total int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watches[id], s.total
}

// A wait watches its job, through a store's WatchFeed, from the moment it
// finds the job unfinished until it returns; a wait that answers at once
// watches nothing.
func TestRunner_WaitWatchesItsJob(t *testing.T) {
	t.Parallel()
	store := &watchingStore{Store: batchtest.NewStore(), watches: map[string]int{}}
	r, fetch, job := fetching(t, store, "watched", 1)
	alice := batch.Caller{Name: "alice"}
	waited := waitAsync(t, r, alice, job.ID, batch.WaitOptions{Timeout: batch.MaxWait})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if now, _ := store.state(job.ID); now == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the wait did not watch its job")
		}
	}
	fetch.Release()
	if info := <-waited; info.Status != batch.JobDone {
		t.Fatalf("the wait answered %s, want done", info.Status)
	}
	if now, total := store.state(job.ID); now != 0 || total != 1 {
		t.Fatalf("after the wait: %d watches under way of %d, want 0 of 1", now, total)
	}
	if _, err := r.Wait(t.Context(), alice, job.ID, batch.WaitOptions{Timeout: batch.MaxWait}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Wait(t.Context(), batch.Caller{Name: "mallory"}, job.ID, batch.WaitOptions{Timeout: batch.MaxWait}); err == nil {
		t.Fatal("another caller's wait found the job")
	}
	if _, total := store.state(job.ID); total != 1 {
		t.Fatalf("waits that answered at once made %d watches in all, want the first's 1", total)
	}
}
