package batchdrivertest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// runnerDrainCases are the runner cases of draining a job: serial order,
// outcomes, failure isolation, busy retries, cancel, caps, the lease,
// eviction, faults of the store, Close and restart.
var runnerDrainCases = map[string]func(*testing.T, batchdriver.Store){
	"AbandonedFetchKeepsSlot":  runnerAbandonedKeepsSlot,
	"AllFailedIsFailed":        runnerAllFailed,
	"AllOKIsDone":              runnerAllOK,
	"BusyRetriedThenFails":     runnerBusyFails,
	"BusyRetriedThenOK":        runnerBusyThenOK,
	"BusyWaitStopsOnCancel":    runnerBusyCancel,
	"CancelRacesLastTarget":    runnerCancelRace,
	"CancelStopsLaterTargets":  runnerCancel,
	"Caps":                     runnerCaps,
	"EvictOverByteBudget":      runnerEvict,
	"FailureIsolationPartial":  runnerPartial,
	"HangingFetcherTimesOut":   runnerHanging,
	"IdempotentResubmit":       runnerIdempotent,
	"LeaseSlidesAndSweeps":     runnerLease,
	"MetaPanicFailsItsTarget":  runnerMetaPanic,
	"OversizeResultTooLong":    runnerTooLong,
	"PanicFailsOnlyItsTarget":  runnerPanic,
	"CloseFailsItsRunningJobs": runnerCloseFails,
	"HeartbeatWithoutProgress": runnerHeartbeatWithoutProgress,
	"RestartFailsLeftJobs":     runnerRestartLeftJobs,
	"ResubmitAfterCancel":      runnerResubmitAfterCancel,
	"SerialOrder":              runnerSerial,
	"StoreFaultsAreRetried":    runnerStoreFaults,
	"UnstorableResultFails":    runnerUnstorable,
	"SubmitValidation":         runnerValidation,
}

var (
	alice = batch.Caller{Name: "alice", Class: "agent"}
	bob   = batch.Caller{Name: "bob"}
)

const waitLong = 10 * time.Second

var discardLogger = slog.New(slog.DiscardHandler)

func mustSubmit(t *testing.T, r *batch.Runner, c batch.Caller, ts []batch.Target) string {
	t.Helper()
	job, reused, err := r.Submit(t.Context(), c, ts)
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if reused || job.Status != batch.JobQueued {
		t.Fatalf("Submit = %s (%s, reused %v), want a new queued job", job.ID, job.Status, reused)
	}
	return job.ID
}

func targetStatuses(info batch.JobInfo) []batch.TargetStatus {
	var out []batch.TargetStatus
	for _, t := range info.Targets {
		out = append(out, t.Status)
	}
	return out
}

func runnerSerial(t *testing.T, s batchdriver.Store) {
	f := batchtest.NewBlockingFetcher()
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: f.Fetch})
	ts := batchtest.Targets("serial", 5)
	id := mustSubmit(t, r, alice, ts)
	for i := range ts {
		select {
		case url := <-f.Started:
			if url != ts[i].URL {
				t.Fatalf("fetch %d was %s, want %s", i, url, ts[i].URL)
			}
		case <-time.After(waitLong):
			t.Fatalf("target %d never started", i)
		}
		// Target i+1 must not start before target i is written.
		select {
		case url := <-f.Started:
			t.Fatalf("%s started while target %d was in flight", url, i)
		case <-time.After(20 * time.Millisecond):
		}
		f.Release()
	}
	info := batchtest.WaitFinished(t, r, alice, id, waitLong)
	if info.Status != batch.JobDone || f.Peak() != 1 {
		t.Fatalf("status %s, peak in flight %d; want done, 1", info.Status, f.Peak())
	}
	for i, tg := range info.Targets {
		env, err := batch.DecodeEnvelope(tg.Result)
		if err != nil || env.Content != "released:"+ts[i].URL {
			t.Errorf("target %d result %q, %v", i, tg.Result, err)
		}
	}
}

