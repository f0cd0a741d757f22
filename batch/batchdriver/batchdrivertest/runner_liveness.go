package batchdrivertest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// The runner's liveness cases: what Start and Close fail, and the
// heartbeat. runnerClusterCases need a Shared store: several runners drain
// one store at once.
var runnerClusterCases = map[string]func(*testing.T, batchdriver.Store){
	"ClusterCancelThroughOtherRunner": runnerClusterCancel,
	"ClusterChangeFeedWakes":          runnerClusterFeed,
	"ClusterStaleRunnerReaped":        runnerClusterStale,
	"ClusterStaleReapedOnHeartbeat":   runnerClusterStaleOnBeat,
	"ClusterTwoRunnersNoDisturbance":  runnerClusterTwoRunners,
}

// startRunner builds and starts a runner that the test closes itself (or
// its cleanup does, harmlessly, a second time).
func startRunner(t *testing.T, cfg batch.Config) *batch.Runner {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = batchtest.Logger(t)
	}
	r, err := batch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeRunner(t, r) })
	return r
}

func closeRunner(t *testing.T, r *batch.Runner) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if err := r.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func status(t *testing.T, r *batch.Runner, c batch.Caller, id string) batch.JobInfo {
	t.Helper()
	info, err := r.Status(t.Context(), c, id, batch.StatusOptions{Results: true})
	if err != nil {
		t.Fatalf("Status(%s): %v", id, err)
	}
	return info
}

func wantTargets(t *testing.T, what string, info batch.JobInfo, want ...batch.TargetStatus) {
	t.Helper()
	if got := targetStatuses(info); !slices.Equal(got, want) {
		t.Fatalf("%s: job %s, targets %v; want %v", what, info.Status, got, want)
	}
}

// runnerCloseFails: Close fails the jobs its runner still holds at once,
// their finished targets intact, without waiting for a next Start.
func runnerCloseFails(t *testing.T, s batchdriver.Store) {
	f := batchtest.NewBlockingFetcher()
	r := startRunner(t, batch.Config{Store: s, Fetch: f.Fetch})
	id := mustSubmit(t, r, alice, batchtest.Targets("close", 3))
	<-f.Started
	f.Release() // target 0 completes
	<-f.Started // target 1 in flight
	closeRunner(t, r)
	info := status(t, r, alice, id)
	if info.Status != batch.JobFailed || info.Error != "restart" {
		t.Fatalf("after Close: %s (%q), want failed (restart)", info.Status, info.Error)
	}
	wantTargets(t, "after Close", info, batch.TargetDone, batch.TargetFailed, batch.TargetPending)
	if info.Targets[1].Error != "restart" || info.Targets[0].Result == nil {
		t.Errorf("targets = %+v", info.Targets)
	}
	if len(f.Calls()) != 2 {
		t.Errorf("fetched %v, want the first two targets only", f.Calls())
	}
	if st, _ := s.Stats(t.Context()); st.Running != 0 {
		t.Errorf("%d jobs running after Close", st.Running)
	}
}

// runnerRestartLeftJobs: a runner that starts after a process died without
// closing (a job held by it mid-drain, another queued) fails what that
// process can no longer finish. On a store that serves one process that is
// both jobs, at start; on a shared store the held job (its runner is
// stale), StaleAfter after the start, but not the queued one, which the new
// runner drains.
func runnerRestartLeftJobs(t *testing.T, s batchdriver.Store) {
	clock := batchtest.NewClock()
	dead := clock.Now().Add(-time.Hour) // the dead process's last heartbeat
	held := jobSpec("alice", "held", 3, dead)
	mustCreate(t, s, held)
	claimJob(t, s, "dead-process", held.ID, dead)
	finish(t, s, "dead-process", held.ID, okFinish(0, "kept"), dead)
	queued := jobSpec("bob", "queued", 1, dead)
	mustCreate(t, s, queued)

	rec := batchtest.NewRecordingFetcher(nil)
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: rec.Fetch, Now: clock.Now})
	if s.Capabilities().Shared {
		// Another runner's jobs are judged stale only once this one has
		// reached the store for a continuous StaleAfter: it might have
		// started right after an outage that silenced live runners.
		if info := status(t, r, batch.Caller{Name: "alice"}, held.ID); info.Status != batch.JobRunning {
			t.Fatalf("held job right after the start = %s; want it left until the new runner has reached the store for StaleAfter", info.Status)
		}
		clock.Advance(batch.DefaultStaleAfter)
		if _, err := r.Collect(t.Context()); err != nil { // or the runner's own sweep came first
			t.Fatalf("Collect StaleAfter after the start: %v", err)
		}
	}
	info := status(t, r, batch.Caller{Name: "alice"}, held.ID)
	if info.Status != batch.JobFailed || info.Error != "restart" {
		t.Fatalf("held job after the restart: %s (%q), want failed (restart)", info.Status, info.Error)
	}
	wantTargets(t, "held job", info, batch.TargetDone, batch.TargetFailed, batch.TargetPending)
	bobs := batch.Caller{Name: "bob"}
	if s.Capabilities().Shared {
		if q := batchtest.WaitFinished(t, r, bobs, queued.ID, waitLong); q.Status != batch.JobDone {
			t.Fatalf("queued job on a shared store = %s, want drained by the new runner", q.Status)
		}
		return
	}
	if q := status(t, r, bobs, queued.ID); q.Status != batch.JobFailed || q.Error != "restart" {
		t.Fatalf("queued job on a one-process store = %s (%q), want failed (restart)", q.Status, q.Error)
	}
	if n := len(rec.Order()); n != 0 {
		t.Errorf("fetched %d targets of failed jobs", n)
	}
}

