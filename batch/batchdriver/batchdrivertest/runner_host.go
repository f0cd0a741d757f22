package batchdrivertest

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// runnerHostCases are the runner cases of politeness to hosts: the
// per-host cap and interval (on one runner and across runners sharing a
// store with a [batchdriver.HostGate]), a job waiting for its host without
// holding a worker, a host's Retry-After, and the robots hook.
var runnerHostCases = map[string]func(*testing.T, batchdriver.Store){
	"HostCapHolds":            runnerHostCap,
	"HostCapAcrossRunners":    runnerHostCapCluster,
	"HostTurnsAcrossRunners":  runnerHostTurns,
	"HostCapOff":              runnerHostCapOff,
	"HostIntervalSpaces":      runnerHostInterval,
	"HostIntervalFromStart":   runnerHostIntervalDrains,
	"HostWaitFreesWorker":     runnerHostWaitFreesWorker,
	"HostWaitEndsOnCancel":    runnerHostWaitCancel,
	"HostWaitEndsOnDeadline":  runnerHostWaitDeadline,
	"RetryAfterHoldsHost":     runnerRetryAfter,
	"RetryAfterGivesUp":       runnerRetryAfterGivesUp,
	"RobotsRefuses":           runnerRobotsRefuses,
	"HostWaitHandedOnAtClose": runnerHostWaitResume,
}

// hostFetcher answers every target after a pause, or when released, and
// records per host how many fetches ran at once and when each began.
type hostFetcher struct {
	pause time.Duration
	// hold, if set, blocks the fetches of URLs it matches until release
	// is closed.
	hold    func(url string) bool
	release chan struct{}
	// answer, if set, may answer a fetch instead (its second result
	// false: fetch normally).
	answer func(url string, call int) (error, bool)

	mu       sync.Mutex
	inflight map[string]int
	peak     map[string]int
	starts   map[string][]time.Time
	calls    map[string]int // by URL
	total    int
	maxTotal int
}

func newHostFetcher(pause time.Duration) *hostFetcher {
	return &hostFetcher{pause: pause, release: make(chan struct{}),
		inflight: map[string]int{}, peak: map[string]int{}, starts: map[string][]time.Time{}, calls: map[string]int{}}
}

func hostOf(raw string) string {
	u, _ := url.Parse(raw)
	return u.Host
}

func (f *hostFetcher) fetch(ctx context.Context, _ batch.Caller, t batch.Target) (batch.Result, error) {
	h := hostOf(t.URL)
	f.mu.Lock()
	f.inflight[h]++
	f.total++
	f.peak[h] = max(f.peak[h], f.inflight[h])
	f.maxTotal = max(f.maxTotal, f.total)
	f.starts[h] = append(f.starts[h], time.Now())
	f.calls[t.URL]++
	call := f.calls[t.URL]
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inflight[h]--
		f.total--
		f.mu.Unlock()
	}()
	if f.answer != nil {
		if err, ok := f.answer(t.URL, call); ok {
			return batch.Result{}, err
		}
	}
	if f.hold != nil && f.hold(t.URL) {
		select {
		case <-f.release:
		case <-ctx.Done():
			return batch.Result{}, context.Cause(ctx)
		}
	}
	select {
	case <-time.After(f.pause):
	case <-ctx.Done():
		return batch.Result{}, context.Cause(ctx)
	}
	return batch.Result{Content: "ok"}, nil
}

func (f *hostFetcher) peakOf(host string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.peak[host]
}

func (f *hostFetcher) startsOf(host string) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.starts[host]...)
}

func (f *hostFetcher) callsOf(url string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[url]
}

// hostTargets returns n targets on host.
func hostTargets(host, prefix string, n int) []batch.Target {
	ts := make([]batch.Target, n)
	for i := range ts {
		ts[i] = batch.Target{URL: "https://" + host + "/" + prefix + "/" + strconv.Itoa(i)}
	}
	return ts
}

