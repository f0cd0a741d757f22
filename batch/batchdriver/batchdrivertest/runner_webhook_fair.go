package batchdrivertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// runnerWebhookFairCases are the runner cases of fairness between
// callers' webhooks: a slow receiver holds only its caller's slots, and
// the pending cap refuses a submit.
var runnerWebhookFairCases = map[string]func(*testing.T, batchdriver.Store){
	"WebhookPendingCap":   runnerWebhookPendingCap,
	"WebhookSlowReceiver": runnerWebhookSlowReceiver,
}

// hangingReceiver is a Config.Deliver whose deliveries for one caller hang
// until release is closed (or the attempt's context ends), while every
// other caller's are taken at once. It counts the hanging deliveries.
type hangingReceiver struct {
	caller  string
	release chan struct{}

	mu        sync.Mutex
	hanging   int // now
	maxHang   int // the most at once
	delivered chan batch.WebhookEvent
}

func newHangingReceiver(caller string) *hangingReceiver {
	return &hangingReceiver{caller: caller, release: make(chan struct{}), delivered: make(chan batch.WebhookEvent, 100)}
}

func (h *hangingReceiver) Deliver(ctx context.Context, ev batch.WebhookEvent) error {
	if ev.Caller != h.caller {
		h.delivered <- ev
		return nil
	}
	h.mu.Lock()
	h.hanging++
	h.maxHang = max(h.maxHang, h.hanging)
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.hanging--
		h.mu.Unlock()
	}()
	select {
	case <-h.release:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (h *hangingReceiver) counts() (now, most int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hanging, h.maxHang
}

// waitHanging waits until at least n deliveries hang.
func (h *hangingReceiver) waitHanging(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for {
		if now, _ := h.counts(); now >= n {
			return
		}
		if time.Now().After(deadline) {
			now, _ := h.counts()
			t.Fatalf("%d deliveries hanging after %s, want %d", now, waitLong, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runnerWebhookSlowReceiver: a caller whose receiver never answers holds
// at most Config.WebhookInFlightPerCaller slots; another caller's event is
// delivered meanwhile, without waiting for the hanging ones.
func runnerWebhookSlowReceiver(t *testing.T, s batchdriver.Store) {
	hooks := newHangingReceiver(alice.Name)
	r := batchtest.NewRunner(t, batch.Config{
		Store: s, Deliver: hooks.Deliver, JobsPerCaller: 20, JobsTotal: 40,
		WebhookWorkers: 4, WebhookInFlightPerCaller: 2, WebhookTimeout: batch.Duration(time.Hour),
		PollInterval: batch.Duration(10 * time.Millisecond),
	})
	var aliceJobs []string
	for i := range 10 {
		aliceJobs = append(aliceJobs, submitHook(t, r, alice, batchtest.Targets(fmt.Sprint("hang", i), 1), hookURL("hang")))
	}
	for _, id := range aliceJobs {
		batchtest.WaitFinished(t, r, alice, id, waitLong)
	}
	hooks.waitHanging(t, 1)
	bobJob := submitHook(t, r, bob, batchtest.Targets("bob", 1), hookURL("bob"))
	select {
	case ev := <-hooks.delivered:
		if ev.JobID != bobJob || ev.Caller != bob.Name {
			t.Fatalf("delivered %+v, want bob's event of %s", ev, bobJob)
		}
	case <-time.After(waitLong):
		now, _ := hooks.counts()
		t.Fatalf("bob's event not delivered within %s while %d of alice's deliveries hang", waitLong, now)
	}
	if _, most := hooks.counts(); most > 2 {
		t.Errorf("alice had %d deliveries in flight at once, over Config.WebhookInFlightPerCaller (2)", most)
	}
}

// runnerWebhookPendingCap: a submit with a webhook beyond the caller's
// pending cap is refused with ErrWebhooksBusy; one without a webhook, or
// another caller's, is not.
func runnerWebhookPendingCap(t *testing.T, s batchdriver.Store) {
	hooks := newHangingReceiver(alice.Name)
	r := batchtest.NewRunner(t, batch.Config{
		Store: s, Deliver: hooks.Deliver, JobsPerCaller: 20, JobsTotal: 40,
		WebhookPendingPerCaller: 3, WebhookTimeout: batch.Duration(time.Hour),
		PollInterval: batch.Duration(10 * time.Millisecond),
	})
	for i := range 3 {
		submitHook(t, r, alice, batchtest.Targets(fmt.Sprint("cap", i), 1), hookURL("cap"))
	}
	_, _, err := r.SubmitWith(t.Context(), alice, batchtest.Targets("over", 1), batch.SubmitOptions{WebhookURL: hookURL("cap")})
	wantErr(t, "a fourth webhook at a pending cap of 3", err, batch.ErrWebhooksBusy)
	mustSubmit(t, r, alice, batchtest.Targets("plain", 1))
	submitHook(t, r, bob, batchtest.Targets("bob", 1), hookURL("bob"))
}
