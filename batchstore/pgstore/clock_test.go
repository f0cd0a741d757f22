package pgstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// The conformance suites run in the store's default mode, each call with
// the Now of the suite's fake clock. These tests prove what a call without
// a Now gets, the database's clock: nodes whose clocks disagree by twenty
// minutes still agree on leases and staleness. Each also runs with the
// skewed clocks reaching the store (the runners' Config.Now), where the
// same skew breaks the cluster, to show that the test would catch a
// runner or store that compared the nodes' clocks.

// skewed returns a clock that is off the real one by d.
func skewed(d time.Duration) func() time.Time {
	return func() time.Time { return time.Now().Add(d) }
}

// hostClock is a node whose host clock is off: its runner has the skewed
// clock as Config.Now, for every time it takes itself (its store health,
// its touch decisions), but a runner without Config.Now passes no time to
// the store, so none reaches it.
type hostClock struct{ batchdriver.Store }

func (h hostClock) Subscribe(fn func(string)) func() {
	return h.Store.(batchdriver.ChangeFeed).Subscribe(fn)
}

func (h hostClock) Watch(ctx context.Context, id string) func() {
	return h.Store.(batchdriver.WatchFeed).Watch(ctx, id)
}

func (h hostClock) Create(ctx context.Context, p batchdriver.CreateParams) (batchdriver.Job, bool, error) {
	p.Now = nil
	return h.Store.Create(ctx, p)
}

func (h hostClock) Claim(ctx context.Context, p batchdriver.ClaimParams) (batchdriver.Claimed, bool, error) {
	p.Now = nil
	return h.Store.Claim(ctx, p)
}

func (h hostClock) FinishTarget(ctx context.Context, p batchdriver.FinishParams) (batchdriver.Step, error) {
	p.Now = nil
	return h.Store.FinishTarget(ctx, p)
}

func (h hostClock) Cancel(ctx context.Context, p batchdriver.CancelParams) error {
	p.Now = nil
	return h.Store.Cancel(ctx, p)
}

func (h hostClock) Touch(ctx context.Context, p batchdriver.TouchParams) error {
	p.Now = nil
	return h.Store.Touch(ctx, p)
}

func (h hostClock) Sweep(ctx context.Context, p batchdriver.SweepParams) (int, error) {
	p.Now = nil
	return h.Store.Sweep(ctx, p)
}

func (h hostClock) Heartbeat(ctx context.Context, p batchdriver.HeartbeatParams) error {
	p.Now = nil
	return h.Store.Heartbeat(ctx, p)
}

func (h hostClock) Reap(ctx context.Context, p batchdriver.ReapParams) (int, error) {
	p.Now = nil
	return h.Store.Reap(ctx, p)
}

func (h hostClock) ClaimWebhooks(ctx context.Context, p batchdriver.ClaimWebhooksParams) ([]batchdriver.WebhookDelivery, error) {
	p.Now = nil
	return h.Store.ClaimWebhooks(ctx, p)
}

func (h hostClock) FinishWebhook(ctx context.Context, p batchdriver.FinishWebhookParams) error {
	p.Now = nil
	return h.Store.FinishWebhook(ctx, p)
}

// skewedNodes opens two stores on one schema and returns a function that
// starts a runner on each, its clock off by d: the first drains, the
// others only accept and read. With dbClock the skewed clock stays the
// node's own (see hostClock); without it, it reaches the store.
func skewedNodes(t *testing.T, dbClock bool, cfg batch.Config) func(d time.Duration) *batch.Runner {
	t.Helper()
	schema := newSchema(t)
	stores := []*Store{openOn(t, Config{Schema: schema}), openOn(t, Config{Schema: schema})}
	n := 0
	return func(d time.Duration) *batch.Runner {
		cfg := cfg
		cfg.Now, cfg.RunnerID = skewed(d), fmt.Sprintf("node-%d", n)
		var s batchdriver.Store = stores[n]
		if dbClock {
			s = hostClock{s}
		}
		if n > 0 {
			s = acceptOnly{s}
		}
		n++
		return node(t, s, cfg)
	}
}

