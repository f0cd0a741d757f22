package batchdrivertest

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// The runner cases of [batch.Runner.Retry].
var runnerRetryCases = map[string]func(*testing.T, batchdriver.Store){
	"RetryCapsApply":           runnerRetryCaps,
	"RetryCancelledJob":        runnerRetryCancelled,
	"RetryPartialFailures":     runnerRetryPartial,
	"RetryRefusals":            runnerRetryRefusals,
	"RetryRestartedJob":        runnerRetryRestarted,
	"RetryTwiceReusesTheRetry": runnerRetryIdempotent,
}

// fetchLog records every target a fetcher was given.
type fetchLog struct {
	mu   sync.Mutex
	seen []batch.Target
}

func (l *fetchLog) wrap(next batch.FetchFunc) batch.FetchFunc {
	return func(ctx context.Context, c batch.Caller, t batch.Target) (batch.Result, error) {
		l.mu.Lock()
		l.seen = append(l.seen, t)
		l.mu.Unlock()
		return next(ctx, c, t)
	}
}

func (l *fetchLog) since(n int) []batch.Target {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seen[n:])
}

func (l *fetchLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen)
}

func mustRetry(t *testing.T, r *batch.Runner, c batch.Caller, id string) batch.JobInfo {
	t.Helper()
	job, reused, err := r.Retry(t.Context(), c, id)
	if err != nil {
		t.Fatalf("Retry(%s): %v", id, err)
	}
	if reused {
		t.Fatalf("Retry(%s): reused %s, want a new job", id, job.ID)
	}
	return job
}

// wantLineage checks that info retries job of with the targets of idx from.
func wantLineage(t *testing.T, info batch.JobInfo, of string, orig []batch.Target, from ...int) {
	t.Helper()
	if info.RetryOf != of || len(info.Targets) != len(from) {
		t.Fatalf("retry: RetryOf %q with %d targets; want %q with %d", info.RetryOf, len(info.Targets), of, len(from))
	}
	for i, ti := range info.Targets {
		if ti.Idx != i || ti.RetryOfIdx == nil || *ti.RetryOfIdx != from[i] || ti.URL != orig[from[i]].URL {
			t.Errorf("retry target %d: idx %d, RetryOfIdx %v, url %q; want idx %d from %d (%q)",
				i, ti.Idx, ti.RetryOfIdx, ti.URL, i, from[i], orig[from[i]].URL)
		}
	}
}

// runnerRetryPartial: a partial job's failed targets, and only those, make
// the new job, in idx order and with their options; the old job is left as
// it was, and a plain job has no lineage.
func runnerRetryPartial(t *testing.T, s batchdriver.Store) {
	ts := batchtest.Targets("rp", 4)
	ctx := true
	ts[1].Options = batchsift.Fields{Mode: batchsift.ModeClean, Question: "why?", Context: &ctx, Recover: true}.JSON()
	fail := batch.NewFetchError(batch.OutcomeUpstream5xx, "", errors.New("upstream: status 502"))
	log := &fetchLog{}
	r := batchtest.NewRunner(t, batch.Config{Store: s, Options: batchsift.Options, Fetch: log.wrap(batchtest.ScriptFetcher(map[string]batchtest.Step{
		ts[1].URL: {Err: fail}, ts[3].URL: {Err: fail},
	}))})
	id := mustSubmit(t, r, alice, ts)
	old := batchtest.WaitFinished(t, r, alice, id, waitLong)
	if old.Status != batch.JobPartial || old.RetryOf != "" || old.Targets[0].RetryOfIdx != nil {
		t.Fatalf("first job = %s, RetryOf %q, RetryOfIdx %v", old.Status, old.RetryOf, old.Targets[0].RetryOfIdx)
	}
	before := log.len()
	job := mustRetry(t, r, alice, id)
	if job.ID == id || job.Status != batch.JobQueued || job.TargetsTotal != 2 || job.RetryOf != id {
		t.Fatalf("retry = %+v", job)
	}
	info := batchtest.WaitFinished(t, r, alice, job.ID, waitLong)
	wantLineage(t, info, id, ts, 1, 3)
	if info.Status != batch.JobFailed { // the script fails them again
		t.Errorf("retry ended %s, want failed", info.Status)
	}
	got := log.since(before)
	if len(got) != 2 || !sameTarget(got[0], ts[1]) || !sameTarget(got[1], ts[3]) {
		t.Errorf("the retry fetched %+v; want targets 1 and 3 with their options", got)
	}
	if again := status(t, r, alice, id); again.Status != batch.JobPartial || again.TargetsDone != 4 {
		t.Errorf("the retried job is now %s with %d done; want it unchanged", again.Status, again.TargetsDone)
	}
}