func runnerPartial(t *testing.T, s batchdriver.Store) {
	ts := batchtest.Targets("partial", 3)
	blocked := batch.NewFetchError(batch.OutcomeBlocked, "browser", errors.New("blocked: private address"))
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: batchtest.ScriptFetcher(map[string]batchtest.Step{ts[1].URL: {Err: blocked}})})
	id := mustSubmit(t, r, alice, ts)
	info := batchtest.WaitFinished(t, r, alice, id, waitLong)
	if info.Status != batch.JobPartial || info.TargetsDone != 3 {
		t.Fatalf("job = %s with %d done; want partial with 3", info.Status, info.TargetsDone)
	}
	got := info.Targets[1]
	if got.Status != batch.TargetFailed || got.Error != "blocked: private address" || got.Hint != "browser" || got.Outcome != batch.OutcomeBlocked {
		t.Errorf("failed target = %+v", got)
	}
	if info.Targets[0].Status != batch.TargetDone || info.Targets[2].Status != batch.TargetDone {
		t.Errorf("statuses = %v", targetStatuses(info))
	}
}

func runnerAllFailed(t *testing.T, s batchdriver.Store) {
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: batchtest.FailingFetcher(batchtest.ErrScripted)})
	id := mustSubmit(t, r, alice, batchtest.Targets("failed", 2))
	info := batchtest.WaitFinished(t, r, alice, id, waitLong)
	if info.Status != batch.JobFailed || info.Targets[0].Outcome != batch.OutcomeOther || info.Targets[0].Error != batchtest.ErrScripted.Error() {
		t.Fatalf("job = %+v", info)
	}
}

func runnerAllOK(t *testing.T, s batchdriver.Store) {
	r := batchtest.NewRunner(t, batch.Config{Store: s})
	id := mustSubmit(t, r, alice, batchtest.Targets("ok", 4))
	if info := batchtest.WaitFinished(t, r, alice, id, waitLong); info.Status != batch.JobDone || info.TargetsDone != 4 {
		t.Fatalf("job = %s, %d done; want done, 4", info.Status, info.TargetsDone)
	}
}

func runnerIdempotent(t *testing.T, s batchdriver.Store) {
	rec := batchtest.NewRecordingFetcher(nil)
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: rec.Fetch})
	ts := batchtest.Targets("idem", 3)
	id := mustSubmit(t, r, alice, ts)
	again, reused, err := r.Submit(t.Context(), alice, slices.Clone(ts))
	if err != nil || !reused || again.ID != id {
		t.Fatalf("resubmit = %s, %v, %v; want %s reused", again.ID, reused, err, id)
	}
	batchtest.WaitFinished(t, r, alice, id, waitLong)
	again, reused, err = r.Submit(t.Context(), alice, ts)
	if err != nil || !reused || again.ID != id || again.Status != batch.JobDone {
		t.Fatalf("resubmit after done = %s (%s), %v, %v; want %s reused, done", again.ID, again.Status, reused, err, id)
	}
	// Give a wrongly woken worker a chance to drain twice.
	time.Sleep(50 * time.Millisecond)
	for _, tg := range ts {
		if n := rec.Count(tg.URL); n != 1 {
			t.Errorf("%s fetched %d times, want 1", tg.URL, n)
		}
	}
}

func runnerResubmitAfterCancel(t *testing.T, s batchdriver.Store) {
	f := batchtest.NewBlockingFetcher()
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: f.Fetch})
	ts := batchtest.Targets("retry", 2)
	id := mustSubmit(t, r, alice, ts)
	<-f.Started
	if err := r.Cancel(t.Context(), alice, id); err != nil {
		t.Fatal(err)
	}
	f.Release()
	batchtest.WaitFinished(t, r, alice, id, waitLong)
	job2, reused, err := r.Submit(t.Context(), alice, ts)
	if err != nil || reused || job2.ID == id {
		t.Fatalf("resubmit after cancel = %s, %v, %v; want a new job", job2.ID, reused, err)
	}
	id2 := job2.ID
	f.Release()
	f.Release()
	if info := batchtest.WaitFinished(t, r, alice, id2, waitLong); info.Status != batch.JobDone {
		t.Fatalf("retry job = %s, want done", info.Status)
	}
}