// The node ahead does not take the node behind for dead, after its
// heartbeats or in its sweeps: the heartbeat is the database's time, and StaleAfter an
// age on that clock.
func TestClock_SkewedNodesAgreeOnStaleness(t *testing.T) {
	t.Parallel()
	f := func(t *testing.T, dbClock bool, wantStatus batchdriver.JobStatus) {
		hold := batchtest.NewBlockingFetcher()
		t.Cleanup(func() { hold.Release() })
		// A runner judges others stale only once it has reached the store
		// for StaleAfter since its start: short intervals keep this quick.
		const stale = 300 * time.Millisecond
		start := skewedNodes(t, dbClock, batch.Config{Fetch: hold.Fetch,
			HeartbeatInterval: batch.Duration(stale / 6), StaleAfter: batch.Duration(stale)})
		behind := start(-10 * time.Minute)
		caller := batchdriver.Caller{Name: "alice"}
		job, _, err := behind.Submit(t.Context(), caller, batchtest.Targets("skew", 2))
		if err != nil {
			t.Fatal(err)
		}
		<-hold.Started // held by the node behind, its heartbeat fresh
		ahead := start(10 * time.Minute)
		time.Sleep(stale + stale/2) // the node ahead's own beats reap, if they are going to
		// A reap waits until the node ahead has reached the store for a
		// continuous StaleAfter; a slow heartbeat on a loaded machine
		// restarts that wait, so the sweep that should reap is retried.
		for deadline := time.Now().Add(10 * time.Second); ; {
			if _, err := ahead.Collect(t.Context()); err != nil {
				t.Fatal(err)
			}
			info, err := ahead.Status(t.Context(), caller, job.ID, batch.StatusOptions{})
			if err == nil && info.Status == wantStatus {
				break
			}
			if err != nil || wantStatus == batchdriver.JobRunning || time.Now().After(deadline) {
				t.Fatalf("after the node ahead started and swept, the job is %s (%v), want %s", info.Status, err, wantStatus)
			}
			time.Sleep(stale / 6)
		}
	}
	t.Run("DatabaseClock", func(t *testing.T) { t.Parallel(); f(t, true, batchdriver.JobRunning) })
	t.Run("RunnerClock", func(t *testing.T) { t.Parallel(); f(t, false, batchdriver.JobFailed) })
}