// beatWatch passes heartbeats through and reports the time of each.
type beatWatch struct {
	batchdriver.Store
	beats chan time.Time
}

func (b *beatWatch) Heartbeat(ctx context.Context, p batchdriver.HeartbeatParams) error {
	err := b.Store.Heartbeat(ctx, p)
	if p.Now == nil { // the runner has a test clock: every call carries it
		return fmt.Errorf("heartbeat without the runner's Now: %w", batch.ErrUnavailable)
	}
	select {
	case b.beats <- *p.Now:
	default:
	}
	return err
}

// runnerHeartbeatWithoutProgress: a runner whose one target waits minutes
// for a busy fetcher still beats, so the sweeper does not take it for dead.
func runnerHeartbeatWithoutProgress(t *testing.T, s batchdriver.Store) {
	clock := batchtest.NewClock()
	watch := &beatWatch{Store: s, beats: make(chan time.Time, 16)}
	fetch, calls := batchtest.BusyThenOK(1 << 30)
	r := batchtest.NewRunner(t, batch.Config{Store: watch, Fetch: fetch, Now: clock.Now, BusyWait: batch.Duration(time.Hour),
		HeartbeatInterval: batch.Duration(10 * time.Millisecond), StaleAfter: batch.Duration(time.Minute)})
	id := mustSubmit(t, r, alice, batchtest.Targets("beat", 2))
	for calls.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	clock.Advance(10 * time.Minute) // ten StaleAfters without a finished target
	deadline := time.After(waitLong)
	for beat := (time.Time{}); beat.Before(clock.Now()); {
		select {
		case beat = <-watch.beats:
		case <-deadline:
			t.Fatal("no heartbeat while the only target waited for a busy fetcher")
		}
	}
	c, err := r.Collect(t.Context())
	if err != nil || c.Reaped != 0 {
		t.Fatalf("Collect = %+v, %v; the live runner's job was reaped", c, err)
	}
	if info := status(t, r, alice, id); info.Status != batch.JobRunning {
		t.Fatalf("job = %s, want still running", info.Status)
	}
}

// deafStore drops heartbeats, as a node that died mid-target writes none:
// its last one is the claim's.
type deafStore struct{ batchdriver.Store }

func (deafStore) Heartbeat(context.Context, batchdriver.HeartbeatParams) error { return nil }

// runnerClusterStale: a runner that stops beating mid-target has its job
// failed by another runner's sweeper, finished targets intact; its late
// write is refused and changes nothing.
func runnerClusterStale(t *testing.T, s batchdriver.Store) {
	requireShared(t, s)
	clock := batchtest.NewClock()
	f := batchtest.NewBlockingFetcher()
	a := startRunner(t, batch.Config{Store: deafStore{s}, Fetch: f.Fetch, Now: clock.Now, RunnerID: "node-a"})
	id := mustSubmit(t, a, alice, batchtest.Targets("stale", 3))
	<-f.Started
	f.Release() // target 0 stored
	<-f.Started // target 1 in flight
	b := startRunner(t, batch.Config{Store: s, Fetch: batchtest.FailingFetcher(batchtest.ErrScripted), Now: clock.Now, RunnerID: "node-b"})
	if c, err := b.Collect(t.Context()); err != nil || c.Reaped != 0 {
		t.Fatalf("Collect before a is stale = %+v, %v; want nothing reaped", c, err)
	}
	clock.Advance(batch.DefaultStaleAfter + time.Second)
	if _, err := b.Collect(t.Context()); err != nil { // or b's background sweep came first
		t.Fatalf("Collect after a went stale: %v", err)
	}
	reaped := status(t, b, alice, id)
	if reaped.Status != batch.JobFailed || reaped.Error != "restart" {
		t.Fatalf("stale runner's job = %s (%q), want failed (restart)", reaped.Status, reaped.Error)
	}
	wantTargets(t, "reaped", reaped, batch.TargetDone, batch.TargetFailed, batch.TargetPending)
	// a wakes up: its fetch returns, its write is refused.
	f.Release()
	waitGauge(t, a, "batch_targets_inflight", 0)
	closeRunner(t, a) // waits for a's worker, so its write attempt is over
	after := status(t, b, alice, id)
	wantTargets(t, "after the stale runner's late write", after, batch.TargetDone, batch.TargetFailed, batch.TargetPending)
	if after.TargetsDone != reaped.TargetsDone || after.Targets[1].Error != "restart" {
		t.Fatalf("the refused write changed the job: %+v", after)
	}
	if n := len(f.Calls()); n != 2 {
		t.Errorf("%d fetches, want 2: nothing after the reaped target starts", n)
	}
}