// submitAll submits one job per list, each by a caller of its own, and
// returns the callers and ids.
func submitAll(t *testing.T, r *batch.Runner, lists ...[]batch.Target) ([]batch.Caller, []string) {
	t.Helper()
	var cs []batch.Caller
	var ids []string
	for i, ts := range lists {
		c := batch.Caller{Name: "caller-" + string(rune('a'+i))}
		cs, ids = append(cs, c), append(ids, mustSubmit(t, r, c, ts))
	}
	return cs, ids
}

func wantAllDone(t *testing.T, r *batch.Runner, cs []batch.Caller, ids []string) {
	t.Helper()
	for i, id := range ids {
		if info := batchtest.WaitFinished(t, r, cs[i], id, waitLong); info.Status != batch.JobDone {
			t.Fatalf("job %d: %s, want done: %+v", i, info.Status, info.Targets)
		}
	}
}

// runnerHostCap: six workers, six jobs on one host and two on another,
// FetchesPerHost 2: never more than two fetches to a host at once, and
// every job ends done.
func runnerHostCap(t *testing.T, s batchdriver.Store) {
	f := newHostFetcher(15 * time.Millisecond)
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: f.fetch, Workers: 6, JobsPerCaller: 1, JobsTotal: 8, FetchesPerHost: 2})
	var lists [][]batch.Target
	for i := range 6 {
		lists = append(lists, hostTargets("a.test", string(rune('a'+i)), 3))
	}
	lists = append(lists, hostTargets("b.test", "x", 3), hostTargets("b.test", "y", 3))
	cs, ids := submitAll(t, r, lists...)
	wantAllDone(t, r, cs, ids)
	if p := f.peakOf("a.test"); p > 2 {
		t.Errorf("a.test saw %d fetches at once, want at most 2", p)
	}
	if p := f.peakOf("b.test"); p > 2 {
		t.Errorf("b.test saw %d fetches at once, want at most 2", p)
	}
}

// requireSharedGate skips a case of several runners unless s is shared
// and keeps the host gate.
func requireSharedGate(t *testing.T, s batchdriver.Store) {
	t.Helper()
	if !s.Capabilities().Shared {
		t.Skip("the store serves one process")
	}
	requireHostGate(t, s)
}

// runnerHostCapCluster: two runners sharing the store, three workers each,
// six jobs on one host, FetchesPerHost 2: the cap holds across them.
func runnerHostCapCluster(t *testing.T, s batchdriver.Store) {
	requireSharedGate(t, s)
	f := newHostFetcher(20 * time.Millisecond)
	cfg := func(id string) batch.Config {
		return batch.Config{Store: s, Fetch: f.fetch, RunnerID: id, Workers: 3, JobsPerCaller: 1, JobsTotal: 8,
			FetchesPerHost: 2, PollInterval: batch.Duration(20 * time.Millisecond)}
	}
	r1 := batchtest.NewRunner(t, cfg("host-r1"))
	r2 := batchtest.NewRunner(t, cfg("host-r2"))
	var cs []batch.Caller
	var ids []string
	for i := range 6 {
		r := r1
		if i%2 == 1 {
			r = r2
		}
		c := batch.Caller{Name: "caller-" + string(rune('a'+i))}
		cs, ids = append(cs, c), append(ids, mustSubmit(t, r, c, hostTargets("a.test", c.Name, 3)))
	}
	wantAllDone(t, r1, cs, ids)
	if p := f.peakOf("a.test"); p > 2 {
		t.Errorf("a.test saw %d fetches at once from two runners, want at most 2", p)
	}
}

