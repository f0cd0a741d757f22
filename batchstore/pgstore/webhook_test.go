package pgstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// Without a Now the outbox's due times, leases and ages are the
// database's: a call without one claims the event at once and cannot claim
// it again before the lease has passed by the database's clock, while a
// call with a Now two days ahead takes the lease as passed at that Now.
func TestWebhook_DatabaseClock(t *testing.T) {
	t.Parallel()
	s := openTest(t, Config{})
	p := batchdriver.CreateParams{
		ID: "hook-clock", Caller: batchdriver.Caller{Name: "alice"}, IdemKey: "k", Targets: batchtest.Targets("clock", 1),
		WebhookURL: "https://hooks.example/clock", Limits: testLimits,
	}
	if _, _, err := s.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	if err := s.Cancel(t.Context(), batchdriver.CancelParams{Caller: "alice", JobID: p.ID}); err != nil {
		t.Fatal(err)
	}
	claim := func(now *time.Time) []batchdriver.WebhookDelivery {
		t.Helper()
		ds, err := s.ClaimWebhooks(t.Context(), batchdriver.ClaimWebhooksParams{Runner: "r", Limit: 10, Lease: time.Hour, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	ds := claim(nil)
	if len(ds) != 1 || ds[0].Attempt != 1 || ds[0].Age < 0 || ds[0].Age > time.Minute ||
		time.Since(ds[0].FinishedAt).Abs() > time.Minute {
		t.Fatalf("claim = %+v, want the event, finished now by the database's clock", ds)
	}
	if again := claim(nil); len(again) != 0 {
		t.Fatalf("claimed %+v again within the database's hour of lease", again)
	}
	if ds := claim(nowAt(time.Now().Add(48 * time.Hour))); len(ds) != 1 || ds[0].Attempt != 2 {
		t.Fatalf("claim at a Now two days ahead = %+v, want the event's second attempt", ds)
	}
	fin := batchdriver.FinishWebhookParams{JobID: p.ID, Runner: "r", Attempt: 2, Retry: true}
	if err := s.FinishWebhook(t.Context(), fin); err != nil {
		t.Fatal(err)
	}
	if ds := claim(nil); len(ds) != 1 || ds[0].Attempt != 3 {
		t.Fatalf("claim after a retry due at once = %+v", ds)
	}
}

// Three nodes, each a runner with Deliver on a store of its own, share the
// outbox: every event is delivered exactly once, and no event is ever in
// two deliveries at once.
func TestCluster_WebhooksDeliveredOnce(t *testing.T) {
	t.Parallel()
	stores := cluster(t, 3)
	var mu sync.Mutex
	inFlight, delivered := map[string]int{}, map[string]int{}
	overlaps := 0
	deliver := func(_ context.Context, ev batch.WebhookEvent) error {
		mu.Lock()
		inFlight[ev.JobID]++
		if inFlight[ev.JobID] > 1 {
			overlaps++
		}
		mu.Unlock()
		time.Sleep(2 * time.Millisecond) // long enough for a racing claim to find the event
		mu.Lock()
		defer mu.Unlock()
		inFlight[ev.JobID]--
		delivered[ev.JobID]++
		return nil
	}
	var runners []*batch.Runner
	for i, s := range stores {
		runners = append(runners, node(t, s, batch.Config{
			Deliver: deliver, RunnerID: fmt.Sprintf("node-%d", i), PollInterval: batch.Duration(5 * time.Millisecond),
			JobsPerCaller: 100, JobsTotal: 100,
		}))
	}
	const jobs = 30
	caller := batchdriver.Caller{Name: "alice"}
	var ids []string
	for i := range jobs {
		job, _, err := runners[i%3].SubmitWith(t.Context(), caller, batchtest.Targets(fmt.Sprint("c", i), 1),
			batch.SubmitOptions{WebhookURL: fmt.Sprintf("https://hooks.example/%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, job.ID)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(delivered)
		mu.Unlock()
		if n == jobs {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events delivered within 30s", n, jobs)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // ten polls of every node: time for a wrong second delivery
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if delivered[id] != 1 {
			t.Errorf("job %s delivered %d times", id, delivered[id])
		}
	}
	if overlaps != 0 {
		t.Errorf("%d deliveries overlapped another of the same event", overlaps)
	}
}
