package batch_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// heldStore holds the drain writes of the jobs whose first target's URL
// starts with prefix until release is closed, and reports each it holds.
type heldStore struct {
	batchdriver.Store
	prefix  string
	holding chan int // the idx of each write it holds
	release chan struct{}
}

func (s *heldStore) FinishTarget(ctx context.Context, p batchdriver.FinishParams) (batchdriver.Step, error) {
	_, ts, err := s.Store.Get(ctx, batchdriver.GetParams{JobID: p.JobID, Caller: "alice"})
	if err == nil && len(ts) > 0 && strings.HasPrefix(ts[0].Target.URL, s.prefix) {
		s.holding <- p.Target.Idx
		<-s.release
	}
	return s.Store.FinishTarget(ctx, p)
}

// started returns the URL of the next fetch to start.
func started(t *testing.T, fetch *batchtest.BlockingFetcher) string {
	t.Helper()
	select {
	case u := <-fetch.Started:
		return u
	case <-time.After(10 * time.Second):
		t.Fatal("no fetch started")
		return ""
	}
}

// With Drains above Workers, a fetch slot goes to another job while a
// target is written: the second drain's fetch starts while the first
// job's write is held, and no more than Workers fetches ever run at once.
func TestRunner_DrainsFetchWhileAWriteIsHeld(t *testing.T) {
	t.Parallel()
	store := &heldStore{Store: batchtest.NewStore(), prefix: "https://example.test/slow/", holding: make(chan int, 4), release: make(chan struct{})}
	fetch := batchtest.NewBlockingFetcher()
	r := batchtest.NewRunner(t, batch.Config{Store: store, Fetch: fetch.Fetch, Workers: 1, Drains: 2, JobsPerCaller: 2, PollInterval: batch.Duration(time.Hour)})
	alice := batch.Caller{Name: "alice"}
	slow, _, err := r.Submit(t.Context(), alice, batchtest.Targets("slow", 2))
	if err != nil {
		t.Fatal(err)
	}
	if u := started(t, fetch); !strings.HasPrefix(u, "https://example.test/slow/") {
		t.Fatalf("first fetch %s, want the slow job's", u)
	}
	fast, _, err := r.Submit(t.Context(), alice, batchtest.Targets("fast", 2))
	if err != nil {
		t.Fatal(err)
	}
	fetch.Release() // the slow job's target 0 returns; its write is held
	if idx := <-store.holding; idx != 0 {
		t.Fatalf("held write of target %d, want 0", idx)
	}
	if u := started(t, fetch); !strings.HasPrefix(u, "https://example.test/fast/") {
		t.Fatalf("fetch %s started while the slow job's write was held, want the fast job's", u)
	}
	fetch.Release()
	if u := started(t, fetch); !strings.HasPrefix(u, "https://example.test/fast/") {
		t.Fatalf("fetch %s started, want the fast job's second", u)
	}
	fetch.Release()
	done(t, waitAsync(t, r, alice, fast.ID, batch.WaitOptions{Timeout: batch.MaxWait}))
	if info, err := r.Status(t.Context(), alice, slow.ID, batch.StatusOptions{JobOnly: true}); err != nil || info.TargetsDone != 0 {
		t.Fatalf("slow job while its write is held: %+v, %v; want no target done", info, err)
	}

	close(store.release)
	if u := started(t, fetch); !strings.HasPrefix(u, "https://example.test/slow/") {
		t.Fatalf("fetch %s, want the slow job's second", u)
	}
	fetch.Release()
	done(t, waitAsync(t, r, alice, slow.ID, batch.WaitOptions{Timeout: batch.MaxWait}))
	if p := fetch.Peak(); p != 1 {
		t.Errorf("%d fetches ran at once, want at most Workers (1)", p)
	}
}

// A drain that waits for a fetch slot when the runner closes has not
// fetched its target: with Resume, Close hands its job back with the
// target pending, and nothing is left running.
func TestRunner_DrainWaitingForASlotIsHandedOnByClose(t *testing.T) {
	t.Parallel()
	store := batchtest.NewStore()
	fetch := batchtest.NewBlockingFetcher()
	r := batchtest.NewRunner(t, batch.Config{Store: store, Fetch: fetch.Fetch, Workers: 1, Drains: 2, JobsPerCaller: 2, Resume: true,
		CloseGrace: batch.Duration(50 * time.Millisecond), PollInterval: batch.Duration(time.Hour)})
	alice := batch.Caller{Name: "alice"}
	first, _, err := r.Submit(t.Context(), alice, batchtest.Targets("first", 2))
	if err != nil {
		t.Fatal(err)
	}
	started(t, fetch)
	second, _, err := r.Submit(t.Context(), alice, batchtest.Targets("second", 1))
	if err != nil {
		t.Fatal(err)
	}
	// The second drain claims its job and waits for the slot.
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := r.Status(t.Context(), alice, second.ID, batch.StatusOptions{JobOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if info.Status == batch.JobRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("second job still %s: no second drain claimed it", info.Status)
		}
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id, want string
	}{{first.ID, "interrupted"}, {second.ID, "pending"}} {
		job, ts, err := store.Get(t.Context(), batchdriver.GetParams{Caller: alice.Name, JobID: c.id})
		if err != nil {
			t.Fatal(err)
		}
		got := string(ts[0].Status)
		if ts[0].Status == batch.TargetFailed {
			got = string(ts[0].Outcome)
		}
		if job.Status != batch.JobQueued || got != c.want {
			t.Errorf("job %s after Close: %s, its target %s; want queued, %s", c.id, job.Status, got, c.want)
		}
	}
	if calls := fetch.Calls(); len(calls) != 1 {
		t.Errorf("fetches %v, want the first job's only", calls)
	}
}