// runnerHostTurns: two runners sharing the store, FetchesPerHost 1, each
// draining a long job on one host: the runner that got the host first
// keeps its slot between its fetches, but gives it up once the other has
// asked, so the other's job starts before the first one's ends.
func runnerHostTurns(t *testing.T, s batchdriver.Store) {
	requireSharedGate(t, s)
	f := newHostFetcher(20 * time.Millisecond)
	cfg := func(id string) batch.Config {
		return batch.Config{Store: s, Fetch: f.fetch, RunnerID: id, Workers: 1, FetchesPerHost: 1, TargetsPerJob: 100,
			PollInterval: batch.Duration(10 * time.Millisecond)}
	}
	r1 := batchtest.NewRunner(t, cfg("turn-r1"))
	r2 := batchtest.NewRunner(t, cfg("turn-r2"))
	a, b := batch.Caller{Name: "a"}, batch.Caller{Name: "b"}
	idA := mustSubmit(t, r1, a, hostTargets("x.test", "a", 100))
	waitPeak(t, f, "x.test", 1)
	idB := mustSubmit(t, r2, b, hostTargets("x.test", "b", 3))
	endA := batchtest.WaitFinished(t, r1, a, idA, time.Minute)
	endB := batchtest.WaitFinished(t, r2, b, idB, time.Minute)
	if endA.Status != batch.JobDone || endB.Status != batch.JobDone {
		for _, tg := range append(endA.Targets, endB.Targets...) {
			if tg.Status != batch.TargetDone {
				t.Logf("target %s: %s %s", tg.URL, tg.Outcome, tg.Error)
			}
		}
		t.Fatalf("jobs %s and %s, want done", endA.Status, endB.Status)
	}
	if endB.FinishedAt.After(endA.FinishedAt) {
		t.Errorf("the other runner's 3-target job ended %s after the 100-target job that held the host first",
			endB.FinishedAt.Sub(endA.FinishedAt))
	}
	if p := f.peakOf("x.test"); p > 1 {
		t.Errorf("x.test saw %d fetches at once, want 1", p)
	}
}

// runnerHostCapOff: FetchesPerHost -1 lifts the cap: four workers fetch
// from one host at once.
func runnerHostCapOff(t *testing.T, s batchdriver.Store) {
	f := newHostFetcher(0)
	f.hold = func(string) bool { return true }
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: f.fetch, Workers: 4, JobsPerCaller: 1, JobsTotal: 4, FetchesPerHost: -1})
	var lists [][]batch.Target
	for i := range 4 {
		lists = append(lists, hostTargets("a.test", string(rune('a'+i)), 1))
	}
	cs, ids := submitAll(t, r, lists...)
	for deadline := time.Now().Add(waitLong); f.peakOf("a.test") < 4 && time.Now().Before(deadline); {
		time.Sleep(2 * time.Millisecond)
	}
	if p := f.peakOf("a.test"); p != 4 {
		t.Errorf("with no cap, a.test saw at most %d fetches at once, want 4", p)
	}
	close(f.release)
	wantAllDone(t, r, cs, ids)
}

// runnerHostInterval: HostInterval spaces the fetch starts to one host,
// over every job, and leaves another host alone.
func runnerHostInterval(t *testing.T, s batchdriver.Store) {
	const iv = 120 * time.Millisecond
	f := newHostFetcher(0)
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: f.fetch, Workers: 3, JobsPerCaller: 1, JobsTotal: 4, HostInterval: batch.Duration(iv)})
	cs, ids := submitAll(t, r, hostTargets("a.test", "x", 2), hostTargets("a.test", "y", 2))
	wantAllDone(t, r, cs, ids)
	wantSpaced(t, f.startsOf("a.test"), 4, iv)
}

