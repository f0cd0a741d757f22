package batchdrivertest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// runnerDeadlineCases: a job's deadline ends it with what it has, whether
// it is draining or still queued, and a submit's deadline is capped.
var runnerDeadlineCases = map[string]func(*testing.T, batchdriver.Store){
	"DeadlineCapped":             runnerDeadlineCapped,
	"DeadlineEndsSlowJob":        runnerDeadlineSlowJob,
	"DeadlineExpiresQueuedJob":   runnerDeadlineQueued,
	"DeadlineQueuedWallClock":    runnerDeadlineQueuedWall,
	"DeadlineGivesInFlightGrace": runnerDeadlineGrace,
}

// wantOutcomes checks each target's outcome in idx order.
func wantOutcomes(t *testing.T, info batch.JobInfo, want ...batch.Outcome) {
	t.Helper()
	var got []batch.Outcome
	for _, x := range info.Targets {
		got = append(got, x.Outcome)
	}
	if !slices.Equal(got, want) {
		t.Errorf("outcomes = %v, want %v", got, want)
	}
}

func repeat[T any](v T, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// runnerDeadlineSlowJob: ten targets on an upstream that takes a second
// each (on the runner's clock) with a 3s deadline: the three that finish by
// then are done and readable, the seven not started expire unfetched, and
// the job ends partial with error "deadline".
func runnerDeadlineSlowJob(t *testing.T, s batchdriver.Store) {
	clock := batchtest.NewClock()
	rec := batchtest.NewRecordingFetcher(func(ctx context.Context, _ batch.Caller, tg batch.Target) (batch.Result, error) {
		clock.Advance(time.Second)
		return batch.Result{Content: "body of " + tg.URL}, nil
	})
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: rec.Fetch, Now: clock.Now, MaxDeadline: batch.Duration(time.Minute)})
	ts := batchtest.Targets("slow", 10)
	start := clock.Now() // the drain moves the clock as soon as the job is in
	job, _, err := r.SubmitWith(t.Context(), alice, ts, batch.SubmitOptions{DeadlineIn: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if want := start.Add(3 * time.Second); !job.Deadline.Equal(want) {
		t.Errorf("submit's deadline = %v, want %v", job.Deadline, want)
	}
	info := batchtest.WaitFinished(t, r, alice, job.ID, waitLong)
	if info.Status != batch.JobPartial || info.Error != batch.DeadlineReason || info.TargetsDone != 10 || !info.Deadline.Equal(job.Deadline) {
		t.Fatalf("job = %s/%q, %d done, deadline %v; want partial/deadline, 10 done, %v", info.Status, info.Error, info.TargetsDone, info.Deadline, job.Deadline)
	}
	wantOutcomes(t, info, append(repeat(batch.OutcomeOK, 3), repeat(batch.OutcomeExpired, 7)...)...)
	for _, x := range info.Targets[3:] {
		if x.Status != batch.TargetFailed || x.Error != batch.DeadlineReason || !x.Outcome.Retryable() {
			t.Errorf("target %d = %s %q, want failed %q and retryable", x.Idx, x.Status, x.Error, batch.DeadlineReason)
		}
	}
	for i := range 3 {
		res, err := r.Result(t.Context(), alice, job.ID, i)
		if body, _ := batch.DecodeEnvelope(res.Result); err != nil || body.Content != "body of "+ts[i].URL {
			t.Errorf("result %d = %q, %v", i, res.Result, err)
		}
	}
	if got := rec.Order(); len(got) != 3 {
		t.Errorf("fetched %v, want the first three only", got)
	}
	// The runner counts after the write that a waiter sees.
	for end := time.Now().Add(waitLong); ; time.Sleep(5 * time.Millisecond) {
		got := metricValue(t, r, `batch_targets_total{outcome="expired"}`)
		if got == 7 {
			break
		}
		if got > 7 || time.Now().After(end) {
			t.Fatalf("expired targets counted %d, want 7", got)
		}
	}
}

// runnerDeadlineGrace: at the deadline the fetch in flight is told to stop
// and gets its grace; what it returns in it stands; the targets after it
// expire without a fetch.
func runnerDeadlineGrace(t *testing.T, s batchdriver.Store) {
	cut := make(chan error, 1)
	rec := batchtest.NewRecordingFetcher(func(ctx context.Context, _ batch.Caller, tg batch.Target) (batch.Result, error) {
		if strings.HasSuffix(tg.URL, "/0") {
			return batch.Result{Content: "quick"}, nil
		}
		<-ctx.Done() // a slow upstream: the deadline cuts it
		cut <- context.Cause(ctx)
		return batch.Result{Content: "what it had"}, nil
	})
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: rec.Fetch})
	job, _, err := r.SubmitWith(t.Context(), alice, batchtest.Targets("grace", 4), batch.SubmitOptions{DeadlineIn: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	info := batchtest.WaitFinished(t, r, alice, job.ID, waitLong)
	// A fetch of target 1 sent its cause before it returned, and the job
	// finished only after its result was stored.
	select {
	case cause := <-cut:
		if cause == nil || !strings.Contains(cause.Error(), "deadline") {
			t.Errorf("the fetch in flight ended with cause %v, want the job's deadline", cause)
		}
	default:
		if got := rec.Order(); len(got) < 2 {
			t.Skipf("the deadline passed before target 1 started (fetched %v): the machine is too slow for this case's 300ms", got)
		}
		t.Fatalf("target 1 was fetched, but its fetch was never cut")
	}
	if info.Status != batch.JobPartial || info.Error != batch.DeadlineReason {
		t.Fatalf("job = %s/%q, want partial/deadline", info.Status, info.Error)
	}
	wantOutcomes(t, info, batch.OutcomeOK, batch.OutcomeOK, batch.OutcomeExpired, batch.OutcomeExpired)
	if got := rec.Order(); len(got) != 2 {
		t.Errorf("fetched %v, want the first two only", got)
	}
}

// runnerDeadlineQueued: a job still queued at its deadline (the one worker
// is busy) ends at its deadline, not at the next collection (the sweep is
// an hour away), every target expired, failed with error "deadline", and
// its webhook carries the deadline.
func runnerDeadlineQueued(t *testing.T, s batchdriver.Store) {
	clock := batchtest.NewClock()
	hooks := newHookRecorder(nil)
	f := batchtest.NewBlockingFetcher()
	r := batchtest.NewRunner(t, batch.Config{
		Store: s, Fetch: f.Fetch, Now: clock.Now, Workers: 1, Deliver: hooks.Deliver,
		JobsPerCaller: 2, PollInterval: batch.Duration(10 * time.Millisecond),
		SweepInterval: batch.Duration(time.Hour),
	})
	busy := mustSubmit(t, r, alice, batchtest.Targets("busy", 1))
	<-f.Started
	job, _, err := r.SubmitWith(t.Context(), alice, batchtest.Targets("late", 3),
		batch.SubmitOptions{DeadlineIn: time.Minute, WebhookURL: "https://hooks.example.test/late"})
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute - time.Second)
	if info, err := r.Status(t.Context(), alice, job.ID, batch.StatusOptions{}); err != nil || info.Status != batch.JobQueued {
		t.Fatalf("before its deadline the job = %s, %v; want queued", info.Status, err)
	}
	clock.Advance(time.Second)
	info := batchtest.WaitFinished(t, r, alice, job.ID, waitLong)
	if info.Status != batch.JobFailed || info.Error != batch.DeadlineReason || info.TargetsDone != 3 {
		t.Fatalf("job = %s/%q, %d done; want failed/deadline, 3 done", info.Status, info.Error, info.TargetsDone)
	}
	if !info.FinishedAt.Equal(job.Deadline) {
		t.Errorf("finished at %v, want at its deadline %v", info.FinishedAt, job.Deadline)
	}
	wantOutcomes(t, info, repeat(batch.OutcomeExpired, 3)...)
	for _, x := range info.Targets {
		if x.Status != batch.TargetFailed || x.Error != batch.DeadlineReason {
			t.Errorf("target %d = %s %q, want failed %q", x.Idx, x.Status, x.Error, batch.DeadlineReason)
		}
	}
	hooks.waitDelivered(t, job.ID)
	evs, _ := hooks.all()
	if len(evs) == 0 || evs[0].Error != batch.DeadlineReason || !evs[0].Deadline.Equal(job.Deadline) || evs[0].Status != batch.JobFailed {
		t.Errorf("webhook events = %+v, want one failed with error deadline and deadline %v", evs, job.Deadline)
	}
	f.Release()
	if got := batchtest.WaitFinished(t, r, alice, busy, waitLong); got.Status != batch.JobDone || got.Error != "" {
		t.Errorf("the job without a deadline = %s/%q, want done", got.Status, got.Error)
	}
	if got := metricValue(t, r, `batch_targets_total{outcome="expired"}`); got != 3 {
		t.Errorf("expired targets counted %d, want 3", got)
	}
	if c, err := r.Collect(t.Context()); err != nil || c.Expired != 0 {
		t.Errorf("Collect after the deadline timer = %+v, %v; want nothing left to expire", c, err)
	}
}