func sameTarget(a, b batch.Target) bool {
	return a.URL == b.URL && bytes.Equal(a.Options, b.Options)
}

// runnerRetryCancelled: a cancelled job's retry takes the targets that never
// finished; the one in flight at the cancel finished and is not retried.
func runnerRetryCancelled(t *testing.T, s batchdriver.Store) {
	f := batchtest.NewBlockingFetcher()
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: f.Fetch})
	t.Cleanup(func() {
		for range 4 {
			f.Release()
		}
	})
	ts := batchtest.Targets("rc", 3)
	id := mustSubmit(t, r, alice, ts)
	<-f.Started
	if err := r.Cancel(t.Context(), alice, id); err != nil {
		t.Fatal(err)
	}
	// While the target in flight at the cancel is not stored, the job is
	// still held: a retry now would fetch that target twice at once.
	_, _, err := r.Retry(t.Context(), alice, id)
	wantErr(t, "retry of a cancelled job with a target in flight", err, batch.ErrLive)
	f.Release()
	deadline := time.Now().Add(waitLong)
	for status(t, r, alice, id).Targets[0].Status != batch.TargetDone {
		if time.Now().After(deadline) {
			t.Fatal("the target in flight at the cancel was never stored")
		}
		time.Sleep(time.Millisecond)
	}
	old := status(t, r, alice, id)
	wantTargets(t, "cancelled job", old, batch.TargetDone, batch.TargetPending, batch.TargetPending)
	job := mustRetry(t, r, alice, id)
	<-f.Started
	f.Release()
	<-f.Started
	f.Release()
	info := batchtest.WaitFinished(t, r, alice, job.ID, waitLong)
	wantLineage(t, info, id, ts, 1, 2)
	if info.Status != batch.JobDone {
		t.Errorf("retry ended %s, want done", info.Status)
	}
}

// runnerRetryRestarted: a job failed by a restart is retried from the
// target that was in flight, with the ones after it.
func runnerRetryRestarted(t *testing.T, s batchdriver.Store) {
	f := batchtest.NewBlockingFetcher()
	r := startRunner(t, batch.Config{Store: s, Fetch: f.Fetch})
	ts := batchtest.Targets("rr", 3)
	id := mustSubmit(t, r, alice, ts)
	<-f.Started
	f.Release() // target 0 completes
	<-f.Started // target 1 in flight
	closeRunner(t, r)
	r2 := batchtest.NewRunner(t, batch.Config{Store: s})
	old := status(t, r2, alice, id)
	if old.Status != batch.JobFailed || old.Error != "restart" {
		t.Fatalf("after Close: %s (%q), want failed (restart)", old.Status, old.Error)
	}
	job := mustRetry(t, r2, alice, id)
	info := batchtest.WaitFinished(t, r2, alice, job.ID, waitLong)
	wantLineage(t, info, id, ts, 1, 2)
}