func runnerCaps(t *testing.T, s batchdriver.Store) {
	f := batchtest.NewBlockingFetcher()
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: f.Fetch, TargetsPerJob: 3, JobsPerCaller: 1, JobsTotal: 2})
	t.Cleanup(func() {
		for range 10 {
			f.Release()
		}
	})
	_, _, err := r.Submit(t.Context(), alice, batchtest.Targets("x", 4))
	wantErr(t, "4 targets", err, batch.ErrTooManyTargets)
	mustSubmit(t, r, alice, batchtest.Targets("a", 1))
	_, _, err = r.Submit(t.Context(), alice, batchtest.Targets("a2", 1))
	wantErr(t, "second alice job", err, batch.ErrCallerBusy)
	mustSubmit(t, r, bob, batchtest.Targets("b", 1))
	_, _, err = r.Submit(t.Context(), batch.Caller{Name: "carol"}, batchtest.Targets("c", 1))
	wantErr(t, "third live job", err, batch.ErrBusy)
	// Resubmitting your own live job is reuse, not a cap error.
	if _, reused, err := r.Submit(t.Context(), alice, batchtest.Targets("a", 1)); err != nil || !reused {
		t.Fatalf("resubmit at the caps = %v, %v; want reused", reused, err)
	}
}

func runnerValidation(t *testing.T, s batchdriver.Store) {
	r := batchtest.NewRunner(t, batch.Config{Store: s})
	f := func(c batch.Caller, ts []batch.Target, want error) {
		t.Helper()
		if _, _, err := r.Submit(t.Context(), c, ts); !errors.Is(err, want) {
			t.Errorf("Submit(%v) error = %v, want %v", ts, err, want)
		}
	}
	f(alice, nil, batch.ErrNoTargets)
	f(batch.Caller{}, batchtest.Targets("x", 1), batch.ErrInvalidCaller)
	f(alice, []batch.Target{{URL: "https://a.test/"}, {URL: ""}}, batch.ErrInvalidTarget)
	f(alice, []batch.Target{{URL: "https://a.test/", Options: batchsift.Fields{Mode: "bogus"}.JSON()}}, batch.ErrInvalidTarget)
	f(alice, []batch.Target{{URL: "https://a.test/\xff"}}, batch.ErrInvalidTarget)
	f(alice, []batch.Target{{URL: "https://a.test/", Options: batchsift.Fields{Question: "\xc3"}.JSON()}}, batch.ErrInvalidTarget)
	_, _, err := r.Submit(t.Context(), alice, []batch.Target{{URL: "https://a.test/"}, {URL: ""}})
	var te *batch.TargetError
	if !errors.As(err, &te) || te.Index != 1 {
		t.Errorf("error %v, want a TargetError for index 1", err)
	}
	if st, _ := s.Stats(t.Context()); st.Queued+st.Running != 0 {
		t.Errorf("invalid submits created jobs: %+v", st)
	}
}

func runnerCancel(t *testing.T, s batchdriver.Store) {
	f := batchtest.NewBlockingFetcher()
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: f.Fetch})
	ts := batchtest.Targets("cancel", 4)
	id := mustSubmit(t, r, alice, ts)
	<-f.Started // target 0 in flight
	if err := r.Cancel(t.Context(), alice, id); err != nil {
		t.Fatal(err)
	}
	info, err := r.Status(t.Context(), alice, id, batch.StatusOptions{})
	if err != nil || info.Status != batch.JobCancelled {
		t.Fatalf("status right after cancel = %s, %v; want cancelled", info.Status, err)
	}
	f.Release()
	// Wait until the in-flight target is stored.
	deadline := time.Now().Add(waitLong)
	for info.Targets[0].Status != batch.TargetDone && time.Now().Before(deadline) {
		info, _ = r.Wait(t.Context(), alice, id, batch.WaitOptions{Since: &info.TargetsDone, Timeout: time.Second})
	}
	time.Sleep(50 * time.Millisecond) // a later target would start now, if it were going to
	info, _ = r.Status(t.Context(), alice, id, batch.StatusOptions{Results: true})
	want := []batch.TargetStatus{batch.TargetDone, batch.TargetPending, batch.TargetPending, batch.TargetPending}
	if !slices.Equal(targetStatuses(info), want) || info.Status != batch.JobCancelled {
		t.Fatalf("after cancel: %s %v; want cancelled %v", info.Status, targetStatuses(info), want)
	}
	if calls := f.Calls(); len(calls) != 1 {
		t.Fatalf("fetched %v; want only the first target", calls)
	}
	wantErr(t, "second cancel", r.Cancel(t.Context(), alice, id), batch.ErrFinished)
}

