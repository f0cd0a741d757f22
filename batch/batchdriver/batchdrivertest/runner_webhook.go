package batchdrivertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// runnerWebhookCases: the runner decides when a webhook event is due and
// delivers it through Config.Deliver, at least once, retried with back-off
// for a bounded time.
var runnerWebhookCases = map[string]func(*testing.T, batchdriver.Store){
	"WebhookBlockedNotRetried":  runnerWebhookBlocked,
	"WebhookCloseMidDelivery":   runnerWebhookCloseMidDelivery,
	"WebhookDroppedAfterBound":  runnerWebhookDropped,
	"WebhookOncePerFinishedJob": runnerWebhookOnce,
	"WebhookRestartedJob":       runnerWebhookRestart,
	"WebhookRetriedUntilOK":     runnerWebhookRetried,
	"WebhookSubmit":             runnerWebhookSubmit,
}

// hookRecorder is a Config.Deliver that records every attempt and answers
// with fail's error (nil: delivered).
type hookRecorder struct {
	fail func(ev batch.WebhookEvent) error

	mu        sync.Mutex
	attempts  []batch.WebhookEvent
	delivered map[string]int // job id → successful attempts
}

func newHookRecorder(fail func(batch.WebhookEvent) error) *hookRecorder {
	return &hookRecorder{fail: fail, delivered: map[string]int{}}
}

