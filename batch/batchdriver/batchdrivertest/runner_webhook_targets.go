package batchdrivertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// runnerWebhookTargetCases: per-target events through the runner: in idx
// order, coalesced while the receiver holds one, the completion last, and
// counted once against the pending cap.
var runnerWebhookTargetCases = map[string]func(*testing.T, batchdriver.Store){
	"TargetEventsDelivered":     runnerTargetEventsDelivered,
	"TargetEventsPendingCap":    runnerTargetEventsPendingCap,
	"TargetEventsSubmitOptions": runnerTargetEventsOptions,
}

// bothEventNames asks for per-target events and the completion.
var bothEventNames = []string{batch.EventTargetFinished, batch.EventJobFinished}

// customTargets are n targets with custom ids "<prefix>-<i>".
func customTargets(prefix string, n int) []batch.Target {
	ts := batchtest.Targets(prefix, n)
	for i := range ts {
		ts[i].CustomID = fmt.Sprintf("%s-%d", prefix, i)
	}
	return ts
}

// runnerTargetEventsDelivered: a job of 10 targets whose receiver holds
// the event of target 0 until the job has finished gets three events:
// target 0, then targets 1 to 9 together, then the completion. An attempt
// that fails is retried with the same id and the same targets.
func runnerTargetEventsDelivered(t *testing.T, s batchdriver.Store) {
	ts := customTargets("t", 10)
	first, hold := make(chan struct{}), make(chan struct{})
	var firstOnce, holdOnce sync.Once
	var failed atomic.Bool
	hooks := newHookRecorder(func(ev batch.WebhookEvent) error {
		switch {
		case ev.Type == batch.EventTargetFinished && ev.Targets[0].Idx == 0:
			firstOnce.Do(func() { close(first) })
			<-hold // the rest of the job finishes meanwhile
		case ev.Type == batch.EventTargetFinished && failed.CompareAndSwap(false, true):
			return errors.New("receiver said 503")
		}
		return nil
	})
	// Target 1 waits for the event of target 0, so that it goes alone.
	fetch := func(ctx context.Context, c batch.Caller, tg batch.Target) (batch.Result, error) {
		if tg.URL == ts[1].URL {
			select {
			case <-first:
			case <-ctx.Done():
				return batch.Result{}, context.Cause(ctx)
			}
		}
		return batch.Result{Content: "ok"}, nil
	}
	r := batchtest.NewRunner(t, batch.Config{
		Store: s, Fetch: fetch, Deliver: hooks.Deliver, WebhookBackoff: batch.Duration(time.Millisecond),
		PollInterval: batch.Duration(10 * time.Millisecond),
	})
	t.Cleanup(func() { holdOnce.Do(func() { close(hold) }) }) // before the runner's close
	job, _, err := r.SubmitWith(t.Context(), alice, ts,
		batch.SubmitOptions{WebhookURL: hookURL("targets"), WebhookEvents: bothEventNames})
	if err != nil {
		t.Fatal(err)
	}
	batchtest.WaitFinished(t, r, alice, job.ID, waitLong)
	holdOnce.Do(func() { close(hold) })
	hooks.waitCompletion(t, job.ID)

	attempts, _ := hooks.all()
	var delivered []batch.WebhookEvent
	seen := map[string]batch.WebhookEvent{} // id → its first attempt
	for _, ev := range attempts {
		if first, ok := seen[ev.ID]; ok {
			if !slices.Equal(ev.Targets, first.Targets) || ev.Attempt <= first.Attempt || !ev.At.Equal(first.At) {
				t.Errorf("a retry of %s: %+v, its first attempt %+v", ev.ID, ev, first)
			}
		} else {
			seen[ev.ID] = ev
		}
		if ev.Attempt == 1 && ev.Type == batch.EventTargetFinished && ev.Targets[0].Idx != 0 {
			continue // the failed attempt
		}
		delivered = append(delivered, ev)
	}
	if len(delivered) != 3 {
		t.Fatalf("delivered %d events, want 3: %+v", len(delivered), delivered)
	}
	var idxs []int
	for i, ev := range delivered[:2] {
		if ev.Type != batch.EventTargetFinished || ev.JobID != job.ID || ev.Caller != alice.Name || ev.URL != hookURL("targets") ||
			ev.TargetsTotal != 10 || ev.At.IsZero() || ev.ID != fmt.Sprintf("msg_%s_t%d", job.ID, ev.Targets[0].Idx) {
			t.Errorf("event %d: %+v", i, ev)
		}
		for _, wt := range ev.Targets {
			idxs = append(idxs, wt.Idx)
			if wt.CustomID != fmt.Sprintf("t-%d", wt.Idx) || wt.Status != batch.TargetDone || wt.Outcome != batch.OutcomeOK {
				t.Errorf("event %d: target %+v", i, wt)
			}
		}
	}
	if want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(idxs, want) || len(delivered[0].Targets) != 1 {
		t.Errorf("targets delivered %v (the first event %d), want %v, the first alone", idxs, len(delivered[0].Targets), want)
	}
	if done := delivered[2]; done.Type != batch.EventJobFinished || done.ID != "msg_"+job.ID || done.Status != batch.JobDone ||
		done.TargetsOK != 10 || len(done.Targets) != 0 {
		t.Errorf("the completion: %+v", done)
	}
}