// runnerClusterStaleOnBeat: the jobs of a runner that stopped beating are
// failed on the heartbeat's cadence, within StaleAfter plus one
// HeartbeatInterval, not at the next sweep (an hour away here). Real time,
// without a Config.Now: the store judges staleness on its own clock.
func runnerClusterStaleOnBeat(t *testing.T, s batchdriver.Store) {
	requireShared(t, s)
	const beat, stale = 50 * time.Millisecond, 300 * time.Millisecond
	cfg := func(s batchdriver.Store, f batch.FetchFunc, id string) batch.Config {
		return batch.Config{Store: s, Fetch: f, RunnerID: id, Workers: 1,
			HeartbeatInterval: batch.Duration(beat), StaleAfter: batch.Duration(stale),
			SweepInterval: batch.Duration(time.Hour)}
	}
	f := batchtest.NewBlockingFetcher()
	t.Cleanup(func() { f.Release() })
	a := startRunner(t, cfg(deafStore{s}, f.Fetch, "node-a"))
	id := mustSubmit(t, a, alice, batchtest.Targets("beat-reap", 2))
	select {
	case <-f.Started:
	case <-time.After(waitLong):
		t.Fatal("a never claimed its job")
	}
	died := time.Now() // a's claim was its last heartbeat
	b := startRunner(t, cfg(s, batchtest.FailingFetcher(batchtest.ErrScripted), "node-b"))
	deadline := time.Now().Add(waitLong)
	for {
		info := status(t, b, alice, id)
		if info.Status == batch.JobFailed {
			if info.Error != "restart" {
				t.Fatalf("reaped job error = %q, want restart", info.Error)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job of the silent runner still %s %s after its last heartbeat (stale_after %s, heartbeat_interval %s, sweep an hour away)",
				info.Status, time.Since(died).Round(time.Millisecond), stale, beat)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("reaped %s after the silent runner's last heartbeat (stale_after %s + heartbeat_interval %s = %s)",
		time.Since(died).Round(time.Millisecond), stale, beat, stale+beat)
}

// waitGauge polls a runner gauge until it reads want.
func waitGauge(t *testing.T, r *batch.Runner, name string, want float64) {
	t.Helper()
	g := r.Metrics().GetOrCreateGauge(name, nil)
	deadline := time.Now().Add(waitLong)
	for g.Get() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v, want %v", name, g.Get(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// runnerClusterCancel: a cancel through one runner stops the job another
// runner drains before its next target; the target in flight is stored.
func runnerClusterCancel(t *testing.T, s batchdriver.Store) {
	requireShared(t, s)
	f := batchtest.NewBlockingFetcher()
	a := startRunner(t, batch.Config{Store: s, Fetch: f.Fetch, RunnerID: "node-a"})
	id := mustSubmit(t, a, alice, batchtest.Targets("cancel", 3))
	<-f.Started
	b := startRunner(t, batch.Config{Store: s, Fetch: batchtest.FailingFetcher(batchtest.ErrScripted), RunnerID: "node-b"})
	if err := b.Cancel(t.Context(), alice, id); err != nil {
		t.Fatal(err)
	}
	f.Release()
	info := batchtest.WaitFinished(t, a, alice, id, waitLong)
	deadline := time.Now().Add(waitLong)
	for info.Targets[0].Status != batch.TargetDone && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
		info = status(t, a, alice, id)
	}
	wantTargets(t, "cancelled through b", info, batch.TargetDone, batch.TargetPending, batch.TargetPending)
	time.Sleep(50 * time.Millisecond) // a next target would start now, if it were going to
	if calls := f.Calls(); len(calls) != 1 {
		t.Fatalf("a fetched %v; want only the target in flight at the cancel", calls)
	}
}

// gatedFetcher holds its first call until open is closed, and records every
// call.
type gatedFetcher struct {
	*batchtest.RecordingFetcher
	open    chan struct{}
	started chan struct{}
	once    sync.Once
}

func newGatedFetcher() *gatedFetcher {
	return &gatedFetcher{RecordingFetcher: batchtest.NewRecordingFetcher(nil), open: make(chan struct{}), started: make(chan struct{})}
}

func (g *gatedFetcher) Fetch(ctx context.Context, c batch.Caller, tg batch.Target) (batch.Result, error) {
	g.once.Do(func() {
		close(g.started)
		<-g.open
	})
	return g.RecordingFetcher.Fetch(ctx, c, tg)
}

// runnerClusterTwoRunners: two runners on one store, started and closed
// while the other drains, never disturb each other: every job ends done
// and every target is fetched exactly once by one of them.
func runnerClusterTwoRunners(t *testing.T, s batchdriver.Store) {
	requireShared(t, s)
	fa, fb := newGatedFetcher(), newGatedFetcher()
	close(fb.open)
	cfg := func(f batch.FetchFunc, id string) batch.Config {
		return batch.Config{Store: s, Fetch: f, RunnerID: id, JobsTotal: 16, PollInterval: batch.Duration(10 * time.Millisecond)}
	}
	a := startRunner(t, cfg(fa.Fetch, "node-a"))
	first := mustSubmit(t, a, batch.Caller{Name: "c0"}, batchtest.Targets("two-0", 3))
	<-fa.started
	b := startRunner(t, cfg(fb.Fetch, "node-b")) // starts while a holds a job
	close(fa.open)
	ids := map[string]batch.Caller{first: {Name: "c0"}}
	var urls []string
	urls = append(urls, urlsOf(batchtest.Targets("two-0", 3))...)
	for i := 1; i < 8; i++ {
		r := a
		if i%2 == 1 {
			r = b
		}
		c := batch.Caller{Name: fmt.Sprintf("c%d", i)}
		ts := batchtest.Targets(fmt.Sprintf("two-%d", i), 3)
		ids[mustSubmit(t, r, c, ts)] = c
		urls = append(urls, urlsOf(ts)...)
	}
	for id, c := range ids {
		if info := batchtest.WaitFinished(t, a, c, id, waitLong); info.Status != batch.JobDone {
			t.Fatalf("job %s = %s (%q), want done", id, info.Status, info.Error)
		}
	}
	for _, u := range urls {
		if n := fa.Count(u) + fb.Count(u); n != 1 {
			t.Errorf("%s fetched %d times, want once", u, n)
		}
	}
	closeRunner(t, b) // leaves a alone
	last := mustSubmit(t, a, batch.Caller{Name: "after"}, batchtest.Targets("two-after", 2))
	if info := batchtest.WaitFinished(t, a, batch.Caller{Name: "after"}, last, waitLong); info.Status != batch.JobDone {
		t.Fatalf("a's job after b closed = %s", info.Status)
	}
}

func urlsOf(ts []batch.Target) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.URL)
	}
	return out
}