func (h *hookRecorder) Deliver(ctx context.Context, ev batch.WebhookEvent) error {
	var err error
	if h.fail != nil {
		err = h.fail(ev)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.attempts = append(h.attempts, ev)
	if err == nil {
		h.delivered[ev.JobID]++
	}
	return err
}

func (h *hookRecorder) all() ([]batch.WebhookEvent, map[string]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for k, v := range h.delivered {
		out[k] = v
	}
	return append([]batch.WebhookEvent(nil), h.attempts...), out
}

// waitDelivered waits until every job of ids has been delivered.
func (h *hookRecorder) waitDelivered(t *testing.T, ids ...string) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for {
		_, got := h.all()
		missing := 0
		for _, id := range ids {
			if got[id] == 0 {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d webhook events not delivered within %s: %v", missing, len(ids), waitLong, got)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// hookURL is a webhook URL for tests: never fetched, and never to be
// logged.
func hookURL(name string) string { return "https://hooks.example/" + name + "?token=hook-secret" }

func submitHook(t *testing.T, r *batch.Runner, c batch.Caller, ts []batch.Target, url string) string {
	t.Helper()
	job, reused, err := r.SubmitWith(t.Context(), c, ts, batch.SubmitOptions{WebhookURL: url})
	if err != nil || reused {
		t.Fatalf("SubmitWith = %s, %v, %v; want a new job", job.ID, reused, err)
	}
	return job.ID
}

// holdFetcher answers at once but for URLs with "/hold/" in them, which
// it reports on started and then holds until release is closed (or the
// fetch ends), and fails URLs with "/fail/".
func holdFetcher(started chan<- struct{}, release <-chan struct{}) batch.FetchFunc {
	return func(ctx context.Context, _ batch.Caller, tg batch.Target) (batch.Result, error) {
		switch {
		case strings.Contains(tg.URL, "/fail/"):
			return batch.Result{}, batchtest.ErrScripted
		case strings.Contains(tg.URL, "/hold/"):
			started <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
				return batch.Result{}, context.Cause(ctx)
			}
		}
		return batch.Result{Content: "ok"}, nil
	}
}

func metricValue(t *testing.T, r *batch.Runner, name string) uint64 {
	t.Helper()
	return r.Metrics().GetOrCreateCounter(name).Get()
}

// runnerWebhookOnce: every finished job with a webhook (done, partial,
// failed, cancelled while queued, cancelled while running) gets its event
// exactly once, with its final status and counts; a job without one gets
// none.
func runnerWebhookOnce(t *testing.T, s batchdriver.Store) {
	hooks := newHookRecorder(nil)
	started, release := make(chan struct{}, 1), make(chan struct{})
	r := batchtest.NewRunner(t, batch.Config{
		Store: s, Fetch: holdFetcher(started, release), Deliver: hooks.Deliver, Workers: 1,
		JobsPerCaller: 10, JobsTotal: 10, PollInterval: batch.Duration(10 * time.Millisecond),
	})
	running := submitHook(t, r, alice, []batch.Target{{URL: "https://example.test/hold/0"}, {URL: "https://example.test/ok/1"}}, hookURL("running"))
	queued := submitHook(t, r, alice, batchtest.Targets("queued", 2), hookURL("queued"))
	<-started // the running job's target 0 is in flight
	if err := r.Cancel(t.Context(), alice, queued); err != nil {
		t.Fatal(err)
	}
	if err := r.Cancel(t.Context(), alice, running); err != nil {
		t.Fatal(err)
	}
	close(release)
	want := map[string]struct {
		status    batch.JobStatus
		ok, fails int
		total     int
	}{running: {batch.JobCancelled, 1, 0, 2}, queued: {batch.JobCancelled, 0, 0, 2}}
	done := submitHook(t, r, alice, batchtest.Targets("done", 2), hookURL("done"))
	want[done] = struct {
		status    batch.JobStatus
		ok, fails int
		total     int
	}{batch.JobDone, 2, 0, 2}
	partial := submitHook(t, r, alice, []batch.Target{{URL: "https://example.test/fail/0"}, {URL: "https://example.test/ok/1"}}, hookURL("partial"))
	want[partial] = struct {
		status    batch.JobStatus
		ok, fails int
		total     int
	}{batch.JobPartial, 1, 1, 2}
	failed := submitHook(t, r, alice, []batch.Target{{URL: "https://example.test/fail/0"}}, hookURL("failed"))
	want[failed] = struct {
		status    batch.JobStatus
		ok, fails int
		total     int
	}{batch.JobFailed, 0, 1, 1}
	plain := mustSubmit(t, r, alice, batchtest.Targets("plain", 1))

	ids := []string{running, queued, done, partial, failed}
	hooks.waitDelivered(t, ids...)
	batchtest.WaitFinished(t, r, alice, plain, waitLong)
	time.Sleep(50 * time.Millisecond) // five polls: time for a wrong second delivery
	attempts, delivered := hooks.all()
	if len(attempts) != len(ids) {
		t.Errorf("%d attempts for %d events: %+v", len(attempts), len(ids), attempts)
	}
	for _, ev := range attempts {
		w, ok := want[ev.JobID]
		if !ok {
			t.Errorf("an event for job %s, which has no webhook", ev.JobID)
			continue
		}
		info := status(t, r, alice, ev.JobID)
		if ev.ID != "msg_"+ev.JobID || ev.Type != batch.EventJobFinished || ev.Caller != alice.Name || ev.URL != info.WebhookURL || ev.Attempt != 1 ||
			ev.Status != w.status || ev.TargetsOK != w.ok || ev.TargetsFailed != w.fails || ev.TargetsTotal != w.total ||
			ev.TargetsDone != w.ok+w.fails || !ev.CreatedAt.Equal(info.CreatedAt) || ev.FinishedAt.IsZero() ||
			ev.ExpiresAt.Before(ev.FinishedAt.Add(batch.DefaultTTL)) {
			t.Errorf("event %+v\nwant %+v for job %+v", ev, w, info)
		}
	}
	for _, id := range ids {
		if delivered[id] != 1 {
			t.Errorf("job %s delivered %d times, want once", id, delivered[id])
		}
	}
	if got := metricValue(t, r, `batch_webhooks_total{outcome="delivered"}`); got != uint64(len(ids)) {
		t.Errorf("webhooks_total{delivered} = %d, want %d", got, len(ids))
	}
}

// runnerWebhookRetried: a receiver that fails twice gets the event on the
// third attempt, with the same id each time.
func runnerWebhookRetried(t *testing.T, s batchdriver.Store) {
	var mu sync.Mutex
	calls := 0
	hooks := newHookRecorder(func(batch.WebhookEvent) error {
		mu.Lock()
		defer mu.Unlock()
		if calls++; calls <= 2 {
			return errors.New("receiver said 503")
		}
		return nil
	})
	r := batchtest.NewRunner(t, batch.Config{
		Store: s, Deliver: hooks.Deliver, WebhookBackoff: batch.Duration(time.Millisecond), PollInterval: batch.Duration(10 * time.Millisecond),
	})
	id := submitHook(t, r, alice, batchtest.Targets("retry", 1), hookURL("retry"))
	hooks.waitDelivered(t, id)
	attempts, delivered := hooks.all()
	if len(attempts) != 3 || delivered[id] != 1 {
		t.Fatalf("attempts %+v, delivered %v; want 3 attempts, one delivery", attempts, delivered)
	}
	for i, ev := range attempts {
		if ev.Attempt != i+1 || ev.ID != attempts[0].ID || ev.Status != batch.JobDone {
			t.Errorf("attempt %d = %+v", i+1, ev)
		}
	}
	closeRunner(t, r) // the counts are final
	for outcome, want := range map[string]uint64{"delivered": 1, "failed": 2, "dropped": 0} {
		if got := metricValue(t, r, fmt.Sprintf(`batch_webhooks_total{outcome=%q}`, outcome)); got != want {
			t.Errorf("webhooks_total{%s} = %d, want %d", outcome, got, want)
		}
	}
}

// tickingClock is a clock that moves a second forward at every reading:
// retry delays pass without the test waiting for them.
type tickingClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *tickingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Second)
	return c.now
}

// runnerWebhookDropped: a receiver that never takes the event is retried
// while Config.WebhookRetryFor allows, then the event is dropped and
// counted, and never attempted again.
func runnerWebhookDropped(t *testing.T, s batchdriver.Store) {
	clock := &tickingClock{now: t0}
	hooks := newHookRecorder(func(batch.WebhookEvent) error { return errors.New("receiver down") })
	r := batchtest.NewRunner(t, batch.Config{
		Store: s, Deliver: hooks.Deliver, Now: clock.Now, PollInterval: batch.Duration(10 * time.Millisecond),
		WebhookBackoff: batch.Duration(time.Second), WebhookRetryFor: batch.Duration(time.Minute),
	})
	submitHook(t, r, alice, batchtest.Targets("dropped", 1), hookURL("dropped"))
	deadline := time.Now().Add(waitLong)
	for metricValue(t, r, `batch_webhooks_total{outcome="dropped"}`) == 0 {
		if time.Now().After(deadline) {
			attempts, _ := hooks.all()
			t.Fatalf("not dropped within %s: %d attempts", waitLong, len(attempts))
		}
		time.Sleep(5 * time.Millisecond)
	}
	before, _ := hooks.all()
	time.Sleep(50 * time.Millisecond) // five polls
	closeRunner(t, r)
	after, delivered := hooks.all()
	if len(after) != len(before) {
		t.Errorf("%d attempts after the drop", len(after)-len(before))
	}
	if len(before) < 2 || len(delivered) != 0 {
		t.Errorf("%d attempts before the drop, %v delivered; want several, none", len(before), delivered)
	}
	if got := metricValue(t, r, `batch_webhooks_total{outcome="failed"}`); got != uint64(len(before)) {
		t.Errorf("webhooks_total{failed} = %d for %d failed attempts", got, len(before))
	}
	if got := metricValue(t, r, `batch_webhooks_total{outcome="dropped"}`); got != 1 {
		t.Errorf("webhooks_total{dropped} = %d, want 1", got)
	}
}

// blockedError is an error with the outcome "blocked", as a guard's
// refusal of the webhook's address is.
type blockedError struct{}

func (blockedError) Error() string          { return "blocked: loopback address" }
func (blockedError) Outcome() batch.Outcome { return batch.OutcomeBlocked }

// runnerWebhookBlocked: a delivery the guard refused ("blocked") would be
// refused again on every retry, so the event is dropped after that one
// attempt rather than held (with the caller's pending quota) for
// Config.WebhookRetryFor.
func runnerWebhookBlocked(t *testing.T, s batchdriver.Store) {
	hooks := newHookRecorder(func(batch.WebhookEvent) error {
		return fmt.Errorf("batchhttp: webhook not delivered: %w", blockedError{})
	})
	r := batchtest.NewRunner(t, batch.Config{
		Store: s, Deliver: hooks.Deliver, PollInterval: batch.Duration(10 * time.Millisecond),
		WebhookBackoff: batch.Duration(time.Millisecond),
	})
	submitHook(t, r, alice, batchtest.Targets("blocked", 1), hookURL("blocked"))
	deadline := time.Now().Add(waitLong)
	for metricValue(t, r, `batch_webhooks_total{outcome="dropped"}`) == 0 {
		if time.Now().After(deadline) {
			attempts, _ := hooks.all()
			t.Fatalf("not dropped within %s: %d attempts", waitLong, len(attempts))
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // five polls, fifty back-offs
	closeRunner(t, r)
	if attempts, _ := hooks.all(); len(attempts) != 1 {
		t.Errorf("%d attempts of a blocked delivery, want 1", len(attempts))
	}
}

// runnerWebhookRestart: a job that a dead process left running is failed
// by the next runner's start, and its event delivered.
func runnerWebhookRestart(t *testing.T, s batchdriver.Store) {
	clock := batchtest.NewClock()
	dead := clock.Now().Add(-time.Hour)
	p := hookSpec("alice", "restart", 2, dead)
	mustCreate(t, s, p)
	claimJob(t, s, "dead-process", p.ID, dead)
	hooks := newHookRecorder(nil)
	r := batchtest.NewRunner(t, batch.Config{Store: s, Deliver: hooks.Deliver, Now: clock.Now, PollInterval: batch.Duration(10 * time.Millisecond)})
	if s.Capabilities().Shared { // the dead process is reaped as stale: StaleAfter after the start
		clock.Advance(batch.DefaultStaleAfter)
		if _, err := r.Collect(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	hooks.waitDelivered(t, p.ID)
	attempts, _ := hooks.all()
	if ev := attempts[0]; ev.Status != batch.JobFailed || ev.Error != "restart" || ev.TargetsFailed != 1 || ev.URL != p.WebhookURL {
		t.Fatalf("event of the restarted job = %+v", ev)
	}
}

// runnerWebhookCloseMidDelivery: an attempt in flight when its runner
// closes is cut short, and the next runner on the store delivers it at once.
func runnerWebhookCloseMidDelivery(t *testing.T, s batchdriver.Store) {
	started := make(chan struct{}, 1)
	block := func(ctx context.Context, ev batch.WebhookEvent) error {
		started <- struct{}{}
		<-ctx.Done()
		return context.Cause(ctx)
	}
	first := startRunner(t, batch.Config{Store: s, Fetch: batchtest.StaticFetcher("ok"), Deliver: block, PollInterval: batch.Duration(10 * time.Millisecond), RunnerID: "first"})
	id := submitHook(t, first, alice, batchtest.Targets("close", 1), hookURL("close"))
	select {
	case <-started:
	case <-time.After(waitLong):
		t.Fatal("no delivery attempt")
	}
	closeRunner(t, first)
	hooks := newHookRecorder(nil)
	batchtest.NewRunner(t, batch.Config{Store: s, Deliver: hooks.Deliver, PollInterval: batch.Duration(10 * time.Millisecond), RunnerID: "second"})
	hooks.waitDelivered(t, id)
	if attempts, _ := hooks.all(); attempts[0].Attempt != 2 {
		t.Errorf("the second runner's attempt is number %d, want 2", attempts[0].Attempt)
	}
}

// runnerWebhookSubmit: a webhook needs Config.Deliver and an http(s) URL;
// it is part of the idempotency key; its owner sees it, nobody else.
func runnerWebhookSubmit(t *testing.T, s batchdriver.Store) {
	f := batchtest.NewBlockingFetcher()
	t.Cleanup(func() {
		for range 8 {
			f.Release()
		}
	})
	plain := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: f.Fetch})
	_, _, err := plain.SubmitWith(t.Context(), alice, batchtest.Targets("w", 1), batch.SubmitOptions{WebhookURL: hookURL("w")})
	wantErr(t, "a webhook without Deliver", err, batch.ErrWebhooksDisabled)
	closeRunner(t, plain)

	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: f.Fetch, Deliver: newHookRecorder(nil).Deliver, JobsPerCaller: 5, JobsTotal: 5})
	for _, bad := range []string{"hooks.example/x", "ftp://hooks.example/", "https://", "/relative", "https://a\x7f.example/",
		"https://hooks.example/\xff", "https://hooks.example/" + strings.Repeat("x", batch.MaxWebhookURLBytes)} {
		_, _, err := r.SubmitWith(t.Context(), alice, batchtest.Targets("w", 1), batch.SubmitOptions{WebhookURL: bad})
		wantErr(t, fmt.Sprintf("webhook %q", bad), err, batch.ErrInvalidWebhook)
		if strings.Contains(err.Error(), "hooks.example") {
			t.Errorf("the error repeats the URL: %v", err)
		}
	}
	ts := batchtest.Targets("idem", 2)
	id := submitHook(t, r, alice, ts, hookURL("one"))
	again, reused, err := r.SubmitWith(t.Context(), alice, ts, batch.SubmitOptions{WebhookURL: hookURL("one")})
	if err != nil || !reused || again.ID != id {
		t.Fatalf("resubmit with the same webhook = %s, %v, %v; want %s reused", again.ID, reused, err, id)
	}
	other := submitHook(t, r, alice, ts, hookURL("two"))
	none := mustSubmit(t, r, alice, ts)
	if other == id || none == id || other == none {
		t.Fatalf("jobs %s, %s, %s: a different webhook (or none) must make a new job", id, other, none)
	}
	if info := status(t, r, alice, id); info.WebhookURL != hookURL("one") {
		t.Errorf("owner sees webhook %q", info.WebhookURL)
	}
	if info := status(t, r, alice, none); info.WebhookURL != "" {
		t.Errorf("a job without a webhook shows %q", info.WebhookURL)
	}
	_, err = r.Status(t.Context(), bob, id, batch.StatusOptions{JobOnly: true})
	wantErr(t, "another caller's status", err, batch.ErrNotFound)
}