func runnerPanic(t *testing.T, s batchdriver.Store) {
	ts := batchtest.Targets("panic", 3)
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: batchtest.PanickingFetcher(ts[1].URL, "boom "+ts[1].URL)})
	id := mustSubmit(t, r, alice, ts)
	info := batchtest.WaitFinished(t, r, alice, id, waitLong)
	got := info.Targets[1]
	if info.Status != batch.JobPartial || got.Status != batch.TargetFailed || got.Error != "internal error" || got.Outcome != batch.OutcomeOther {
		t.Fatalf("job %s, target 1 = %+v", info.Status, got)
	}
	// The worker lives on.
	id2 := mustSubmit(t, r, alice, batchtest.Targets("after-panic", 1))
	if info := batchtest.WaitFinished(t, r, alice, id2, waitLong); info.Status != batch.JobDone {
		t.Fatalf("next job = %s, want done", info.Status)
	}
}

func runnerHanging(t *testing.T, s batchdriver.Store) {
	release := make(chan struct{})
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: batchtest.HangingFetcher(release), TargetTimeout: batch.Duration(50 * time.Millisecond)})
	t.Cleanup(func() { close(release) }) // runs before the runner's Close
	id := mustSubmit(t, r, alice, batchtest.Targets("hang", 2))
	info := batchtest.WaitFinished(t, r, alice, id, waitLong)
	for _, tg := range info.Targets {
		if tg.Status != batch.TargetFailed || tg.Outcome != batch.OutcomeTimeout || !strings.HasPrefix(tg.Error, "timeout") {
			t.Errorf("target %d = %+v, want a timeout", tg.Idx, tg)
		}
	}
}

func runnerBusyThenOK(t *testing.T, s batchdriver.Store) {
	fetch, calls := batchtest.BusyThenOK(3)
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: fetch, BusyWait: batch.Duration(waitLong)})
	id := mustSubmit(t, r, alice, batchtest.Targets("busy", 1))
	info := batchtest.WaitFinished(t, r, alice, id, waitLong)
	if info.Status != batch.JobDone || calls.Load() != 4 {
		t.Fatalf("job %s after %d calls; want done after 4", info.Status, calls.Load())
	}
}

func runnerBusyFails(t *testing.T, s batchdriver.Store) {
	fetch, calls := batchtest.BusyThenOK(1 << 30)
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: fetch, BusyWait: batch.Duration(300 * time.Millisecond)})
	id := mustSubmit(t, r, alice, batchtest.Targets("busy", 1))
	info := batchtest.WaitFinished(t, r, alice, id, waitLong)
	got := info.Targets[0]
	if info.Status != batch.JobFailed || got.Outcome != batch.OutcomeBusy || !strings.HasPrefix(got.Error, "busy") {
		t.Fatalf("job %s, target = %+v; want failed busy", info.Status, got)
	}
	if calls.Load() < 2 {
		t.Errorf("busy fetcher called %d times, want retries", calls.Load())
	}
}

func runnerTooLong(t *testing.T, s batchdriver.Store) {
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: batchtest.StaticFetcher(strings.Repeat("x", 200)), MaxResultBytes: 100})
	id := mustSubmit(t, r, alice, batchtest.Targets("long", 1))
	info := batchtest.WaitFinished(t, r, alice, id, waitLong)
	if got := info.Targets[0]; got.Outcome != batch.OutcomeTooLong || got.Result != nil || info.Status != batch.JobFailed {
		t.Fatalf("target = %+v", got)
	}
}

