package batchdrivertest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// The runner under a store outage: the store stops answering for longer
// than StaleAfter, then comes back. The cases run in real time, their
// runners without a Config.Now, so that the store judges staleness on its
// own clock (a shared store's database's).
var runnerOutageCases = map[string]func(*testing.T, batchdriver.Store){
	"OutageIsNotStaleness":        runnerOutageOwnJob,
	"ClusterOutageIsNotStaleness": runnerClusterOutage,
	"OutageResumesDrainAtOnce":    runnerOutageResume,
	"OutageLoggedTwice":           runnerOutageLog,
}

// errStopped is what every call of a stopped store returns.
var errStopped = fmt.Errorf("database stopped: %w", batch.ErrUnavailable)

// Unreachable wraps a store and fails every call but Capabilities while
// Down is set, as a store whose database is stopped does, with Err (by
// default an error marked [batch.ErrUnavailable]). Use one per runner to
// let runners see the store come back at different moments.
type Unreachable struct {
	batchdriver.Store
	Down atomic.Bool
	Err  error
}

func (u *Unreachable) fail() error {
	if u.Down.Load() {
		if u.Err != nil {
			return u.Err
		}
		return errStopped
	}
	return nil
}

func (u *Unreachable) Create(ctx context.Context, p batchdriver.CreateParams) (batchdriver.Job, bool, error) {
	if err := u.fail(); err != nil {
		return batchdriver.Job{}, false, err
	}
	return u.Store.Create(ctx, p)
}

func (u *Unreachable) Claim(ctx context.Context, p batchdriver.ClaimParams) (batchdriver.Claimed, bool, error) {
	if err := u.fail(); err != nil {
		return batchdriver.Claimed{}, false, err
	}
	return u.Store.Claim(ctx, p)
}

func (u *Unreachable) FinishTarget(ctx context.Context, p batchdriver.FinishParams) (batchdriver.Step, error) {
	if err := u.fail(); err != nil {
		return batchdriver.Step{}, err
	}
	return u.Store.FinishTarget(ctx, p)
}

func (u *Unreachable) Cancel(ctx context.Context, p batchdriver.CancelParams) error {
	if err := u.fail(); err != nil {
		return err
	}
	return u.Store.Cancel(ctx, p)
}

func (u *Unreachable) Get(ctx context.Context, p batchdriver.GetParams) (batchdriver.Job, []batchdriver.TargetRecord, error) {
	if err := u.fail(); err != nil {
		return batchdriver.Job{}, nil, err
	}
	return u.Store.Get(ctx, p)
}

func (u *Unreachable) GetTarget(ctx context.Context, p batchdriver.GetTargetParams) (batchdriver.Job, batchdriver.TargetRecord, error) {
	if err := u.fail(); err != nil {
		return batchdriver.Job{}, batchdriver.TargetRecord{}, err
	}
	return u.Store.GetTarget(ctx, p)
}

func (u *Unreachable) List(ctx context.Context, p batchdriver.ListParams) ([]batchdriver.Job, error) {
	if err := u.fail(); err != nil {
		return nil, err
	}
	return u.Store.List(ctx, p)
}

func (u *Unreachable) Touch(ctx context.Context, p batchdriver.TouchParams) error {
	if err := u.fail(); err != nil {
		return err
	}
	return u.Store.Touch(ctx, p)
}

func (u *Unreachable) Sweep(ctx context.Context, p batchdriver.SweepParams) (int, error) {
	if err := u.fail(); err != nil {
		return 0, err
	}
	return u.Store.Sweep(ctx, p)
}

func (u *Unreachable) Evict(ctx context.Context, p batchdriver.EvictParams) (int, error) {
	if err := u.fail(); err != nil {
		return 0, err
	}
	return u.Store.Evict(ctx, p)
}

func (u *Unreachable) Heartbeat(ctx context.Context, p batchdriver.HeartbeatParams) error {
	if err := u.fail(); err != nil {
		return err
	}
	return u.Store.Heartbeat(ctx, p)
}