// runnerDeadlineQueuedWall: on the wall clock (no Config.Now) too, a job
// still queued at its deadline ends then, with the sweep an hour away.
func runnerDeadlineQueuedWall(t *testing.T, s batchdriver.Store) {
	f := batchtest.NewBlockingFetcher()
	r := batchtest.NewRunner(t, batch.Config{
		Store: s, Fetch: f.Fetch, Workers: 1, JobsPerCaller: 2,
		SweepInterval: batch.Duration(time.Hour), PollInterval: batch.Duration(time.Hour),
	})
	defer f.Release()
	mustSubmit(t, r, alice, batchtest.Targets("busy", 1))
	<-f.Started
	job, _, err := r.SubmitWith(t.Context(), alice, batchtest.Targets("late", 2), batch.SubmitOptions{DeadlineIn: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	info := batchtest.WaitFinished(t, r, alice, job.ID, waitLong)
	if info.Status != batch.JobFailed || info.Error != batch.DeadlineReason {
		t.Fatalf("job = %s/%q, want failed/deadline", info.Status, info.Error)
	}
	wantOutcomes(t, info, batch.OutcomeExpired, batch.OutcomeExpired)
}

// runnerDeadlineCapped: Config.MaxDeadline caps a submit's deadline and is
// the default; a deadline not in the future is refused.
func runnerDeadlineCapped(t *testing.T, s batchdriver.Store) {
	clock := batchtest.NewClock()
	r := batchtest.NewRunner(t, batch.Config{Store: s, Now: clock.Now, MaxDeadline: batch.Duration(time.Hour), JobsPerCaller: 4, JobsTotal: 8})
	for _, c := range []struct {
		name string
		opts batch.SubmitOptions
		want error
	}{
		{"over the cap", batch.SubmitOptions{DeadlineIn: time.Hour + time.Second}, batch.ErrDeadlineTooFar},
		{"a time over the cap", batch.SubmitOptions{Deadline: clock.Now().Add(2 * time.Hour)}, batch.ErrDeadlineTooFar},
		{"in the past", batch.SubmitOptions{Deadline: clock.Now().Add(-time.Second)}, batch.ErrInvalidDeadline},
		{"now", batch.SubmitOptions{Deadline: clock.Now()}, batch.ErrInvalidDeadline},
		{"a negative duration", batch.SubmitOptions{DeadlineIn: -time.Second}, batch.ErrInvalidDeadline},
	} {
		_, _, err := r.SubmitWith(t.Context(), alice, batchtest.Targets("cap", 1), c.opts)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if errors.Is(err, batch.ErrDeadlineTooFar) && !strings.Contains(err.Error(), "1h0m0s") {
			t.Errorf("%s: %q does not name the cap", c.name, err)
		}
	}
	job, _, err := r.SubmitWith(t.Context(), alice, batchtest.Targets("default", 1), batch.SubmitOptions{})
	if err != nil || !job.Deadline.Equal(clock.Now().Add(time.Hour)) {
		t.Errorf("a submit without a deadline = %v, %v; want the cap from now", job.Deadline, err)
	}
	job, _, err = r.SubmitWith(t.Context(), alice, batchtest.Targets("at-cap", 1), batch.SubmitOptions{DeadlineIn: time.Hour})
	if err != nil || !job.Deadline.Equal(clock.Now().Add(time.Hour)) {
		t.Errorf("a deadline at the cap = %v, %v; want it taken", job.Deadline, err)
	}
	free := batchtest.NewRunner(t, batch.Config{Store: batchtest.NewStore(), Now: clock.Now})
	job, _, err = free.SubmitWith(t.Context(), alice, batchtest.Targets("free", 1), batch.SubmitOptions{})
	if err != nil || !job.Deadline.IsZero() {
		t.Errorf("without MaxDeadline a submit without a deadline = %v, %v; want none", job.Deadline, err)
	}
	job, _, err = free.SubmitWith(t.Context(), bob, batchtest.Targets("free", 1), batch.SubmitOptions{DeadlineIn: 1000 * time.Hour})
	if err != nil || !job.Deadline.Equal(clock.Now().Add(1000*time.Hour)) {
		t.Errorf("without MaxDeadline a far deadline = %v, %v; want it taken", job.Deadline, err)
	}
}