func runnerLease(t *testing.T, s batchdriver.Store) {
	clock := batchtest.NewClock()
	ttl := time.Hour
	r := batchtest.NewRunner(t, batch.Config{Store: s, Now: clock.Now, TTL: batch.Duration(ttl)})
	id := mustSubmit(t, r, alice, batchtest.Targets("lease", 1))
	info := batchtest.WaitFinished(t, r, alice, id, waitLong)
	if want := clock.Now().Add(ttl); !info.ExpiresAt.Equal(want) {
		t.Fatalf("expires at %v, want %v", info.ExpiresAt, want)
	}
	collect := func() {
		t.Helper()
		if _, err := r.Collect(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	// Reads keep it alive well past one TTL.
	for range 4 {
		clock.Advance(ttl / 2)
		if err := r.Touch(t.Context(), alice, id); err != nil {
			t.Fatalf("Touch: %v", err)
		}
		collect()
	}
	clock.Advance(ttl - time.Minute)
	collect()
	if _, err := r.Status(t.Context(), alice, id, batch.StatusOptions{}); err != nil {
		t.Fatalf("job gone before its TTL: %v", err)
	}
	clock.Advance(2 * time.Minute)
	collect()
	_, err := r.Status(t.Context(), alice, id, batch.StatusOptions{})
	wantErr(t, "status after TTL", err, batch.ErrNotFound)
}

func runnerEvict(t *testing.T, s batchdriver.Store) {
	clock := batchtest.NewClock()
	body := strings.Repeat("x", 1000)
	r := batchtest.NewRunner(t, batch.Config{Store: s, Now: clock.Now, MaxBytes: 2500, Fetch: batchtest.StaticFetcher(body)})
	var ids []string
	for i := range 3 {
		id := mustSubmit(t, r, alice, batchtest.Targets("evict"+string(rune('a'+i)), 1))
		batchtest.WaitFinished(t, r, alice, id, waitLong)
		ids = append(ids, id)
		clock.Advance(time.Minute)
	}
	// The runner's own collection at Start may run late on a slow store,
	// after the three jobs, and evict first: between the two, one job.
	if c, err := r.Collect(t.Context()); err != nil || c.Evicted > 1 {
		t.Fatalf("Collect evicted %d, %v; want at most 1", c.Evicted, err)
	}
	_, err := r.Status(t.Context(), alice, ids[0], batch.StatusOptions{})
	wantErr(t, "oldest job", err, batch.ErrNotFound)
	for _, id := range ids[1:] {
		if _, err := r.Status(t.Context(), alice, id, batch.StatusOptions{}); err != nil {
			t.Errorf("newer job %s: %v", id, err)
		}
	}
}

// runnerGoroutines counts goroutines with a frame in a Runner method. The
// "created by" line of a goroutine does not count: one that has returned
// may still show it while it exits.
func runnerGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, line := range strings.Split(g, "\n") {
			if strings.Contains(line, "batchkit/batch.(*Runner)") && !strings.HasPrefix(line, "created by ") {
				n++
				break
			}
		}
	}
	return n
}