func (u *Unreachable) Reap(ctx context.Context, p batchdriver.ReapParams) (int, error) {
	if err := u.fail(); err != nil {
		return 0, err
	}
	return u.Store.Reap(ctx, p)
}

func (u *Unreachable) Expire(ctx context.Context, p batchdriver.ExpireParams) ([]batchdriver.Expired, error) {
	if err := u.fail(); err != nil {
		return nil, err
	}
	return u.Store.Expire(ctx, p)
}

func (u *Unreachable) Stats(ctx context.Context) (batchdriver.Stats, error) {
	if err := u.fail(); err != nil {
		return batchdriver.Stats{}, err
	}
	return u.Store.Stats(ctx)
}

func (u *Unreachable) ClaimWebhooks(ctx context.Context, p batchdriver.ClaimWebhooksParams) ([]batchdriver.WebhookDelivery, error) {
	if err := u.fail(); err != nil {
		return nil, err
	}
	return u.Store.ClaimWebhooks(ctx, p)
}

func (u *Unreachable) FinishWebhook(ctx context.Context, p batchdriver.FinishWebhookParams) error {
	if err := u.fail(); err != nil {
		return err
	}
	return u.Store.FinishWebhook(ctx, p)
}

// The liveness settings of the outage cases, in real time.
const (
	outageBeat  = 100 * time.Millisecond
	outageStale = time.Second
	outageFor   = 3 * outageStale / 2 // longer than StaleAfter
)

func outageConfig(s batchdriver.Store, f batch.FetchFunc, id string) batch.Config {
	return batch.Config{Store: s, Fetch: f, RunnerID: id, Workers: 1,
		HeartbeatInterval: batch.Duration(outageBeat), StaleAfter: batch.Duration(outageStale),
		SweepInterval: batch.Duration(outageBeat), PollInterval: batch.Duration(outageBeat)}
}

func waitStarted(t *testing.T, f *batchtest.BlockingFetcher, what string) {
	t.Helper()
	select {
	case <-f.Started:
	case <-time.After(waitLong):
		t.Fatalf("%s never started", what)
	}
}

// runnerOutageOwnJob: a runner whose store is unreachable for longer than
// StaleAfter does not take itself for stale when the store returns: a
// collection pass right then (before its next heartbeat lands) fails
// nothing, and the job it drains finishes done.
func runnerOutageOwnJob(t *testing.T, s batchdriver.Store) {
	u := &Unreachable{Store: s}
	f := batchtest.NewBlockingFetcher()
	t.Cleanup(func() { f.Release() })
	cfg := outageConfig(u, f.Fetch, "node-a")
	cfg.SweepInterval = batch.Duration(time.Hour) // the test collects itself
	r := startRunner(t, cfg)
	id := mustSubmit(t, r, alice, batchtest.Targets("outage-own", 2))
	waitStarted(t, f, "the first target")
	u.Down.Store(true)
	time.Sleep(outageFor)
	u.Down.Store(false)
	if c, err := r.Collect(t.Context()); err != nil || c.Reaped != 0 {
		t.Fatalf("Collect right after an outage of %s (stale_after %s) = %+v, %v; want nothing reaped", outageFor, outageStale, c, err)
	}
	time.Sleep(outageStale + 2*outageBeat) // reachable again for StaleAfter: stale reaps resume
	if c, err := r.Collect(t.Context()); err != nil || c.Reaped != 0 {
		t.Fatalf("Collect StaleAfter after the outage = %+v, %v; want nothing reaped", c, err)
	}
	f.Release()
	waitStarted(t, f, "the second target")
	f.Release()
	if info := batchtest.WaitFinished(t, r, alice, id, waitLong); info.Status != batch.JobDone {
		t.Fatalf("the runner's own job after the outage = %s (%q), want done", info.Status, info.Error)
	}
}

