package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
)

// hookSink is a webhook receiver on loopback. With hang, it never answers
// a delivery until the test ends; otherwise it answers 204 at once and
// keeps each delivery with its arrival time.
type hookSink struct {
	srv  *http.Server
	addr string
	hang bool
	end  chan struct{} // closed when the test ends

	mu       sync.Mutex
	open     int // deliveries hanging now
	most     int // the most hanging at once
	arrivals []hookArrival
	arrived  chan struct{}
}

type hookArrival struct {
	at     time.Time
	header http.Header
	body   []byte
}

func newHookSink(t *testing.T, hang bool) *hookSink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hookSink{addr: ln.Addr().String(), hang: hang, end: make(chan struct{}), arrived: make(chan struct{}, 1000)}
	h.srv = &http.Server{Handler: http.HandlerFunc(h.serve), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); h.srv.Serve(ln) }()
	t.Cleanup(func() {
		close(h.end)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h.srv.Shutdown(ctx)
		<-done
	})
	return h
}

func (h *hookSink) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	h.arrivals = append(h.arrivals, hookArrival{time.Now(), r.Header.Clone(), body})
	if h.hang {
		h.open++
		h.most = max(h.most, h.open)
	}
	h.mu.Unlock()
	h.arrived <- struct{}{}
	if !h.hang {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	select {
	case <-h.end:
	case <-r.Context().Done():
	}
	h.mu.Lock()
	h.open--
	h.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (h *hookSink) state() (open, most int, arrivals []hookArrival) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.open, h.most, append([]hookArrival(nil), h.arrivals...)
}

// submitWithHook posts urls as one job with a webhook. With events (none:
// the default) each target has custom id "c<idx>".
func (c *client) submitWithHook(ctx context.Context, urls []string, hook string, events ...string) (batchhttp.SubmitResponse, answer, error) {
	req := batchhttp.SubmitRequest{Targets: make([]batch.Target, len(urls)), Webhook: &batchhttp.Webhook{URL: hook, Events: events}}
	for i, u := range urls {
		req.Targets[i] = batch.Target{URL: u}
		if events != nil {
			req.Targets[i].CustomID = fmt.Sprintf("c%d", i)
		}
	}
	body, _ := json.Marshal(req)
	a, err := c.do(ctx, http.MethodPost, "/v1/batch", body)
	var sr batchhttp.SubmitResponse
	if err == nil && a.code == http.StatusAccepted {
		err = json.Unmarshal(a.body, &sr)
	}
	return sr, a, err
}

// webhookMaster is the master webhook secret of the webhook case.
const webhookMaster = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// a caller's webhook arrives within 5s of its
// job's end while another caller has 10 deliveries hanging at a receiver
// that never answers, and it verifies with its caller's secret only. Two
// daemons: with the defaults (8 slots, at most 2 in flight per caller, so
// the attacker's other 8 events wait their turn), and with room for all
// 10 of the attacker's in flight at once (16 slots, 10 per caller), which
// shows that a hanging delivery holds its own slot and no batch.
func TestWebhookFairness(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name               string
		workers, perCaller int
		wantHanging        int
	}{
		{"Defaults", 0, 0, batch.DefaultWebhookInFlightPerCaller},
		{"TenInFlight", 16, 10, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			webhookFairness(t, tc.workers, tc.perCaller, tc.wantHanging)
		})
	}
	t.Run("TargetEvents", func(t *testing.T) {
		t.Parallel()
		webhookTargetEvents(t)
	})
}

