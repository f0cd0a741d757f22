package batchdrivertest

import (
	"slices"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// runnerResumeCases: with Config.Resume a runner that stops hands its
// jobs on under their ids instead of failing them as "restart".
var runnerResumeCases = map[string]func(*testing.T, batchdriver.Store){
	"ResumeCloseGraceLetsFetchFinish": runnerResumeCloseGrace,
	"ResumeCloseInterrupts":           runnerResumeCloseInterrupts,
	"ResumeCloseRepeatCountsAttempt":  runnerResumeCloseRepeat,
	"ResumeRepeatInterrupted":         runnerResumeRepeat,
	"ResumeStaleRunnerHandedOn":       runnerResumeStale,
	"ResumeStartHandsOn":              runnerResumeStart,
}

func resumeConfig(s batchdriver.Store, f batch.FetchFunc, id string) batch.Config {
	return batch.Config{
		Store: s, Fetch: f, RunnerID: id, Resume: true, CloseGrace: batch.Duration(100 * time.Millisecond),
		PollInterval: batch.Duration(10 * time.Millisecond),
	}
}

// runnerResumeCloseInterrupts: Close cuts short a fetch that outlives its
// grace, stores its target interrupted, and queues the job again; another
// runner continues it under the same id from the next target, so no
// target is fetched twice.
func runnerResumeCloseInterrupts(t *testing.T, s batchdriver.Store) {
	f := batchtest.NewBlockingFetcher()
	a := startRunner(t, resumeConfig(s, f.Fetch, "node-a"))
	ts := batchtest.Targets("resume-close", 3)
	id := mustSubmit(t, a, alice, ts)
	<-f.Started
	f.Release() // target 0 done
	<-f.Started // target 1 in flight, past its grace
	closeRunner(t, a)
	info := status(t, a, alice, id)
	if info.Status != batch.JobQueued || info.Error != "" {
		t.Fatalf("after Close: %s (%q), want queued", info.Status, info.Error)
	}
	wantTargets(t, "after Close", info, batch.TargetDone, batch.TargetFailed, batch.TargetPending)
	if tg := info.Targets[1]; tg.Outcome != batch.OutcomeInterrupted || tg.Error != "interrupted" || !tg.Outcome.Retryable() {
		t.Errorf("interrupted target = %+v", tg)
	}
	if got := metricValue(t, a, `batch_jobs_total{outcome="handed_on"}`); got != 1 {
		t.Errorf("jobs handed on = %d, want 1", got)
	}
	if got := metricValue(t, a, `batch_targets_total{outcome="interrupted"}`); got != 1 {
		t.Errorf("targets interrupted = %d, want 1", got)
	}
	rec := batchtest.NewRecordingFetcher(nil)
	b := startRunner(t, resumeConfig(s, rec.Fetch, "node-b"))
	end := batchtest.WaitFinished(t, b, alice, id, waitLong)
	if end.Status != batch.JobPartial {
		t.Fatalf("continued job = %s, want partial", end.Status)
	}
	wantTargets(t, "continued job", end, batch.TargetDone, batch.TargetFailed, batch.TargetDone)
	if got, want := rec.Order(), []string{ts[2].URL}; !slices.Equal(got, want) {
		t.Errorf("second runner fetched %v, want %v", got, want)
	}
	if got, want := f.Calls(), urlsOf(ts[:2]); !slices.Equal(got, want) {
		t.Errorf("first runner fetched %v, want %v", got, want)
	}
}

// runnerResumeCloseGrace: a fetch in flight that ends within the grace is
// stored, and the next target does not start: the job goes back queued
// with it pending.
func runnerResumeCloseGrace(t *testing.T, s batchdriver.Store) {
	f := batchtest.NewBlockingFetcher()
	cfg := resumeConfig(s, f.Fetch, "node-a")
	cfg.CloseGrace = batch.Duration(waitLong)
	a := startRunner(t, cfg)
	ts := batchtest.Targets("resume-grace", 3)
	id := mustSubmit(t, a, alice, ts)
	<-f.Started
	go func() {
		time.Sleep(50 * time.Millisecond) // Close has begun
		f.Release()
	}()
	closeRunner(t, a)
	info := status(t, a, alice, id)
	if info.Status != batch.JobQueued {
		t.Fatalf("after Close: %s, want queued", info.Status)
	}
	wantTargets(t, "after Close", info, batch.TargetDone, batch.TargetPending, batch.TargetPending)
	// Target 1 was started in the store, never fetched: no attempt.
	if got := targetAttempts(info); info.HandedOn != 1 || !slices.Equal(got, []int{1, 1, 1}) {
		t.Errorf("after Close: handed on %d, attempts %v; want 1, [1 1 1]", info.HandedOn, got)
	}
	if n := len(f.Calls()); n != 1 {
		t.Errorf("fetched %d targets, want 1", n)
	}
	rec := batchtest.NewRecordingFetcher(nil)
	b := startRunner(t, resumeConfig(s, rec.Fetch, "node-b"))
	if end := batchtest.WaitFinished(t, b, alice, id, waitLong); end.Status != batch.JobDone {
		t.Fatalf("continued job = %s, want done", end.Status)
	}
	if got, want := rec.Order(), urlsOf(ts[1:]); !slices.Equal(got, want) {
		t.Errorf("second runner fetched %v, want %v", got, want)
	}
}

// leftByDeadProcess makes a job that a process which died held mid-drain:
// target 0 done, target 1 in flight, target 2 pending.
func leftByDeadProcess(t *testing.T, s batchdriver.Store, runner string) (batchdriver.CreateParams, []batch.Target) {
	t.Helper()
	ts := batchtest.Targets("dead", 3)
	p := jobSpec("alice", "dead", 3, time.Now().Add(-time.Minute))
	p.Targets = nil
	for _, tg := range ts {
		p.Targets = append(p.Targets, batchdriver.Target{URL: tg.URL})
	}
	p.Now = nil
	mustCreate(t, s, p)
	claimJob(t, s, runner, p.ID, time.Now())
	finish(t, s, runner, p.ID, okFinish(0, "kept"), time.Now())
	return p, ts
}

// runnerResumeStart: a runner restarting under the id of a process that
// died hands that process's job on: the target in flight interrupted, the
// rest fetched, under the same job id.
func runnerResumeStart(t *testing.T, s batchdriver.Store) {
	p, ts := leftByDeadProcess(t, s, "dead-process")
	rec := batchtest.NewRecordingFetcher(nil)
	r := startRunner(t, resumeConfig(s, rec.Fetch, "dead-process"))
	end := batchtest.WaitFinished(t, r, alice, p.ID, waitLong)
	if end.Status != batch.JobPartial || end.Error != "" {
		t.Fatalf("job after the restart = %s (%q), want partial", end.Status, end.Error)
	}
	wantTargets(t, "job after the restart", end, batch.TargetDone, batch.TargetFailed, batch.TargetDone)
	if end.Targets[1].Outcome != batch.OutcomeInterrupted {
		t.Errorf("target in flight = %+v, want interrupted", end.Targets[1])
	}
	if got, want := rec.Order(), []string{ts[2].URL}; !slices.Equal(got, want) {
		t.Errorf("fetched %v, want %v", got, want)
	}
	if got := metricValue(t, r, `batch_jobs_total{outcome="handed_on"}`); got != 1 {
		t.Errorf("jobs handed on = %d, want 1", got)
	}
	if got := metricValue(t, r, `batch_jobs_total{outcome="restart"}`); got != 0 {
		t.Errorf("jobs failed by restart = %d, want 0", got)
	}
}

// runnerResumeRepeat: with RepeatInterrupted the target in flight is
// fetched again.
func runnerResumeRepeat(t *testing.T, s batchdriver.Store) {
	p, ts := leftByDeadProcess(t, s, "dead-process")
	rec := batchtest.NewRecordingFetcher(nil)
	cfg := resumeConfig(s, rec.Fetch, "dead-process")
	cfg.RepeatInterrupted = true
	r := startRunner(t, cfg)
	end := batchtest.WaitFinished(t, r, alice, p.ID, waitLong)
	if end.Status != batch.JobDone {
		t.Fatalf("job after the restart = %s, want done", end.Status)
	}
	if got, want := rec.Order(), urlsOf(ts[1:]); !slices.Equal(got, want) {
		t.Errorf("fetched %v, want %v", got, want)
	}
	// The dead process may have reached the upstream with target 1.
	if got := targetAttempts(end); end.HandedOn != 1 || !slices.Equal(got, []int{1, 2, 1}) {
		t.Errorf("job after the restart: handed on %d, attempts %v; want 1, [1 2 1]", end.HandedOn, got)
	}
}

// targetAttempts are the Attempts of info's targets, in idx order.
func targetAttempts(info batch.JobInfo) []int {
	var out []int
	for _, tg := range info.Targets {
		out = append(out, tg.Attempts)
	}
	return out
}

// runnerResumeCloseRepeat: with RepeatInterrupted, Close cuts short a
// fetch that outlives its grace and leaves its target pending, counted as
// an attempt; the runner that continues the job fetches it again, and its
// answer says it was attempted twice.
func runnerResumeCloseRepeat(t *testing.T, s batchdriver.Store) {
	f := batchtest.NewBlockingFetcher()
	cfg := resumeConfig(s, f.Fetch, "node-a")
	cfg.RepeatInterrupted = true
	a := startRunner(t, cfg)
	ts := batchtest.Targets("resume-repeat", 3)
	id := mustSubmit(t, a, alice, ts)
	<-f.Started
	f.Release() // target 0 done
	<-f.Started // target 1 in flight, past its grace
	closeRunner(t, a)
	info := status(t, a, alice, id)
	wantTargets(t, "after Close", info, batch.TargetDone, batch.TargetPending, batch.TargetPending)
	if got := targetAttempts(info); info.Status != batch.JobQueued || info.HandedOn != 1 || !slices.Equal(got, []int{1, 2, 1}) {
		t.Fatalf("after Close: %s, handed on %d, attempts %v; want queued, 1, [1 2 1]", info.Status, info.HandedOn, got)
	}
	rec := batchtest.NewRecordingFetcher(nil)
	bcfg := resumeConfig(s, rec.Fetch, "node-b")
	bcfg.RepeatInterrupted = true
	b := startRunner(t, bcfg)
	end := batchtest.WaitFinished(t, b, alice, id, waitLong)
	if end.Status != batch.JobDone || end.HandedOn != 1 || !slices.Equal(targetAttempts(end), []int{1, 2, 1}) {
		t.Fatalf("continued job = %s, handed on %d, attempts %v; want done, 1, [1 2 1]", end.Status, end.HandedOn, targetAttempts(end))
	}
	if got, want := rec.Order(), urlsOf(ts[1:]); !slices.Equal(got, want) {
		t.Errorf("second runner fetched %v, want %v", got, want)
	}
	if tr, err := b.Result(t.Context(), alice, id, 1); err != nil || tr.Attempts != 2 {
		t.Errorf("Result(1) = attempts %d, %v; want 2", tr.Attempts, err)
	}
}

// runnerResumeStale: the job of a runner that stopped beating is handed
// on by another runner's reaper, which continues it; the stale runner's
// late write is refused.
func runnerResumeStale(t *testing.T, s batchdriver.Store) {
	requireShared(t, s)
	clock := batchtest.NewClock()
	f := batchtest.NewBlockingFetcher()
	acfg := resumeConfig(deafStore{s}, f.Fetch, "node-a")
	acfg.Now = clock.Now
	// One worker, held by target 1's fetch: the handed-back job is b's to
	// claim. With a second worker, a could claim it again first and block
	// in the fetcher, and the job would not finish.
	acfg.Workers = 1
	a := startRunner(t, acfg)
	ts := batchtest.Targets("resume-stale", 3)
	id := mustSubmit(t, a, alice, ts)
	<-f.Started
	f.Release() // target 0 stored
	<-f.Started // target 1 in flight
	rec := batchtest.NewRecordingFetcher(nil)
	bcfg := resumeConfig(s, rec.Fetch, "node-b")
	bcfg.Now = clock.Now
	b := startRunner(t, bcfg)
	clock.Advance(batch.DefaultStaleAfter + time.Second)
	if _, err := b.Collect(t.Context()); err != nil { // or b's background sweep came first
		t.Fatalf("Collect after a went stale: %v", err)
	}
	end := batchtest.WaitFinished(t, b, alice, id, waitLong)
	wantTargets(t, "continued job", end, batch.TargetDone, batch.TargetFailed, batch.TargetDone)
	if end.Status != batch.JobPartial || end.Targets[1].Outcome != batch.OutcomeInterrupted {
		t.Fatalf("continued job = %+v, want partial with target 1 interrupted", end)
	}
	// a wakes up: its fetch returns, its write is refused.
	f.Release()
	waitGauge(t, a, "batch_targets_inflight", 0)
	closeRunner(t, a)
	after := status(t, b, alice, id)
	if after.Targets[1].Outcome != batch.OutcomeInterrupted || after.TargetsDone != end.TargetsDone {
		t.Fatalf("the stale runner's late write changed the job: %+v", after)
	}
	if got, want := rec.Order(), []string{ts[2].URL}; !slices.Equal(got, want) {
		t.Errorf("b fetched %v, want %v", got, want)
	}
}