// runnerRetryIdempotent: a second retry of the same job while the first
// retry lives is that retry; a plain submit of the same list is not.
func runnerRetryIdempotent(t *testing.T, s batchdriver.Store) {
	ts := batchtest.Targets("ri", 2)
	// Once hold is set, fetches wait for release: the second retry stays
	// live while it is retried again.
	var hold atomic.Bool
	release := make(chan struct{}, 1) // a token that a fetch takes, now or later
	t.Cleanup(func() { close(release) })
	script := batchtest.ScriptFetcher(map[string]batchtest.Step{ts[0].URL: {Err: batchtest.ErrScripted}})
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: func(ctx context.Context, c batch.Caller, tg batch.Target) (batch.Result, error) {
		if hold.Load() {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return script(ctx, c, tg)
	}})
	id := mustSubmit(t, r, alice, ts)
	batchtest.WaitFinished(t, r, alice, id, waitLong)
	first := mustRetry(t, r, alice, id)
	batchtest.WaitFinished(t, r, alice, first.ID, waitLong) // failed: a failed job is not reused
	hold.Store(true)
	second, reused, err := r.Retry(t.Context(), alice, id)
	if err != nil || reused || second.ID == first.ID {
		t.Fatalf("retry after the first retry failed = %s reused %v, %v; want a new job", second.ID, reused, err)
	}
	third, reused, err := r.Retry(t.Context(), alice, id)
	if err != nil || !reused || third.ID != second.ID || third.RetryOf != id {
		t.Fatalf("retry while the second lives = %s reused %v (RetryOf %q), %v; want %s reused", third.ID, reused, third.RetryOf, err, second.ID)
	}
	hold.Store(false)
	release <- struct{}{} // if the fetch started before hold was cleared
	batchtest.WaitFinished(t, r, alice, second.ID, waitLong)
	plain, reused, err := r.Submit(t.Context(), alice, ts[:1])
	if err != nil || reused || plain.ID == second.ID || plain.RetryOf != "" {
		t.Fatalf("a plain submit of the retried list = %s reused %v, %v; want a new plain job", plain.ID, reused, err)
	}
}

// runnerRetryRefusals: a live job, a job with nothing left to retry and
// another caller's job are refused, and create nothing.
func runnerRetryRefusals(t *testing.T, s batchdriver.Store) {
	f := batchtest.NewBlockingFetcher()
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: f.Fetch})
	t.Cleanup(func() { f.Release() })
	live := mustSubmit(t, r, alice, batchtest.Targets("rl", 1))
	<-f.Started
	_, _, err := r.Retry(t.Context(), alice, live)
	wantErr(t, "retry of a running job", err, batch.ErrLive)
	_, _, err = r.Retry(t.Context(), bob, live)
	wantErr(t, "retry of another caller's job", err, batch.ErrNotFound)
	_, _, err = r.Retry(t.Context(), alice, "no-such-job")
	wantErr(t, "retry of an unknown job", err, batch.ErrNotFound)
	f.Release()
	if info := batchtest.WaitFinished(t, r, alice, live, waitLong); info.Status != batch.JobDone {
		t.Fatalf("job ended %s", info.Status)
	}
	_, _, err = r.Retry(t.Context(), alice, live)
	wantErr(t, "retry of a job with every target done", err, batch.ErrNothingToRetry)
	jobs, err := r.List(t.Context(), alice, 10)
	if err != nil || len(jobs) != 1 {
		t.Errorf("alice has %d jobs (%v) after refused retries, want 1", len(jobs), err)
	}
}

// runnerRetryCaps: a retry counts against the caps as a submit does.
func runnerRetryCaps(t *testing.T, s batchdriver.Store) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	r := batchtest.NewRunner(t, batch.Config{Store: s, JobsPerCaller: 1, Fetch: func(ctx context.Context, c batch.Caller, tg batch.Target) (batch.Result, error) {
		if strings.Contains(tg.URL, "hold") {
			select {
			case <-hold:
			case <-ctx.Done():
			}
		}
		return batch.Result{}, batchtest.ErrScripted
	}})
	id := mustSubmit(t, r, alice, batchtest.Targets("cap", 1))
	batchtest.WaitFinished(t, r, alice, id, waitLong)
	mustSubmit(t, r, alice, batchtest.Targets("hold", 1))
	_, _, err := r.Retry(t.Context(), alice, id)
	wantErr(t, "retry with the caller at its cap", err, batch.ErrCallerBusy)
}