// runnerClusterFeed: with a store that has a change feed, another runner's
// progress wakes a wait at once, and a job queued through a busy runner is
// claimed at once by an idle one; neither polls (PollInterval is an hour).
func runnerClusterFeed(t *testing.T, s batchdriver.Store) {
	requireShared(t, s)
	if _, ok := s.(batchdriver.ChangeFeed); !ok {
		t.Skip("the store has no change feed")
	}
	fa, fb := batchtest.NewBlockingFetcher(), batchtest.NewBlockingFetcher()
	t.Cleanup(func() {
		for range 4 {
			fa.Release()
			fb.Release()
		}
	})
	a := startRunner(t, batch.Config{Store: s, Fetch: fa.Fetch, RunnerID: "node-a", Workers: 1, PollInterval: batch.Duration(time.Hour)})
	id := mustSubmit(t, a, alice, batchtest.Targets("feed", 2))
	<-fa.Started
	b := startRunner(t, batch.Config{Store: s, Fetch: fb.Fetch, RunnerID: "node-b", PollInterval: batch.Duration(time.Hour)})
	since := 0
	waited := make(chan batch.JobInfo, 1)
	go func() {
		info, err := b.Wait(context.Background(), alice, id, batch.WaitOptions{Since: &since, Timeout: batch.MaxWait})
		if err != nil {
			t.Error(err)
		}
		waited <- info
	}()
	time.Sleep(20 * time.Millisecond) // b's wait has read the job
	fa.Release()
	select {
	case info := <-waited:
		if info.TargetsDone != 1 {
			t.Fatalf("b's wait answered with %d done, want 1", info.TargetsDone)
		}
	case <-time.After(waitLong): // far less than the wait's own timeout
		t.Fatal("b's wait did not wake when a stored a target")
	}
	// a's only worker is busy with target 1: b claims the next job.
	mustSubmit(t, a, bob, batchtest.Targets("feed-b", 1))
	select {
	case <-fb.Started:
	case <-time.After(waitLong):
		t.Fatal("the idle runner b did not claim a job queued through a")
	}
}