// runnerHostIntervalDrains: with more drains than fetch slots, an
// interval counts from the fetch's start, not from when its job got
// past the host's gate: one worker, three drains, HostInterval; job B
// holds the fetch slot while the drains of jobs X and Y, both on a.test,
// are ready to fetch, and when B's fetch returns, X's and Y's fetches
// still start the interval apart.
func runnerHostIntervalDrains(t *testing.T, s batchdriver.Store) {
	const iv = 120 * time.Millisecond
	f := newHostFetcher(0)
	f.hold = func(u string) bool { return hostOf(u) == "b.test" }
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: f.fetch, Workers: 1, Drains: 3, JobsPerCaller: 2, JobsTotal: 4, HostInterval: batch.Duration(iv)})
	cs, ids := submitAll(t, r, hostTargets("b.test", "held", 1))
	waitPeak(t, f, "b.test", 1)
	more, moreIDs := submitAll(t, r, hostTargets("a.test", "x", 1), hostTargets("a.test", "y", 1))
	time.Sleep(3 * iv) // long enough for both to get past an interval counted from the gate
	close(f.release)
	wantAllDone(t, r, append(cs, more...), append(ids, moreIDs...))
	wantSpaced(t, f.startsOf("a.test"), 2, iv)
}

// wantSpaced checks that n fetches started, each at least gap after the
// one before (less a millisecond: the gate stamps its start just before
// the fetcher's).
func wantSpaced(t *testing.T, starts []time.Time, n int, gap time.Duration) {
	t.Helper()
	if len(starts) != n {
		t.Fatalf("%d fetch starts, want %d", len(starts), n)
	}
	for i := 1; i < len(starts); i++ {
		if d := starts[i].Sub(starts[i-1]); d < gap-time.Millisecond {
			t.Errorf("fetch %d started %s after the one before, want at least %s", i, d, gap)
		}
	}
}

// runnerHostWaitFreesWorker: two workers, FetchesPerHost 1; job A's fetch
// holds the host, job B waits for it, and job C, on another host, is
// drained by the worker B would have held: C ends while A still fetches.
func runnerHostWaitFreesWorker(t *testing.T, s batchdriver.Store) {
	r, f, release := heldHost(t, s)
	var cs []batch.Caller
	var ids []string
	for _, c := range []batch.Caller{{Name: "b"}, {Name: "c"}} {
		host := map[string]string{"b": "x.test", "c": "y.test"}[c.Name]
		cs, ids = append(cs, c), append(ids, mustSubmit(t, r, c, hostTargets(host, c.Name, 2)))
	}
	if info := batchtest.WaitFinished(t, r, cs[1], ids[1], waitLong); info.Status != batch.JobDone {
		t.Fatalf("job C, on another host: %s, want done while A holds x.test", info.Status)
	}
	info, err := r.Status(t.Context(), cs[0], ids[0], batch.StatusOptions{})
	if err != nil || info.Targets[0].Status == batch.TargetDone || f.callsOf(hostTargets("x.test", "b", 2)[0].URL) != 0 {
		t.Fatalf("job B fetched while A held its host: %+v, %v", info.Targets, err)
	}
	if got := metricValue(t, r, `batch_host_waits_total{reason="full"}`); got == 0 {
		t.Error(`batch_host_waits_total{reason="full"} = 0 after job B waited for its host`)
	}
	release()
	wantAllDone(t, r, cs, ids)
}

// heldHost starts a runner with two workers and FetchesPerHost 1 whose
// job A holds x.test in a fetch; release lets the fetch end and waits for
// A to end done.
func heldHost(t *testing.T, s batchdriver.Store) (r *batch.Runner, f *hostFetcher, release func()) {
	t.Helper()
	f = newHostFetcher(0)
	f.hold = func(u string) bool { return strings.Contains(u, "/a/") }
	r = batchtest.NewRunner(t, batch.Config{Store: s, Fetch: f.fetch, Workers: 2, JobsPerCaller: 1, JobsTotal: 4, FetchesPerHost: 1})
	cs, ids := submitAll(t, r, hostTargets("x.test", "a", 1))
	waitPeak(t, f, "x.test", 1)
	return r, f, func() {
		close(f.release)
		wantAllDone(t, r, cs, ids)
	}
}