// A job finished through the node behind is reused through the node
// ahead, is not swept by it, and both report the same expiry: the lease
// is the database's time, and the TTL an age on that clock.
func TestClock_SkewedNodesAgreeOnLeases(t *testing.T) {
	t.Parallel()
	const ttl = 5 * time.Minute // less than the skew
	f := func(t *testing.T, dbClock bool, wantReused bool) {
		start := skewedNodes(t, dbClock, batch.Config{TTL: batch.Duration(ttl)})
		behind, ahead := start(-10*time.Minute), start(10*time.Minute)
		caller := batchdriver.Caller{Name: "alice"}
		ts := batchtest.Targets("lease", 2)
		job, _, err := behind.Submit(t.Context(), caller, ts)
		if err != nil {
			t.Fatal(err)
		}
		batchtest.WaitFinished(t, behind, caller, job.ID, 10*time.Second)
		again, reused, err := ahead.Submit(t.Context(), caller, ts)
		if err != nil || reused != wantReused || reused && again.ID != job.ID {
			t.Fatalf("resubmit through the node ahead = %s, reused %v, %v; want reused %v", again.ID, reused, err, wantReused)
		}
		if !wantReused {
			return
		}
		if c, err := ahead.Collect(t.Context()); err != nil || c.Swept != 0 {
			t.Fatalf("Collect on the node ahead = %+v, %v; want nothing swept", c, err)
		}
		a, err := behind.Status(t.Context(), caller, job.ID, batch.StatusOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := ahead.Status(t.Context(), caller, job.ID, batch.StatusOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if want := time.Now().Add(ttl); !a.ExpiresAt.Equal(b.ExpiresAt) || a.ExpiresAt.Sub(want).Abs() > time.Minute {
			t.Errorf("expiry %v behind, %v ahead; want both about %v", a.ExpiresAt, b.ExpiresAt, want)
		}
	}
	t.Run("DatabaseClock", func(t *testing.T) { t.Parallel(); f(t, true, true) })
	t.Run("RunnerClock", func(t *testing.T) { t.Parallel(); f(t, false, false) })
}

// Without a Now a bound is an age on the database's clock; with one it is
// an age at that Now, whatever the database's clock says.
func TestClock_BoundsAreAges(t *testing.T) {
	t.Parallel()
	s := openTest(t, Config{})
	ctx := t.Context()
	caller := batchdriver.Caller{Name: "alice"}
	ts := batchtest.Targets("age", 1)
	if _, _, err := s.Create(ctx, batchdriver.CreateParams{ID: "aged", Caller: caller, IdemKey: "k", Targets: ts, Limits: testLimits}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Claim(ctx, batchdriver.ClaimParams{Runner: "r"}); err != nil || !ok {
		t.Fatalf("Claim = %v, %v", ok, err)
	}
	if _, err := s.FinishTarget(ctx, batchdriver.FinishParams{JobID: "aged", Runner: "r", Target: batchdriver.TargetFinish{
		Idx: 0, Status: batchdriver.TargetDone, Outcome: batchdriver.OutcomeOK, Result: []byte(`{"content":"x"}`)}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	far := time.Now().Add(24 * time.Hour) // a caller's clock a day ahead
	// An age of an hour: the lease is younger, by the database's clock.
	if n, err := s.Sweep(ctx, batchdriver.SweepParams{TTL: time.Hour}); err != nil || n != 0 {
		t.Fatalf("Sweep(age 1h) = %d, %v; want 0", n, err)
	}
	// The same age at a Now a day ahead: the lease is older.
	if n, err := s.Sweep(ctx, batchdriver.SweepParams{TTL: time.Hour, Now: nowAt(far)}); err != nil || n != 1 {
		t.Fatalf("Sweep(age 1h at a day ahead) = %d, %v; want 1", n, err)
	}
	if _, _, err := s.Create(ctx, batchdriver.CreateParams{ID: "aged2", Caller: caller, IdemKey: "k3", Targets: ts, Limits: testLimits}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Claim(ctx, batchdriver.ClaimParams{Runner: "r"}); err != nil || !ok {
		t.Fatalf("Claim = %v, %v", ok, err)
	}
	if _, err := s.FinishTarget(ctx, batchdriver.FinishParams{JobID: "aged2", Runner: "r", Target: batchdriver.TargetFinish{
		Idx: 0, Status: batchdriver.TargetDone, Outcome: batchdriver.OutcomeOK, Result: []byte(`{"content":"x"}`)}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	// An age of 10ms: the lease is older, by the database's clock.
	if n, err := s.Sweep(ctx, batchdriver.SweepParams{TTL: 10 * time.Millisecond}); err != nil || n != 1 {
		t.Fatalf("Sweep(age 10ms) = %d, %v; want 1", n, err)
	}

	// The same for heartbeats: the claim's is the database's time.
	if _, _, err := s.Create(ctx, batchdriver.CreateParams{ID: "held", Caller: caller, IdemKey: "k2", Targets: ts, Limits: testLimits}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Claim(ctx, batchdriver.ClaimParams{Runner: "r"}); err != nil || !ok {
		t.Fatalf("Claim = %v, %v", ok, err)
	}
	time.Sleep(50 * time.Millisecond)
	if n, err := s.Reap(ctx, batchdriver.ReapParams{StaleAfter: time.Hour, Reason: "restart"}); err != nil || n != 0 {
		t.Fatalf("Reap(age 1h) = %d, %v; want 0", n, err)
	}
	if n, err := s.Reap(ctx, batchdriver.ReapParams{StaleAfter: 10 * time.Millisecond, Reason: "restart"}); err != nil || n != 1 {
		t.Fatalf("Reap(age 10ms) = %d, %v; want 1", n, err)
	}
}