// webhookTargetEvents: the attacker's jobs with per-target events, whose
// receiver hangs, fill its pending cap (one each) and a submit of it with
// a webhook of either kind is refused, one without a webhook is not; the
// victim's job of 10 targets with events ["batch.target.finished",
// "batch.finished"] meanwhile gets its targets' events in idx order, then
// one completion, each verified with its caller's secret.
func webhookTargetEvents(t *testing.T) {
	up := newUpstream(t, time.Millisecond)
	hang, sink := newHookSink(t, true), newHookSink(t, false)
	cfg := childConfig{
		DB: t.TempDir() + "/hooks.db", Allow: []string{up.addr(), hang.addr, sink.addr},
		Callers: []string{"victim", "attacker"}, WebhookSecret: webhookMaster,
		Batch: batch.Config{
			JobsPerCaller: 4, JobsTotal: 8, WebhookPendingPerCaller: 3,
			WebhookTimeout: batch.Duration(10 * time.Minute), // the hanging deliveries hang until the test ends
		},
	}
	d := startDaemon(t, cfg, nil)
	ctx := t.Context()
	counts := newCounts()
	attacker, victim := newClient(d.addr, "attacker", counts), newClient(d.addr, "victim", counts)
	defer attacker.close()
	defer victim.close()
	events := []string{batch.EventTargetFinished, batch.EventJobFinished}
	finish := func(c *client, id string) {
		t.Helper()
		for {
			st, a, err := c.status(ctx, id, "?wait=30s")
			if err != nil || a.code != http.StatusOK {
				t.Fatalf("status: %v %d %s", err, a.code, a.errorText())
			}
			if st.Status.Finished() {
				return
			}
		}
	}
	pages := func(prefix string, n int) []string {
		urls := make([]string, n)
		for i := range urls {
			urls[i] = up.url(fmt.Sprintf("%s-%d", prefix, i))
		}
		return urls
	}
	for i := range 3 {
		sr, a, err := attacker.submitWithHook(ctx, pages(fmt.Sprintf("f-hang-%d", i), 4), "http://"+hang.addr+"/hook", events...)
		if err != nil || a.code != http.StatusAccepted {
			t.Fatalf("attacker's submit %d: %v %d %s", i, err, a.code, a.errorText())
		}
		finish(attacker, sr.JobID)
	}
	deadline := time.Now().Add(30 * time.Second)
	for open, _, _ := hang.state(); open < batch.DefaultWebhookInFlightPerCaller; open, _, _ = hang.state() {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the attacker's deliveries hang after 30s, want %d", open, batch.DefaultWebhookInFlightPerCaller)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, ev := range [][]string{events, nil} {
		_, a, err := attacker.submitWithHook(ctx, pages("f-over", 1), "http://"+hang.addr+"/hook", ev...)
		if err != nil || a.code != http.StatusTooManyRequests || a.retryAfter == "" {
			t.Errorf("the attacker's submit with events %v at its pending cap: %v %d %s, want 429 with Retry-After", ev, err, a.code, a.errorText())
		}
	}
	if sr, a, err := attacker.submit(ctx, pages("f-plain", 1)); err != nil || a.code != http.StatusAccepted {
		t.Errorf("the attacker's submit without a webhook: %v %d %s", err, a.code, a.errorText())
	} else {
		finish(attacker, sr.JobID)
	}

	sr, a, err := victim.submitWithHook(ctx, pages("f-victim", 10), "http://"+sink.addr+"/hook", events...)
	if err != nil || a.code != http.StatusAccepted {
		t.Fatalf("victim's submit: %v %d %s", err, a.code, a.errorText())
	}
	var got []hookArrival
	wait := time.After(30 * time.Second)
	for done := false; !done; {
		select {
		case <-sink.arrived:
		case <-wait:
			open, _, _ := hang.state()
			t.Fatalf("the victim's completion did not arrive within 30s (%d deliveries), while %d of the attacker's hang", len(got), open)
		}
		_, _, got = sink.state()
		done = len(got) > 0 && bytes.Contains(got[len(got)-1].body, []byte(`"type":"batch.finished"`))
	}
	victimSecret, _ := batchhttp.CallerWebhookSecret(webhookMaster, "victim")
	var idxs []int
	for i, arr := range got {
		if err := batchhttp.VerifyWebhook(victimSecret, arr.header, arr.body, time.Now()); err != nil {
			t.Errorf("the victim's delivery %d does not verify with its secret: %v", i, err)
		}
		if i == len(got)-1 {
			var p batchhttp.WebhookPayload
			if err := json.Unmarshal(arr.body, &p); err != nil || p.Data.JobID != sr.JobID || p.Data.TargetsOK != 10 {
				t.Errorf("the victim's completion: %s (%v)", arr.body, err)
			}
			continue
		}
		var p batchhttp.WebhookTargetPayload
		if err := json.Unmarshal(arr.body, &p); err != nil || p.Type != batch.EventTargetFinished || p.Data.JobID != sr.JobID {
			t.Fatalf("the victim's delivery %d: %s (%v)", i, arr.body, err)
		}
		for _, tg := range p.Data.Targets {
			idxs = append(idxs, tg.Idx)
			if tg.CustomID != fmt.Sprintf("c%d", tg.Idx) || tg.Outcome != batch.OutcomeOK {
				t.Errorf("the victim's delivery %d: target %+v", i, tg)
			}
		}
	}
	if want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(idxs, want) {
		t.Errorf("the victim's targets delivered %v, want %v before its completion", idxs, want)
	}
	open, most, _ := hang.state()
	if most > batch.DefaultWebhookInFlightPerCaller {
		t.Errorf("%d of the attacker's deliveries hung at once, over its cap of %d", most, batch.DefaultWebhookInFlightPerCaller)
	}
	counts.check(t)
	t.Logf("attacker: 3 jobs with per-target events, %d deliveries hanging; victim: %d deliveries for 10 targets", open, len(got))
	if err := d.stop(); err != nil {
		t.Errorf("graceful stop: %v", err)
	}
}