func waitPeak(t *testing.T, f *hostFetcher, host string, n int) {
	t.Helper()
	for deadline := time.Now().Add(waitLong); f.peakOf(host) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%s never had %d fetches in flight", host, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// runnerHostWaitCancel: a job waiting for its host ends cancelled at once
// when its owner cancels it, without a fetch.
func runnerHostWaitCancel(t *testing.T, s batchdriver.Store) {
	r, f, release := heldHost(t, s)
	b := batch.Caller{Name: "waiter"}
	id := mustSubmit(t, r, b, hostTargets("x.test", "b", 2))
	waitRunning(t, r, b, id)
	if err := r.Cancel(t.Context(), b, id); err != nil {
		t.Fatal(err)
	}
	info := batchtest.WaitFinished(t, r, b, id, waitLong)
	if info.Status != batch.JobCancelled || f.callsOf(hostTargets("x.test", "b", 2)[0].URL) != 0 {
		t.Fatalf("cancelled while waiting for its host: %s %+v", info.Status, info.Targets)
	}
	release()
}

// waitRunning waits until the runner has claimed the job.
func waitRunning(t *testing.T, r *batch.Runner, c batch.Caller, id string) {
	t.Helper()
	for deadline := time.Now().Add(waitLong); ; {
		info, err := r.Status(t.Context(), c, id, batch.StatusOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if info.Status != batch.JobQueued {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s never claimed", id)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// runnerHostWaitDeadline: a job waiting for its host ends at its
// deadline, its targets expired, while the host is still held.
func runnerHostWaitDeadline(t *testing.T, s batchdriver.Store) {
	r, _, release := heldHost(t, s)
	b := batch.Caller{Name: "waiter"}
	job, _, err := r.SubmitWith(t.Context(), b, hostTargets("x.test", "b", 2), batch.SubmitOptions{Deadline: time.Now().Add(300 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	info := batchtest.WaitFinished(t, r, b, job.ID, waitLong)
	if info.Status != batch.JobFailed || info.Targets[0].Outcome != batch.OutcomeExpired || info.Targets[1].Outcome != batch.OutcomeExpired {
		t.Fatalf("at its deadline while waiting for its host: %s %+v", info.Status, info.Targets)
	}
	release()
}

// errTooMany stands for a 429 answer.
var errTooMany = batch.NewFetchError(batch.OutcomeUpstream4xx, "", errors.New("upstream 429"))

// runnerRetryAfter: the host answers its first fetch with a 300ms
// Retry-After: no fetch to it starts for 300ms, from any job, and then
// every target ends done. (One fetch to the host at a time: with more, a
// fetch that began before the answer came back is not recalled.)
func runnerRetryAfter(t *testing.T, s batchdriver.Store) {
	const wait = 300 * time.Millisecond
	f := newHostFetcher(0)
	var once sync.Once
	var at time.Time
	f.answer = func(string, int) (err error, answered bool) {
		once.Do(func() { at, err, answered = time.Now(), batch.RetryAfter(wait, errTooMany), true })
		return err, answered
	}
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: f.fetch, Workers: 2, JobsPerCaller: 1, JobsTotal: 4, FetchesPerHost: 1})
	cs, ids := submitAll(t, r, hostTargets("x.test", "a", 2), hostTargets("x.test", "b", 2))
	wantAllDone(t, r, cs, ids)
	starts := f.startsOf("x.test")
	if len(starts) != 5 {
		t.Fatalf("%d fetches, want 5 (4 targets, one of them twice)", len(starts))
	}
	for _, st := range starts {
		if st.After(at) && st.Sub(at) < wait-time.Millisecond {
			t.Errorf("a fetch started %s after the Retry-After of %s", st.Sub(at), wait)
		}
	}
}

// runnerRetryAfterGivesUp: a host that keeps asking to wait fails the
// target, with the fetch's outcome, once it has waited BusyWait.
func runnerRetryAfterGivesUp(t *testing.T, s batchdriver.Store) {
	f := newHostFetcher(0)
	f.answer = func(string, int) (error, bool) { return batch.RetryAfter(100*time.Millisecond, errTooMany), true }
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: f.fetch, BusyWait: batch.Duration(350 * time.Millisecond)})
	ts := hostTargets("x.test", "a", 1)
	id := mustSubmit(t, r, alice, ts)
	info := batchtest.WaitFinished(t, r, alice, id, waitLong)
	if got := info.Targets[0]; info.Status != batch.JobFailed || got.Outcome != batch.OutcomeUpstream4xx || !strings.Contains(got.Error, "429") {
		t.Fatalf("a host that always asks to wait: %s %+v", info.Status, got)
	}
	// Retried at least once, and never more often than the waits allow.
	if n := f.callsOf(ts[0].URL); n < 2 || n > 4 {
		t.Errorf("%d fetches in a BusyWait of 350ms at 100ms each, want 2 to 4", n)
	}
}

// runnerRobotsRefuses: a target the robots checker refuses ends with
// outcome robots and its hint, without a fetch; its crawl delay spaces the
// host's fetch starts.
func runnerRobotsRefuses(t *testing.T, s batchdriver.Store) {
	const delay = 100 * time.Millisecond
	f := newHostFetcher(0)
	robots := func(_ context.Context, t batch.Target) (batch.Robots, error) {
		return batch.Robots{Disallowed: strings.Contains(t.URL, "/private"), CrawlDelay: delay}, nil
	}
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: f.fetch, Robots: robots})
	ts := []batch.Target{{URL: "https://x.test/a"}, {URL: "https://x.test/private/b"}, {URL: "https://x.test/c"}, {URL: "https://x.test/d"}}
	id := mustSubmit(t, r, alice, ts)
	info := batchtest.WaitFinished(t, r, alice, id, waitLong)
	got := info.Targets[1]
	if info.Status != batch.JobPartial || got.Outcome != batch.OutcomeRobots || got.Hint == "" || got.Outcome.Retryable() {
		t.Fatalf("a target robots.txt refuses: %s %+v", info.Status, got)
	}
	if f.callsOf(ts[1].URL) != 0 {
		t.Error("the refused target was fetched")
	}
	wantSpaced(t, f.startsOf("x.test"), 3, delay)
}

// runnerHostWaitResume: with Resume, a job waiting for its host when the
// runner closes is handed on with its target pending and no attempt
// counted; another runner finishes it under the same id.
func runnerHostWaitResume(t *testing.T, s batchdriver.Store) {
	f := newHostFetcher(0)
	f.hold = func(u string) bool { return strings.Contains(u, "/a/") }
	cfg := resumeConfig(s, f.fetch, "host-a")
	cfg.Workers, cfg.JobsPerCaller, cfg.JobsTotal, cfg.FetchesPerHost = 2, 1, 4, 1
	a := startRunner(t, cfg)
	_, _ = submitAll(t, a, hostTargets("x.test", "a", 1))
	waitPeak(t, f, "x.test", 1)
	b := batch.Caller{Name: "waiter"}
	id := mustSubmit(t, a, b, hostTargets("x.test", "b", 2))
	waitRunning(t, a, b, id)
	closeRunner(t, a) // A's fetch is cut short after the grace; B waits for x.test
	info := status(t, a, b, id)
	if info.Status != batch.JobQueued || info.Targets[0].Status != batch.TargetPending || info.Targets[0].Attempts > 1 {
		t.Fatalf("the waiting job after Close: %s %+v, want queued with its targets pending", info.Status, info.Targets)
	}
	rec := batchtest.NewRecordingFetcher(nil)
	cfg.Fetch, cfg.RunnerID = rec.Fetch, "host-b"
	r2 := startRunner(t, cfg)
	end := batchtest.WaitFinished(t, r2, b, id, waitLong)
	if end.Status != batch.JobDone || end.Targets[0].Attempts != 1 {
		t.Fatalf("handed on: %s %+v, want done, its first target fetched once", end.Status, end.Targets)
	}
}