// waitCompletion waits until the completion event of job id is delivered.
func (h *hookRecorder) waitCompletion(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for {
		attempts, _ := h.all()
		if slices.ContainsFunc(attempts, func(ev batch.WebhookEvent) bool {
			return ev.JobID == id && ev.Type == batch.EventJobFinished
		}) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the completion of %s not delivered within %s: %d attempts", id, waitLong, len(attempts))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runnerTargetEventsPendingCap: under a receiver that hangs, jobs with
// per-target events fill their caller's pending cap, one each, and a
// submit with a webhook is refused; another caller's events, per-target
// and completion, are delivered meanwhile.
func runnerTargetEventsPendingCap(t *testing.T, s batchdriver.Store) {
	hooks := newHangingReceiver(alice.Name)
	r := batchtest.NewRunner(t, batch.Config{
		Store: s, Deliver: hooks.Deliver, JobsPerCaller: 20, JobsTotal: 40,
		WebhookPendingPerCaller: 2, WebhookTimeout: batch.Duration(time.Hour),
		PollInterval: batch.Duration(10 * time.Millisecond),
	})
	opts := batch.SubmitOptions{WebhookURL: hookURL("cap"), WebhookEvents: bothEventNames}
	for i := range 2 {
		job, _, err := r.SubmitWith(t.Context(), alice, batchtest.Targets(fmt.Sprint("cap", i), 3), opts)
		if err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
		batchtest.WaitFinished(t, r, alice, job.ID, waitLong)
	}
	hooks.waitHanging(t, 2)
	_, _, err := r.SubmitWith(t.Context(), alice, batchtest.Targets("over", 1), opts)
	wantErr(t, "a third webhook at a pending cap of 2", err, batch.ErrWebhooksBusy)
	_, _, err = r.SubmitWith(t.Context(), alice, batchtest.Targets("over", 1), batch.SubmitOptions{WebhookURL: hookURL("cap")})
	wantErr(t, "a completion webhook at the cap", err, batch.ErrWebhooksBusy)
	mustSubmit(t, r, alice, batchtest.Targets("plain", 1))

	job, _, err := r.SubmitWith(t.Context(), bob, customTargets("bob", 2), batch.SubmitOptions{WebhookURL: hookURL("bob"), WebhookEvents: bothEventNames})
	if err != nil {
		t.Fatal(err)
	}
	var idxs []int
	for done := false; !done; {
		select {
		case ev := <-hooks.delivered:
			if ev.JobID != job.ID {
				t.Fatalf("delivered %+v, want bob's events of %s", ev, job.ID)
			}
			for _, wt := range ev.Targets {
				idxs = append(idxs, wt.Idx)
			}
			done = ev.Type == batch.EventJobFinished
		case <-time.After(waitLong):
			t.Fatalf("bob's events not all delivered within %s (targets %v)", waitLong, idxs)
		}
	}
	if !slices.Equal(idxs, []int{0, 1}) {
		t.Errorf("bob's targets delivered %v, want [0 1] before his completion", idxs)
	}
}

// runnerTargetEventsOptions: the events are checked, stored and shown to
// the owner, part of the idempotency key, and kept by a retry.
func runnerTargetEventsOptions(t *testing.T, s batchdriver.Store) {
	ts := batchtest.Targets("opts", 2)
	r := batchtest.NewRunner(t, batch.Config{
		Store: s, Deliver: func(context.Context, batch.WebhookEvent) error { return nil },
		Fetch:         batchtest.ScriptFetcher(map[string]batchtest.Step{ts[1].URL: {Err: batchtest.ErrScripted}}),
		JobsPerCaller: 20, JobsTotal: 40,
	})
	for _, tc := range []struct {
		what string
		opts batch.SubmitOptions
	}{
		{"an unknown event", batch.SubmitOptions{WebhookURL: hookURL("x"), WebhookEvents: []string{"batch.started"}}},
		{"events without a url", batch.SubmitOptions{WebhookEvents: bothEventNames}},
	} {
		_, _, err := r.SubmitWith(t.Context(), alice, ts, tc.opts)
		wantErr(t, tc.what, err, batch.ErrInvalidWebhook)
	}
	opts := batch.SubmitOptions{WebhookURL: hookURL("x"), WebhookEvents: []string{batch.EventJobFinished, batch.EventTargetFinished}}
	job, _, err := r.SubmitWith(t.Context(), alice, ts, opts)
	if err != nil {
		t.Fatal(err)
	}
	if info := status(t, r, alice, job.ID); !slices.Equal(info.WebhookEvents, bothEventNames) {
		t.Errorf("events shown %v, want %v", info.WebhookEvents, bothEventNames)
	}
	same, reused, err := r.SubmitWith(t.Context(), alice, ts, batch.SubmitOptions{WebhookURL: hookURL("x"), WebhookEvents: bothEventNames})
	if err != nil || !reused || same.ID != job.ID {
		t.Errorf("the same events in another order: %s, reused %v, %v; want %s reused", same.ID, reused, err, job.ID)
	}
	plain, reused, err := r.SubmitWith(t.Context(), alice, ts, batch.SubmitOptions{WebhookURL: hookURL("x")})
	if err != nil || reused || plain.WebhookEvents != nil {
		t.Errorf("the default events: %+v, reused %v, %v; want a new job without events shown", plain, reused, err)
	}
	explicit, reused, err := r.SubmitWith(t.Context(), alice, ts, batch.SubmitOptions{WebhookURL: hookURL("x"), WebhookEvents: []string{batch.EventJobFinished}})
	if err != nil || !reused || explicit.ID != plain.ID {
		t.Errorf("the default events named: %s, reused %v, %v; want %s reused", explicit.ID, reused, err, plain.ID)
	}
	batchtest.WaitFinished(t, r, alice, job.ID, waitLong)
	retry, _, err := r.Retry(t.Context(), alice, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info := status(t, r, alice, retry.ID); !slices.Equal(info.WebhookEvents, bothEventNames) || info.WebhookURL != hookURL("x") {
		t.Errorf("the retry's webhook %q, events %v; want the job's", info.WebhookURL, info.WebhookEvents)
	}
}