// runnerClusterOutage: three runners on one store, which none of them
// reaches for longer than StaleAfter. When it returns (to the reaper
// first), the live runner's job is not failed, while that of a runner that
// died meanwhile is, within StaleAfter plus one HeartbeatInterval of the
// reaper's last failed call.
func runnerClusterOutage(t *testing.T, s batchdriver.Store) {
	requireShared(t, s)
	ua, ub, uc := &Unreachable{Store: s}, &Unreachable{Store: s}, &Unreachable{Store: s}
	fa, fc := batchtest.NewBlockingFetcher(), batchtest.NewBlockingFetcher()
	t.Cleanup(func() {
		for range 2 {
			fa.Release()
			fc.Release()
		}
	})
	a := startRunner(t, outageConfig(ua, fa.Fetch, "node-a")) // live throughout
	live := mustSubmit(t, a, alice, batchtest.Targets("outage-live", 2))
	waitStarted(t, fa, "the live runner's target")
	c := startRunner(t, outageConfig(deafStore{uc}, fc.Fetch, "node-c")) // dead: beats no more
	dead := mustSubmit(t, c, bob, batchtest.Targets("outage-dead", 2))
	waitStarted(t, fc, "the dead runner's target")
	b := startRunner(t, outageConfig(ub, batchtest.FailingFetcher(batchtest.ErrScripted), "node-b")) // the reaper
	time.Sleep(2 * outageBeat)                                                                       // a few beats while the store answers

	for _, u := range []*Unreachable{ua, ub, uc} {
		u.Down.Store(true)
	}
	time.Sleep(outageFor)
	ub.Down.Store(false) // the reaper reaches the store first…
	back := time.Now()
	time.Sleep(3 * outageBeat) // …its heartbeats land, the live runner's not yet
	ua.Down.Store(false)
	uc.Down.Store(false)

	deadline := back.Add(waitLong)
	var reaped time.Duration
	for reaped == 0 {
		if info := status(t, b, alice, live); info.Status != batch.JobRunning {
			t.Fatalf("the live runner's job after an outage of %s (stale_after %s) = %s (%q), want still running",
				outageFor, outageStale, info.Status, info.Error)
		}
		switch info := status(t, b, bob, dead); {
		case info.Status == batch.JobFailed && info.Error == "restart":
			reaped = time.Since(back)
		case info.Status != batch.JobRunning:
			t.Fatalf("the dead runner's job = %s (%q), want failed (restart)", info.Status, info.Error)
		case time.Now().After(deadline):
			t.Fatalf("the dead runner's job still running %s after the store returned", time.Since(back).Round(time.Millisecond))
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("outage %s, stale_after %s, heartbeat_interval %s: the dead runner's job reaped %s after the store returned (bound: stale_after + heartbeat_interval after the reaper's last failed call)",
		outageFor, outageStale, outageBeat, reaped.Round(time.Millisecond))
	time.Sleep(2 * outageBeat) // further reaps would fail the live job now, if they were going to
	fa.Release()
	waitStarted(t, fa, "the live runner's second target")
	fa.Release()
	if info := batchtest.WaitFinished(t, a, alice, live, waitLong); info.Status != batch.JobDone {
		t.Fatalf("the live runner's job = %s (%q), want done", info.Status, info.Error)
	}
}

// runnerOutageResume: a target's write that fails while the store is
// unreachable is retried, and the drain goes on soon after the store
// answers again, however long the outage was.
func runnerOutageResume(t *testing.T, s batchdriver.Store) {
	u := &Unreachable{Store: s}
	f := batchtest.NewBlockingFetcher()
	t.Cleanup(func() { f.Release() })
	cfg := outageConfig(u, f.Fetch, "node-a")
	cfg.SweepInterval = batch.Duration(time.Hour)
	r := startRunner(t, cfg)
	id := mustSubmit(t, r, alice, batchtest.Targets("outage-resume", 2))
	waitStarted(t, f, "the first target")
	const outage = 3200 * time.Millisecond // a back-off doubling from 100ms would wait until 3.1s, then 6.3s
	u.Down.Store(true)
	f.Release() // target 0's write fails until the store is back
	time.Sleep(outage)
	u.Down.Store(false)
	back := time.Now()
	waitStarted(t, f, "the second target")
	resumed := time.Since(back)
	t.Logf("outage %s: the drain resumed %s after the store answered again", outage, resumed.Round(time.Millisecond))
	if resumed > 2*time.Second {
		t.Errorf("the drain resumed %s after the store answered again; want well under 2s", resumed.Round(time.Millisecond))
	}
	f.Release()
	if info := batchtest.WaitFinished(t, r, alice, id, waitLong); info.Status != batch.JobDone {
		t.Fatalf("job after the outage = %s (%q), want done", info.Status, info.Error)
	}
}

// ErrDriver is an outage error as a PostgreSQL driver writes it: it names
// the database's user, database, host and port, which no log line may
// carry.
var ErrDriver = fmt.Errorf("pgstore: claim: failed to connect to `user=batchuser database=batchdb`: 192.0.2.7:6543 (db.internal): dial error: connection refused: %w", batch.ErrUnavailable)

// DriverSecrets are the parts of [ErrDriver] that must not be logged.
var DriverSecrets = []string{"batchuser", "batchdb", "192.0.2.7", ":6543", "db.internal"}

// runnerOutageLog: an outage is logged twice, at WARN, as it starts and as
// it ends (with its length), naming the error's class; the calls that fail
// meanwhile are DEBUG lines; no line carries the driver's text.
func runnerOutageLog(t *testing.T, s batchdriver.Store) {
	u := &Unreachable{Store: s, Err: ErrDriver}
	var logs batchtest.Buffer
	f := batchtest.NewBlockingFetcher()
	t.Cleanup(func() { f.Release() })
	cfg := outageConfig(u, f.Fetch, "node-a")
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := startRunner(t, cfg)
	id := mustSubmit(t, r, alice, batchtest.Targets("outage-log", 2))
	waitStarted(t, f, "the first target")
	u.Down.Store(true)
	f.Release() // its write fails during the outage and is retried
	time.Sleep(outageFor)
	u.Down.Store(false)
	waitStarted(t, f, "the second target")
	f.Release()
	if info := batchtest.WaitFinished(t, r, alice, id, waitLong); info.Status != batch.JobDone {
		t.Fatalf("job after the outage = %s (%q), want done", info.Status, info.Error)
	}
	closeRunner(t, r)
	var loud []string
	debug := 0
	for line := range strings.Lines(logs.String()) {
		for _, secret := range DriverSecrets {
			if strings.Contains(line, secret) {
				t.Errorf("a log line carries the driver's %q: %s", secret, line)
			}
		}
		var rec struct {
			Level, Msg, Class string
			Outage            time.Duration // nanoseconds in a JSON record
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		switch {
		case rec.Level == "DEBUG" && rec.Class != "":
			debug++
		case rec.Level == "WARN" && (rec.Msg == "batch store unreachable" || rec.Msg == "batch store reachable again"):
			if rec.Class != "unavailable" {
				t.Errorf("outage line %q has class %q, want unavailable", rec.Msg, rec.Class)
			}
			if rec.Msg == "batch store reachable again" && rec.Outage < outageFor/2 {
				t.Errorf("the outage's end logs a length of %s, want about %s", rec.Outage, outageFor)
			}
			loud = append(loud, rec.Msg)
		case rec.Level == "WARN" || rec.Level == "ERROR":
			t.Errorf("unexpected %s line during an outage: %s", rec.Level, line)
		}
	}
	t.Logf("outage of %s: %d WARN lines %q, %d DEBUG lines of failed calls", outageFor, len(loud), loud, debug)
	if len(loud) != 2 || loud[0] != "batch store unreachable" || loud[1] != "batch store reachable again" {
		t.Errorf("outage lines = %q, want its start and its end", loud)
	}
	if debug == 0 {
		t.Error("no DEBUG line for the calls that failed during the outage")
	}
}