func runnerCloseMidDrain(t *testing.T, s batchdriver.Store) {
	f := batchtest.NewBlockingFetcher()
	r, err := batch.New(batch.Config{Store: s, Fetch: f.Fetch, Logger: batchtest.Logger(t), Workers: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	mustSubmit(t, r, alice, batchtest.Targets("close", 5))
	<-f.Started
	if runnerGoroutines() == 0 {
		t.Fatal("no runner goroutines while draining: the check below would prove nothing")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := r.Close(ctx); err != nil {
		t.Fatalf("Close with a job mid-drain: %v", err)
	}
	// Close has waited for every goroutine to return; give the scheduler a
	// moment to retire them before looking.
	deadline := time.Now().Add(2 * time.Second)
	for runnerGoroutines() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runnerGoroutines(); n != 0 {
		t.Fatalf("%d runner goroutines left after Close", n)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	_, _, err = r.Submit(t.Context(), alice, batchtest.Targets("late", 1))
	wantErr(t, "Submit after Close", err, batch.ErrClosed)
}

// runnerCancelRace cancels a one-target job at the moment its target
// finishes, many times: the cancel either wins (the job reads cancelled, its
// target stored) or loses with ErrFinished (the job reads done), never both
// and never neither.
func runnerCancelRace(t *testing.T, s batchdriver.Store) {
	f := batchtest.NewBlockingFetcher()
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: f.Fetch, Workers: 1, Logger: discardLogger})
	won, lost := 0, 0
	for i := range 100 {
		id := mustSubmit(t, r, alice, batchtest.Targets("race"+strconv.Itoa(i), 1))
		<-f.Started
		cancelled := make(chan error, 1)
		go func() { cancelled <- r.Cancel(context.Background(), alice, id) }()
		f.Release()
		err := <-cancelled
		info := batchtest.WaitFinished(t, r, alice, id, waitLong)
		// The in-flight target is stored either way.
		deadline := time.Now().Add(waitLong)
		for info.Targets[0].Status != batch.TargetDone && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
			info, _ = r.Status(t.Context(), alice, id, batch.StatusOptions{})
		}
		switch {
		case err == nil && info.Status == batch.JobCancelled:
			won++
		case errors.Is(err, batch.ErrFinished) && info.Status == batch.JobDone:
			lost++
		default:
			t.Fatalf("round %d: cancel = %v, job = %s", i, err, info.Status)
		}
		if info.Targets[0].Status != batch.TargetDone || info.TargetsDone != 1 {
			t.Fatalf("round %d: target = %+v, done = %d", i, info.Targets[0], info.TargetsDone)
		}
	}
	t.Logf("cancel won %d, lost %d of 100 races", won, lost)
}

func runnerBusyCancel(t *testing.T, s batchdriver.Store) {
	fetch, calls := batchtest.BusyThenOK(1 << 30)
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: fetch, BusyWait: batch.Duration(time.Minute)})
	id := mustSubmit(t, r, alice, batchtest.Targets("busy-cancel", 2))
	for calls.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	if err := r.Cancel(t.Context(), alice, id); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	info, _ := r.Status(t.Context(), alice, id, batch.StatusOptions{})
	for info.Targets[0].Status != batch.TargetFailed && time.Since(start) < waitLong {
		time.Sleep(5 * time.Millisecond)
		info, _ = r.Status(t.Context(), alice, id, batch.StatusOptions{})
	}
	got := info.Targets[0]
	if got.Status != batch.TargetFailed || got.Outcome != batch.OutcomeCancel || info.Targets[1].Status != batch.TargetPending {
		t.Fatalf("after a cancel during busy back-off: %+v", info.Targets)
	}
	n := calls.Load()
	time.Sleep(100 * time.Millisecond)
	if calls.Load() != n {
		t.Errorf("the fetcher was called again after the target failed")
	}
}

// panicJSON panics when it is encoded.
type panicJSON struct{}

func (panicJSON) MarshalJSON() ([]byte, error) { panic("marshal exploded") }

func runnerMetaPanic(t *testing.T, s batchdriver.Store) {
	ts := batchtest.Targets("meta", 2)
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: batchtest.ScriptFetcher(map[string]batchtest.Step{
		ts[0].URL: {Result: batch.Result{Content: "x", Meta: map[string]any{"bad": panicJSON{}}}},
	})})
	id := mustSubmit(t, r, alice, ts)
	info := batchtest.WaitFinished(t, r, alice, id, waitLong)
	if got := info.Targets[0]; got.Error != "internal error" || got.Outcome != batch.OutcomeOther || info.Status != batch.JobPartial {
		t.Fatalf("job %s, target 0 = %+v; want only it failed with internal error", info.Status, got)
	}
}

// faultyStore fails the first drain writes with a passing error, as a
// store does while a lock wait runs out or the disk is full.
type faultyStore struct {
	batchdriver.Store
	mu    sync.Mutex
	fails int
}

var errPassing = fmt.Errorf("passing fault: %w", batch.ErrUnavailable)

func (f *faultyStore) FinishTarget(ctx context.Context, p batchdriver.FinishParams) (batchdriver.Step, error) {
	f.mu.Lock()
	fail := f.fails > 0
	f.fails--
	f.mu.Unlock()
	if fail {
		return batchdriver.Step{}, errPassing
	}
	return f.Store.FinishTarget(ctx, p)
}

func runnerStoreFaults(t *testing.T, s batchdriver.Store) {
	fs := &faultyStore{Store: s, fails: 3}
	rec := batchtest.NewRecordingFetcher(nil)
	r := batchtest.NewRunner(t, batch.Config{Store: fs, Fetch: rec.Fetch})
	ts := batchtest.Targets("faults", 2)
	id := mustSubmit(t, r, alice, ts)
	info := batchtest.WaitFinished(t, r, alice, id, waitLong)
	if info.Status != batch.JobDone || info.TargetsDone != 2 {
		t.Fatalf("job after passing store faults = %s, %d done; want done, 2", info.Status, info.TargetsDone)
	}
	for _, tg := range ts {
		if n := rec.Count(tg.URL); n != 1 {
			t.Errorf("%s fetched %d times, want 1", tg.URL, n)
		}
	}
	// The caller's cap is free again.
	mustSubmit(t, r, alice, batchtest.Targets("after-faults", 1))
}

