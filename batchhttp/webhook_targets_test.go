package batchhttp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// targetEventIDPattern is the webhook-id openapi.json documents for a
// batch.target.finished event: "msg_", the job id, "_t" and an idx.
var targetEventIDPattern = regexp.MustCompile(`^msg_[0-9a-f-]+_t[0-9]+$`)

// bothEvents asks for per-target events and the completion.
var bothEvents = []string{batch.EventTargetFinished, batch.EventJobFinished}

// submitEventsBody is a submit of targets with custom ids ("c<idx>") and a
// webhook with events.
func submitEventsBody(t *testing.T, targets []batch.Target, url string, events ...string) string {
	t.Helper()
	for i := range targets {
		targets[i].CustomID = fmt.Sprintf("c%d", i)
	}
	b, err := json.Marshal(SubmitRequest{Targets: targets, Webhook: &Webhook{URL: url, Events: events}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitCompletion waits for the delivery of a batch.finished event and
// returns every delivery so far.
func (rc *receiver) waitCompletion(t *testing.T) []delivery {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		got := rc.deliveries()
		if slices.ContainsFunc(got, func(d delivery) bool { return bytes.Contains(d.body, []byte(`"type":"batch.finished"`)) }) {
			return got
		}
		select {
		case <-rc.arrived:
		case <-deadline:
			t.Fatalf("no batch.finished delivery within 10s (%d deliveries)", len(got))
		}
	}
}

// A job of 10 targets with events ["batch.target.finished",
// "batch.finished"] gets its targets' events, each signed and verified,
// the targets in idx order with their custom ids, and then one
// completion; no event carries a URL or a result. Its status shows the
// events to its owner.
func TestWebhookSender_TargetEvents(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, http.StatusServiceUnavailable) // the first attempt is retried
	b := hookBundle(t, nil, nil)
	targets := make([]batch.Target, 10)
	for i := range targets {
		targets[i].URL = fmt.Sprintf("https://example.test/secret-target-%d", i)
	}
	rec := b.do(t, http.MethodPost, "/v1/batch", keyAlice, submitEventsBody(t, targets, rc.srv.URL+"/in", bothEvents...))
	if rec.Code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", rec.Code, rec.Body)
	}
	var sub SubmitResponse
	decodeJSON(t, rec.Body.Bytes(), &sub)
	got := rc.waitCompletion(t)

	var idxs []int
	ids := map[string][]byte{} // webhook-id → body
	for i, d := range got {
		checkWebhookDelivery(t, d)
		if err := VerifyWebhook(aliceSecret, d.header, d.body, time.Now()); err != nil {
			t.Errorf("delivery %d does not verify: %v", i, err)
		}
		if bytes.Contains(d.body, []byte("example.test")) || bytes.Contains(d.body, []byte(`"content"`)) {
			t.Errorf("delivery %d carries a target URL or result: %s", i, d.body)
		}
		id := d.header.Get(HeaderWebhookID)
		if body, seen := ids[id]; seen {
			if !bytes.Equal(body, d.body) {
				t.Errorf("a redelivery of %s differs: %s, then %s", id, body, d.body)
			}
			continue // the retry of the first attempt
		}
		ids[id] = d.body
		if i == len(got)-1 {
			var p WebhookPayload
			decodeStrict(t, d.body, &p)
			if p.Type != batch.EventJobFinished || id != "msg_"+sub.JobID || p.Data.TargetsOK != 10 || p.Data.Status != batch.JobDone {
				t.Errorf("the last delivery: %s %s, want the completion", id, d.body)
			}
			continue
		}
		var p WebhookTargetPayload
		decodeStrict(t, d.body, &p)
		if p.Type != batch.EventTargetFinished || p.Data.JobID != sub.JobID || p.Data.TargetsTotal != 10 || len(p.Data.Targets) == 0 ||
			id != fmt.Sprintf("msg_%s_t%d", sub.JobID, p.Data.Targets[0].Idx) || !targetEventIDPattern.MatchString(id) || p.Timestamp.IsZero() {
			t.Errorf("delivery %d: %s %s", i, id, d.body)
			continue
		}
		for _, tg := range p.Data.Targets {
			idxs = append(idxs, tg.Idx)
			if tg.CustomID != fmt.Sprintf("c%d", tg.Idx) || tg.Status != batch.TargetDone || tg.Outcome != batch.OutcomeOK {
				t.Errorf("delivery %d: target %+v", i, tg)
			}
		}
	}
	if want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(idxs, want) {
		t.Errorf("targets delivered %v, want %v, each once, before the completion", idxs, want)
	}

	rec = b.do(t, http.MethodGet, "/v1/batch/"+sub.JobID, keyAlice, "")
	var st StatusResponse
	decodeJSON(t, rec.Body.Bytes(), &st)
	if st.Webhook == nil || !slices.Equal(st.Webhook.Events, bothEvents) {
		t.Errorf("the owner's status shows webhook %+v, want the events %v", st.Webhook, bothEvents)
	}
}

// An unknown event type is a 400, and no job is made.
func TestHandler_SubmitWebhookEvents(t *testing.T) {
	t.Parallel()
	b := hookBundle(t, nil, nil)
	rec := b.do(t, http.MethodPost, "/v1/batch", keyAlice, submitEventsBody(t, batchtest.Targets("e", 1), "https://hooks.example/in", "batch.started"))
	wantError(t, rec, http.StatusBadRequest, "invalid batch: webhook: unknown event (known: batch.target.finished, batch.finished)")
	if jobs, _ := b.runner.List(t.Context(), alice, 10); len(jobs) != 0 {
		t.Errorf("%d jobs after a refused submit", len(jobs))
	}
}

// decodeStrict decodes body into v, refusing fields v does not have.
func decodeStrict(t *testing.T, body []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("payload %s: %v", body, err)
	}
}
