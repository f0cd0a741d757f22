package batchdrivertest

import (
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// clockCases: a call without a Now is on the store's own clock (see the
// clock note on [batch.CreateParams]), and one with a Now is at that
// instant, on the same store. The store's clock is unknown to the suite:
// the cases compare the times the store writes with each other only.
var clockCases = map[string]func(*testing.T, batchdriver.Store){
	"NilNowIsTheStoreClock": storeNilNow,
	"NilNowWebhooks":        storeNilNowWebhooks,
}

// storeNilNow: a job created, reused, claimed, finished and swept without
// a Now gets the times of one clock, in order; bounds are ages on that
// clock; a Now given later is taken against them.
func storeNilNow(t *testing.T, s batchdriver.Store) {
	ctx := t.Context()
	p := jobSpec("alice", "nil", 1, t0)
	p.Now = nil
	j := mustCreate(t, s, p)
	if j.CreatedAt.Year() < 2000 || !j.Lease.Equal(j.CreatedAt) {
		t.Fatalf("created without a Now = created %v, lease %v; want the store's time, both equal", j.CreatedAt, j.Lease)
	}
	again := p
	again.ID = "other-id"
	if got, reused, err := s.Create(ctx, again); err != nil || !reused || got.ID != j.ID {
		t.Fatalf("resubmit without a Now = %s, %v, %v; want %s reused within the TTL", got.ID, reused, err, j.ID)
	}
	if _, ok, err := s.Claim(ctx, batchdriver.ClaimParams{Runner: runnerA}); err != nil || !ok {
		t.Fatalf("Claim without a Now = %v, %v; want the job", ok, err)
	}
	if err := s.Heartbeat(ctx, batchdriver.HeartbeatParams{Runner: runnerA}); err != nil {
		t.Fatalf("Heartbeat without a Now: %v", err)
	}
	if n := reap(t, s, batchdriver.ReapParams{StaleAfter: time.Hour}); n != 0 {
		t.Fatalf("Reap(stale after 1h) without a Now = %d; the heartbeat just written is stale", n)
	}
	st, err := s.FinishTarget(ctx, batchdriver.FinishParams{JobID: j.ID, Runner: runnerA, Target: okFinish(0, "x")})
	if err != nil || st.Status != batch.JobDone {
		t.Fatalf("FinishTarget without a Now = %+v, %v; want done", st, err)
	}
	done, _ := getJob(t, s, "alice", j.ID)
	if done.FinishedAt.Before(done.CreatedAt) || done.Lease.Before(done.CreatedAt) {
		t.Fatalf("job = created %v, finished %v, lease %v; want the finish after the create, on one clock",
			done.CreatedAt, done.FinishedAt, done.Lease)
	}
	if err := s.Touch(ctx, batchdriver.TouchParams{Caller: "alice", JobID: j.ID}); err != nil {
		t.Fatalf("Touch without a Now: %v", err)
	}
	if n, err := s.Sweep(ctx, batchdriver.SweepParams{TTL: time.Hour}); err != nil || n != 0 {
		t.Fatalf("Sweep(TTL 1h) without a Now = %d, %v; want the fresh job kept", n, err)
	}
	// A Now two hours after the lease, on the store's clock: a TTL of an
	// hour has passed.
	later := done.Lease.Add(2 * time.Hour)
	if n, err := s.Sweep(ctx, batchdriver.SweepParams{TTL: time.Hour, Now: nowAt(later)}); err != nil || n != 1 {
		t.Fatalf("Sweep(TTL 1h) at the lease + 2h = %d, %v; want the job swept", n, err)
	}

	// A heartbeat without a Now, judged stale at a Now hours after it.
	held := jobSpec("bob", "held", 2, t0)
	held.Now = nil
	hj := mustCreate(t, s, held)
	if _, ok, err := s.Claim(ctx, batchdriver.ClaimParams{Runner: runnerB}); err != nil || !ok {
		t.Fatalf("Claim without a Now = %v, %v; want the job", ok, err)
	}
	if n := reap(t, s, batchdriver.ReapParams{StaleAfter: time.Hour, Now: nowAt(hj.CreatedAt.Add(3 * time.Hour))}); n != 1 {
		t.Fatalf("Reap(stale after 1h) at the create + 3h = %d; want the job of the silent runner", n)
	}
	wantReaped(t, s, "bob", hj.ID, batch.JobFailed, 0)
}

// storeNilNowWebhooks: an event written and claimed without a Now is due
// at once and then leased on the store's clock; a Now past the lease takes
// it over.
func storeNilNowWebhooks(t *testing.T, s batchdriver.Store) {
	ctx := t.Context()
	p := hookSpec("alice", "nil", 1, t0)
	p.Now = nil
	mustCreate(t, s, p)
	if err := s.Cancel(ctx, batchdriver.CancelParams{Caller: "alice", JobID: p.ID}); err != nil {
		t.Fatalf("Cancel without a Now: %v", err)
	}
	claim := func(now *time.Time) []batchdriver.WebhookDelivery {
		t.Helper()
		ds, err := s.ClaimWebhooks(ctx, batchdriver.ClaimWebhooksParams{Runner: runnerA, Limit: 10, Lease: time.Hour, Now: now})
		if err != nil {
			t.Fatalf("ClaimWebhooks: %v", err)
		}
		return ds
	}
	ds := claim(nil)
	if len(ds) != 1 || ds[0].JobID != p.ID || ds[0].Attempt != 1 || ds[0].Age < 0 || ds[0].FinishedAt.Year() < 2000 {
		t.Fatalf("claim without a Now = %+v; want the event at once, its first attempt", ds)
	}
	if again := claim(nil); len(again) != 0 {
		t.Fatalf("claimed %+v again without a Now, within the hour of lease", again)
	}
	if ds := claim(nowAt(ds[0].FinishedAt.Add(2 * time.Hour))); len(ds) != 1 || ds[0].Attempt != 2 {
		t.Fatalf("claim at the finish + 2h = %+v; want the event taken over, its second attempt", ds)
	}
	err := s.FinishWebhook(ctx, batchdriver.FinishWebhookParams{JobID: p.ID, Runner: runnerA, Attempt: 2})
	if err != nil {
		t.Fatalf("FinishWebhook without a Now: %v", err)
	}
	if ds := claim(nowAt(ds[0].FinishedAt.Add(4 * time.Hour))); len(ds) != 0 {
		t.Fatalf("claimed %+v after the delivery was finished", ds)
	}
}