// runnerAbandonedFetchKeepsSlot: a fetcher that ignores its deadline is
// abandoned, but its call still counts against Workers, so the next target
// waits for it instead of running a second fetch beside it.
func runnerAbandonedKeepsSlot(t *testing.T, s batchdriver.Store) {
	release, started := make(chan struct{}), make(chan struct{}, 3)
	var mu sync.Mutex
	running, peak, calls := 0, 0, 0
	fetch := func(ctx context.Context, _ batch.Caller, tg batch.Target) (batch.Result, error) {
		mu.Lock()
		running++
		calls++
		peak = max(peak, running)
		mu.Unlock()
		started <- struct{}{}
		defer func() {
			mu.Lock()
			running--
			mu.Unlock()
		}()
		<-release // ignores ctx
		return batch.Result{Content: "late"}, nil
	}
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: fetch, Workers: 1, TargetTimeout: batch.Duration(20 * time.Millisecond)})
	id := mustSubmit(t, r, alice, batchtest.Targets("abandon", 3))
	select {
	case <-started:
	case <-time.After(waitLong):
		t.Fatal("the first target never started")
	}
	time.Sleep(200 * time.Millisecond) // ten deadlines: without the slot rule all three would be running
	mu.Lock()
	gotCalls, gotPeak := calls, peak
	mu.Unlock()
	if gotCalls != 1 || gotPeak != 1 {
		t.Fatalf("%d calls, %d at once while the first ignored its deadline; want 1 and 1", gotCalls, gotPeak)
	}
	close(release)
	info := batchtest.WaitFinished(t, r, alice, id, waitLong)
	mu.Lock()
	defer mu.Unlock()
	// Target 0 timed out; once it returned, the others ran (the fetcher
	// answers at once after the release).
	want := []batch.Outcome{batch.OutcomeTimeout, batch.OutcomeOK, batch.OutcomeOK}
	for i, tg := range info.Targets {
		if tg.Outcome != want[i] {
			t.Errorf("target %d = %s, want %s", i, tg.Outcome, want[i])
		}
	}
	if peak != 1 || calls != 3 {
		t.Errorf("%d calls, peak %d at once; want 3 and 1", calls, peak)
	}
}

// fullStore refuses every result over limit bytes, as a store whose disk
// has no room for it does; smaller writes pass.
type fullStore struct {
	batchdriver.Store
	limit int
}

func (f fullStore) FinishTarget(ctx context.Context, p batchdriver.FinishParams) (batchdriver.Step, error) {
	if len(p.Target.Result) > f.limit {
		return batchdriver.Step{}, fmt.Errorf("disk full: %w", batch.ErrUnavailable)
	}
	return f.Store.FinishTarget(ctx, p)
}

// runnerUnstorable: a result the store cannot take for StoreWait fails its
// target instead of stranding the worker; the job goes on.
func runnerUnstorable(t *testing.T, s batchdriver.Store) {
	ts := batchtest.Targets("unstorable", 3)
	fetch := batchtest.ScriptFetcher(map[string]batchtest.Step{ts[1].URL: {Result: batch.Result{Content: strings.Repeat("x", 500)}}})
	r := batchtest.NewRunner(t, batch.Config{Store: fullStore{s, 200}, Fetch: fetch, StoreWait: batch.Duration(200 * time.Millisecond), Logger: discardLogger})
	id := mustSubmit(t, r, alice, ts)
	info := batchtest.WaitFinished(t, r, alice, id, waitLong)
	got := info.Targets[1]
	if info.Status != batch.JobPartial || got.Status != batch.TargetFailed || got.Outcome != batch.OutcomeOther ||
		!strings.HasPrefix(got.Error, "not stored: the store could not take the ") {
		t.Fatalf("job %s, target 1 = %+v; want it failed as not stored, the others done", info.Status, got)
	}
	wantTargets(t, "after an unstorable result", info, batch.TargetDone, batch.TargetFailed, batch.TargetDone)
}