func webhookFairness(t *testing.T, workers, perCaller, wantHanging int) {
	up := newUpstream(t, time.Millisecond)
	hang, sink := newHookSink(t, true), newHookSink(t, false)
	cfg := childConfig{
		DB: t.TempDir() + "/hooks.db", Allow: []string{up.addr(), hang.addr, sink.addr},
		Callers: []string{"victim", "attacker"}, WebhookSecret: webhookMaster,
		Batch: batch.Config{
			JobsPerCaller: 4, JobsTotal: 8, WebhookWorkers: workers, WebhookInFlightPerCaller: perCaller,
			WebhookTimeout: batch.Duration(10 * time.Minute), // the hanging deliveries hang until the test ends
		},
	}
	d := startDaemon(t, cfg, nil)
	ctx := t.Context()
	counts := newCounts()
	attacker, victim := newClient(d.addr, "attacker", counts), newClient(d.addr, "victim", counts)
	defer attacker.close()
	defer victim.close()
	finish := func(c *client, id string) batchhttp.StatusResponse {
		t.Helper()
		for {
			st, a, err := c.status(ctx, id, "?wait=30s")
			if err != nil || a.code != http.StatusOK {
				t.Fatalf("status: %v %d %s", err, a.code, a.errorText())
			}
			if st.Status.Finished() {
				return st
			}
		}
	}
	// The attacker's 10 jobs end at once (instant pages); their events go
	// to the receiver that never answers.
	for i := range 10 {
		sr, a, err := attacker.submitWithHook(ctx, []string{up.url(fmt.Sprintf("f-hang-%d", i))}, "http://"+hang.addr+"/hook")
		if err != nil || a.code != http.StatusAccepted {
			t.Fatalf("attacker's submit %d: %v %d %s", i, err, a.code, a.errorText())
		}
		finish(attacker, sr.JobID)
	}
	deadline := time.Now().Add(30 * time.Second)
	for open, _, _ := hang.state(); open < wantHanging; open, _, _ = hang.state() {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the attacker's deliveries hang after 30s, want %d", open, wantHanging)
		}
		time.Sleep(10 * time.Millisecond)
	}

	const rounds = 5
	var delays []time.Duration
	for i := range rounds {
		before := len(func() []hookArrival { _, _, a := sink.state(); return a }())
		submitted := time.Now()
		sr, a, err := victim.submitWithHook(ctx, []string{up.url(fmt.Sprintf("f-victim-%d", i))}, "http://"+sink.addr+"/hook")
		if err != nil || a.code != http.StatusAccepted {
			t.Fatalf("victim's submit: %v %d %s", err, a.code, a.errorText())
		}
		finish(victim, sr.JobID)
		var got hookArrival
		wait := time.After(30 * time.Second)
		for got.at.IsZero() {
			select {
			case <-sink.arrived:
			case <-wait:
				open, _, _ := hang.state()
				t.Fatalf("the victim's webhook did not arrive within 30s of its job's end, while %d of the attacker's hang", open)
			}
			if _, _, arr := sink.state(); len(arr) > before {
				got = arr[before]
			}
		}
		var p batchhttp.WebhookPayload
		if err := json.Unmarshal(got.body, &p); err != nil || p.Data.JobID != sr.JobID {
			t.Fatalf("the victim's receiver got %s (%v), want the event of %s", got.body, err, sr.JobID)
		}
		// From the submit: an upper bound of the time from the job's end
		// (which the payload gives in whole seconds only) to the arrival.
		delay := got.at.Sub(submitted)
		delays = append(delays, delay)
		if delay > 5*time.Second {
			t.Errorf("round %d: the victim's webhook arrived %s after its job's end, over 5s", i, delay.Round(time.Millisecond))
		}
		victimSecret, _ := batchhttp.CallerWebhookSecret(webhookMaster, "victim")
		attackerSecret, _ := batchhttp.CallerWebhookSecret(webhookMaster, "attacker")
		if err := batchhttp.VerifyWebhook(victimSecret, got.header, got.body, time.Now()); err != nil {
			t.Errorf("the victim's delivery does not verify with its secret: %v", err)
		}
		if err := batchhttp.VerifyWebhook(attackerSecret, got.header, got.body, time.Now()); err == nil {
			t.Errorf("the victim's delivery verifies with the attacker's secret")
		}
	}
	open, most, hangArrivals := hang.state()
	if most > wantHanging {
		t.Errorf("%d of the attacker's deliveries hung at once, over its cap of %d", most, wantHanging)
	}
	counts.check(t)
	var worst, sum time.Duration
	for _, d := range delays {
		worst, sum = max(worst, d), sum+d
	}
	t.Logf("attacker: 10 events, %d deliveries hanging (at most %d at once, %d attempts in all); victim: %d webhooks, mean %s, max %s from its submit to arrival",
		open, most, len(hangArrivals), len(delays), (sum / time.Duration(len(delays))).Round(time.Millisecond), worst.Round(time.Millisecond))
	if err := d.stop(); err != nil {
		t.Errorf("graceful stop: %v", err)
	}
}
