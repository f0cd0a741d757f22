package batchhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchnet"
)

// testSecret is the master webhook secret of the tests.
const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// The callers' secrets under testSecret, computed apart from the code (in
// Python: "whsec_" + base64(HMAC-SHA256(base64-decoded master,
// b"batchkit webhook v1\x00" + name))), so that a change of the
// derivation, which every caller's receiver depends on, fails here.
const (
	aliceSecret = "whsec_77jjcuXb+CuiX5MWsNJwkjVLeFEiWYaNAMtYQrNvp14="
	bobSecret   = "whsec_/5S0cRM9u3yQFO137lbGtwnCsIJf8xalJRVemst5NZI="
)

func mustKey(t *testing.T, secret string) []byte {
	t.Helper()
	k, err := webhookKey(secret)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// previousBuildHeaders are the Standard Webhooks headers the builds before
// per-caller secrets sent for a delivery of ev with body at ts: the event's
// id as webhook-id, signed with the master secret itself.
func previousBuildHeaders(t *testing.T, master string, ev batch.WebhookEvent, ts int64, body []byte) http.Header {
	t.Helper()
	h := http.Header{}
	h.Set(HeaderWebhookID, ev.ID)
	h.Set(HeaderWebhookTimestamp, strconv.FormatInt(ts, 10))
	h.Set(HeaderWebhookSignature, sign(mustKey(t, master), ev.ID, ts, body))
	return h
}

// webhookIDPattern is the webhook-id openapi.json documents: "msg_" and
// the job id.
var webhookIDPattern = regexp.MustCompile(`^msg_[0-9a-f-]+$`)

// A delivery's webhook-id is a function of its event alone, "msg_" and
// the job id, as the builds before per-caller secrets sent it: the same on
// every attempt, at any time, from senders with other master secrets, and
// the id a node of the previous build sends for the event, so a receiver
// that ignores an id it has seen takes the event once however many nodes,
// of whichever build, retry it.
func TestWebhookSender_IDIsTheEvents(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	other, err := NewWebhookSecret()
	if err != nil {
		t.Fatal(err)
	}
	const jobID = "5f1c2b8e-3d4a-4c6b-9e7f-0a1b2c3d4e5f"
	ev := batch.WebhookEvent{ID: "msg_" + jobID, Type: batch.EventJobFinished, Caller: "alice", URL: rc.srv.URL,
		JobID: jobID, Status: batch.JobDone, TargetsTotal: 1, TargetsDone: 1, TargetsOK: 1}
	for i, secret := range []string{testSecret, testSecret, other} {
		s, err := NewWebhookSender(http.DefaultClient, secret)
		if err != nil {
			t.Fatal(err)
		}
		s.now = func() time.Time { return time.Now().Add(time.Duration(i) * time.Second) }
		ev.Attempt = i + 1
		if err := s.Deliver(t.Context(), ev); err != nil {
			t.Fatal(err)
		}
	}
	body, err := Payload(ev)
	if err != nil {
		t.Fatal(err)
	}
	previous := previousBuildHeaders(t, testSecret, ev, time.Now().Unix(), body).Get(HeaderWebhookID)
	for i, d := range rc.wait(t, 3) {
		checkWebhookDelivery(t, d)
		id := d.header.Get(HeaderWebhookID)
		if id != "msg_"+jobID || id != previous || !webhookIDPattern.MatchString(id) {
			t.Errorf("attempt %d: webhook-id %q, want %q, the previous build's %q", i+1, id, "msg_"+jobID, previous)
		}
	}
}

func TestCallerWebhookSecret(t *testing.T) {
	t.Parallel()
	f := func(caller, want string) {
		t.Helper()
		got, err := CallerWebhookSecret(testSecret, caller)
		if err != nil || got != want {
			t.Errorf("CallerWebhookSecret(%s) = %q, %v; want %q", caller, got, err, want)
		}
	}
	f("alice", aliceSecret)
	f("bob", bobSecret)
	s, err := NewWebhookSender(nil, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CallerSecret("alice"); got != aliceSecret {
		t.Errorf("WebhookSender.CallerSecret(alice) = %q", got)
	}
	if _, err := NewWebhookSender(nil, aliceSecret); err != nil {
		t.Errorf("a caller's secret is not a valid Standard Webhooks secret: %v", err)
	}
	for _, bad := range []string{"", "whsec_x", "whsec_" + strings.Repeat("A", 8)} {
		if _, err := CallerWebhookSecret(bad, "alice"); err == nil || strings.Contains(err.Error(), bad+"!") {
			t.Errorf("CallerWebhookSecret(%q) = %v, want an error", bad, err)
		}
	}
	if _, err := CallerWebhookSecret(testSecret, ""); err == nil {
		t.Error("CallerWebhookSecret of an empty name succeeded")
	}
}

// Each caller's deliveries verify under its own secret only: not under
// another caller's, so caller A cannot sign an event caller B's receiver
// accepts, and not under the master secret.
func TestWebhookSender_PerCallerSecret(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	b := hookBundle(t, nil, nil)
	for _, key := range []string{keyAlice, keyBob} {
		rec := b.do(t, http.MethodPost, "/v1/batch", key, submitHookBody(t, batchtest.Targets("per-caller", 1), rc.srv.URL))
		if rec.Code != http.StatusAccepted {
			t.Fatalf("submit: %d %s", rec.Code, rec.Body)
		}
	}
	got := rc.wait(t, 2)
	for _, d := range got {
		var p WebhookPayload
		decodeJSON(t, d.body, &p)
		info, err := b.runner.Status(t.Context(), alice, p.Data.JobID, batch.StatusOptions{JobOnly: true})
		own, other := bobSecret, aliceSecret
		if err == nil && info.ID == p.Data.JobID {
			own, other = aliceSecret, bobSecret
		}
		if err := VerifyWebhook(own, d.header, d.body, time.Now()); err != nil {
			t.Errorf("job %s: its caller's secret does not verify: %v", p.Data.JobID, err)
		}
		if err := VerifyWebhook(other, d.header, d.body, time.Now()); !errors.Is(err, ErrWebhookSignature) {
			t.Errorf("job %s: another caller's secret verifies it: %v", p.Data.JobID, err)
		}
		if err := VerifyWebhook(testSecret, d.header, d.body, time.Now()); !errors.Is(err, ErrWebhookSignature) {
			t.Errorf("job %s: the master secret verifies it: %v", p.Data.JobID, err)
		}
	}
}

// legacyBundle is hookBundle with a sender under the transition setting:
// each delivery signed with its caller's secret and the master secret.
func legacyBundle(t *testing.T) *testBundle {
	t.Helper()
	sender, err := NewWebhookSender(http.DefaultClient, testSecret, WebhookLegacySignature(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	return hookBundle(t, nil, func(c *batch.Config) { c.Deliver = sender.Deliver })
}

// Under the transition setting (WebhookLegacySignature) every delivery
// carries two signatures, so that a receiver holding the master secret the
// previous build signed with and one holding its caller's secret both
// verify it, and one holding another caller's secret does not; the
// delivery has the previous build's id, and the master secret verifies the
// previous build's delivery of the same event, so during a rolling
// upgrade a receiver that keeps the old secret verifies the deliveries of
// every node. Without the setting the master secret verifies nothing
// (TestWebhookSender_PerCallerSecret).
func TestWebhookSender_LegacySignature(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	b := legacyBundle(t)
	for _, key := range []string{keyAlice, keyBob} {
		rec := b.do(t, http.MethodPost, "/v1/batch", key, submitHookBody(t, batchtest.Targets("legacy", 1), rc.srv.URL))
		if rec.Code != http.StatusAccepted {
			t.Fatalf("submit: %d %s", rec.Code, rec.Body)
		}
	}
	for _, d := range rc.wait(t, 2) {
		checkWebhookDelivery(t, d)
		var p WebhookPayload
		decodeJSON(t, d.body, &p)
		own, other := bobSecret, aliceSecret
		if info, err := b.runner.Status(t.Context(), alice, p.Data.JobID, batch.StatusOptions{JobOnly: true}); err == nil && info.ID == p.Data.JobID {
			own, other = aliceSecret, bobSecret
		}
		if sigs := strings.Fields(d.header.Get(HeaderWebhookSignature)); len(sigs) != 2 {
			t.Errorf("job %s: webhook-signature %q, want two signatures", p.Data.JobID, sigs)
		}
		for _, secret := range []string{own, testSecret} {
			if err := VerifyWebhook(secret, d.header, d.body, time.Now()); err != nil {
				t.Errorf("job %s: a receiver's secret does not verify the delivery: %v", p.Data.JobID, err)
			}
		}
		if err := VerifyWebhook(other, d.header, d.body, time.Now()); !errors.Is(err, ErrWebhookSignature) {
			t.Errorf("job %s: another caller's secret verifies it: %v", p.Data.JobID, err)
		}
		id := d.header.Get(HeaderWebhookID)
		ts, err := strconv.ParseInt(d.header.Get(HeaderWebhookTimestamp), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		old := previousBuildHeaders(t, testSecret, batch.WebhookEvent{ID: "msg_" + p.Data.JobID}, ts, d.body)
		if old.Get(HeaderWebhookID) != id {
			t.Errorf("job %s: webhook-id %q, the previous build's %q", p.Data.JobID, id, old.Get(HeaderWebhookID))
		}
		if err := VerifyWebhook(testSecret, old, d.body, time.Now()); err != nil {
			t.Errorf("job %s: the master secret does not verify the previous build's delivery: %v", p.Data.JobID, err)
		}
	}
}

// The legacy secret is checked as the master is, and an event without a
// caller, signed with the master secret already, is not signed twice
// with it.
func TestWebhookLegacySignature_Options(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"whsec_x", "whsec_" + strings.Repeat("A", 8)} {
		if _, err := NewWebhookSender(nil, testSecret, WebhookLegacySignature(bad)); err == nil {
			t.Errorf("NewWebhookSender accepted the legacy secret %q", bad)
		}
	}
	rc := newReceiver(t)
	for _, opts := range [][]WebhookOption{{WebhookLegacySignature("")}, {WebhookLegacySignature(testSecret)}} {
		s, err := NewWebhookSender(http.DefaultClient, testSecret, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Deliver(t.Context(), batch.WebhookEvent{ID: "msg_1", Type: batch.EventJobFinished, Caller: "alice", URL: rc.srv.URL, JobID: "1", Status: batch.JobDone}); err != nil {
			t.Fatal(err)
		}
		if err := s.Deliver(t.Context(), batch.WebhookEvent{ID: "msg_2", Type: batch.EventJobFinished, URL: rc.srv.URL, JobID: "2", Status: batch.JobDone}); err != nil {
			t.Fatal(err)
		}
	}
	got := rc.wait(t, 4)
	for i, want := range []int{1, 1, 2, 1} { // off: alice's, no caller's; on: alice's and the master's, no caller's
		if sigs := strings.Fields(got[i].header.Get(HeaderWebhookSignature)); len(sigs) != want {
			t.Errorf("delivery %d: %d signatures, want %d", i+1, len(sigs), want)
		}
		if err := VerifyWebhook(testSecret, got[i].header, got[i].body, time.Now()); (err == nil) != (want == 2 || i%2 == 1) {
			t.Errorf("delivery %d: the master secret's verdict: %v", i+1, err)
		}
	}
}

// An event without a caller (written before events knew theirs, its job
// swept before the upgrade) is signed with the master secret, as every
// event was before, so that it can still be verified.
func TestWebhookSender_NoCallerSignedWithMaster(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	sender, err := NewWebhookSender(http.DefaultClient, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	ev := batch.WebhookEvent{ID: "job-1", Type: batch.EventJobFinished, URL: rc.srv.URL, JobID: "job-1", Status: batch.JobDone}
	if err := sender.Deliver(t.Context(), ev); err != nil {
		t.Fatal(err)
	}
	d := rc.wait(t, 1)[0]
	if err := VerifyWebhook(testSecret, d.header, d.body, time.Now()); err != nil {
		t.Errorf("the master secret does not verify an event without a caller: %v", err)
	}
}

// The signature of the Standard Webhooks reference library's own test
// (standard-webhooks/standard-webhooks, libraries/javascript/src/
// webhook.test.ts, "sign function works"), byte for byte.
func TestSignWebhook_PublishedVector(t *testing.T) {
	t.Parallel()
	const body = `{"test": 2432232314}`
	got, err := SignWebhook("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("SignWebhook = %s, want the reference library's %s", got, want)
	}
	// The same secret without its prefix signs the same.
	if bare, _ := SignWebhook("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(body)); bare != got {
		t.Errorf("the bare secret signs %s", bare)
	}
}

func TestVerifyWebhook(t *testing.T) {
	t.Parallel()
	body := []byte(`{"type":"batch.finished"}`)
	now := time.Unix(1_800_000_000, 0)
	headers := func(ts time.Time, sig string) http.Header {
		h := http.Header{}
		h.Set(HeaderWebhookID, "msg_1")
		h.Set(HeaderWebhookTimestamp, fmt.Sprint(ts.Unix()))
		h.Set(HeaderWebhookSignature, sig)
		return h
	}
	good, err := SignWebhook(testSecret, "msg_1", now.Unix(), body)
	if err != nil {
		t.Fatal(err)
	}
	f := func(what string, h http.Header, body []byte, wantOK bool) {
		t.Helper()
		err := VerifyWebhook(testSecret, h, body, now)
		if (err == nil) != wantOK || (err != nil && !errors.Is(err, ErrWebhookSignature)) {
			t.Errorf("%s: VerifyWebhook = %v, want ok %v", what, err, wantOK)
		}
	}
	f("signed now", headers(now, good), body, true)
	f("one of several signatures", headers(now, "v1,bm9wZQ== "+good+" v2,x"), body, true)
	f("within the tolerance", headers(now.Add(-4*time.Minute), mustSign(t, now.Add(-4*time.Minute), body)), body, true)
	f("too old", headers(now.Add(-6*time.Minute), mustSign(t, now.Add(-6*time.Minute), body)), body, false)
	f("too new", headers(now.Add(6*time.Minute), mustSign(t, now.Add(6*time.Minute), body)), body, false)
	f("another body", headers(now, good), []byte(`{"type":"batch.finished "}`), false)
	f("another timestamp", headers(now.Add(time.Second), good), body, false)
	f("no signature", headers(now, ""), body, false)
	other, _ := NewWebhookSecret()
	if VerifyWebhook(other, headers(now, good), body, now) == nil {
		t.Error("another secret verifies")
	}
	for _, bad := range []string{"", "whsec_", "whsec_not base64!", "whsec_" + strings.Repeat("A", 8)} {
		if _, err := NewWebhookSender(nil, bad); err == nil {
			t.Errorf("NewWebhookSender accepted the secret %q", bad)
		} else if bad != "" && strings.Contains(err.Error(), bad) {
			t.Errorf("the error repeats the secret: %v", err)
		}
	}
}

func mustSign(t *testing.T, ts time.Time, body []byte) string {
	t.Helper()
	s, err := SignWebhook(testSecret, "msg_1", ts.Unix(), body)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// delivery is one POST a receiver got.
type delivery struct {
	header http.Header
	body   []byte
}

// receiver is a webhook receiver on loopback: the tests reach it through an
// unguarded client (a guarded one refuses loopback; see the daemon's tests).
type receiver struct {
	srv *httptest.Server

	mu      sync.Mutex
	got     []delivery
	answers []int // the status of each next answer; 204 once they run out
	arrived chan struct{}
}

func newReceiver(t *testing.T, answers ...int) *receiver {
	t.Helper()
	rc := &receiver{answers: answers, arrived: make(chan struct{}, 64)}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, delivery{r.Header.Clone(), body})
		status := http.StatusNoContent
		if len(rc.answers) > 0 {
			status, rc.answers = rc.answers[0], rc.answers[1:]
		}
		rc.mu.Unlock()
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			status = http.StatusBadRequest
		}
		w.WriteHeader(status)
		rc.arrived <- struct{}{}
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) deliveries() []delivery {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]delivery(nil), rc.got...)
}

// wait waits for n deliveries in all.
func (rc *receiver) wait(t *testing.T, n int) []delivery {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for len(rc.deliveries()) < n {
		select {
		case <-rc.arrived:
		case <-deadline:
			t.Fatalf("%d deliveries within 10s, want %d", len(rc.deliveries()), n)
		}
	}
	return rc.deliveries()
}

// hookBundle is a handler over a runner that delivers through a
// WebhookSender over an unguarded client, on the real clock.
func hookBundle(t *testing.T, precheck PrecheckFunc, cfg func(*batch.Config)) *testBundle {
	t.Helper()
	sender, err := NewWebhookSender(http.DefaultClient, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	return setup(t, setupOpts{precheck: precheck, config: func(c *batch.Config) {
		c.Now, c.Deliver, c.WebhookBackoff = time.Now, sender.Deliver, batch.Duration(time.Millisecond)
		if cfg != nil {
			cfg(c)
		}
	}})
}

func submitHookBody(t *testing.T, targets []batch.Target, url string) string {
	t.Helper()
	b, err := json.Marshal(SubmitRequest{Targets: targets, Webhook: &Webhook{URL: url}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A job submitted with a webhook gets one signed POST when it finishes, with
// the event's data and no target URL; a job without one gets none.
func TestWebhookSender_DeliveredOnce(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	b := hookBundle(t, nil, nil)
	targets := []batch.Target{{URL: "https://example.test/secret-target-a"}, {URL: "https://example.test/secret-target-b"}}
	rec := b.do(t, http.MethodPost, "/v1/batch", keyAlice, submitHookBody(t, targets, rc.srv.URL+"/hooks?token=x"))
	if rec.Code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", rec.Code, rec.Body)
	}
	var sub SubmitResponse
	decodeJSON(t, rec.Body.Bytes(), &sub)
	plain := b.submit(t, keyBob, batchtest.Targets("plain", 1), http.StatusAccepted)
	batchtest.WaitFinished(t, b.runner, batch.Caller{Name: "bob"}, plain.JobID, 10*time.Second)
	info := batchtest.WaitFinished(t, b.runner, alice, sub.JobID, 10*time.Second)
	rc.wait(t, 1)
	time.Sleep(50 * time.Millisecond) // five polls: time for a wrong second delivery
	got := rc.deliveries()
	if len(got) != 1 {
		t.Fatalf("%d deliveries, want 1", len(got))
	}
	d := got[0]
	if err := VerifyWebhook(aliceSecret, d.header, d.body, time.Now()); err != nil {
		t.Errorf("our own verifier refuses the delivery: %v", err)
	}
	checkWebhookDelivery(t, d)
	if id, want := d.header.Get(HeaderWebhookID), "msg_"+sub.JobID; id != want {
		t.Errorf("webhook-id %q, want %q", id, want)
	}
	if ua := d.header.Get("User-Agent"); ua != DefaultWebhookUserAgent {
		t.Errorf("User-Agent %q", ua)
	}
	var p WebhookPayload
	dec := json.NewDecoder(bytes.NewReader(d.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("payload %s: %v", d.body, err)
	}
	want := WebhookPayload{Type: batch.EventJobFinished, Timestamp: p.Data.FinishedAt, Data: WebhookData{
		JobID: sub.JobID, Status: batch.JobDone, TargetsTotal: 2, TargetsDone: 2, TargetsOK: 2,
		CreatedAt: wireTime(info.CreatedAt), FinishedAt: p.Data.FinishedAt, ExpiresAt: p.Data.FinishedAt.Add(batch.DefaultTTL),
	}}
	if !reflect.DeepEqual(p, want) || p.Data.FinishedAt.IsZero() {
		t.Errorf("payload %+v\nwant %+v", p, want)
	}
	if bytes.Contains(d.body, []byte("secret-target")) || bytes.Contains(d.body, []byte("example.test")) {
		t.Errorf("the payload carries a target URL: %s", d.body)
	}
}

// A receiver that fails twice gets the event on the third attempt: the
// same id and body each time, each signed anew.
func TestWebhookSender_RetriedUntilOK(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, http.StatusServiceUnavailable, http.StatusInternalServerError)
	b := hookBundle(t, nil, nil)
	rec := b.do(t, http.MethodPost, "/v1/batch", keyAlice, submitHookBody(t, batchtest.Targets("retry", 1), rc.srv.URL))
	if rec.Code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", rec.Code, rec.Body)
	}
	rc.wait(t, 3)
	time.Sleep(50 * time.Millisecond) // five polls: time for a wrong fourth attempt
	got := rc.deliveries()
	if len(got) != 3 {
		t.Fatalf("%d attempts, want 3", len(got))
	}
	for i, d := range got {
		if d.header.Get(HeaderWebhookID) != got[0].header.Get(HeaderWebhookID) || !bytes.Equal(d.body, got[0].body) {
			t.Errorf("attempt %d differs from the first: %s %s", i+1, d.header.Get(HeaderWebhookID), d.body)
		}
		if err := VerifyWebhook(aliceSecret, d.header, d.body, time.Now()); err != nil {
			t.Errorf("attempt %d: %v", i+1, err)
		}
	}
	if err := b.runner.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	for outcome, want := range map[string]uint64{"delivered": 1, "failed": 2} {
		if n := b.runner.Metrics().GetOrCreateCounter(fmt.Sprintf(`batch_webhooks_total{outcome=%q}`, outcome)).Get(); n != want {
			t.Errorf("webhooks_total{%s} = %d, want %d", outcome, n, want)
		}
	}
}

// The sender does not follow redirects, and its errors name no URL, host
// or address.
func TestWebhookSender_Errors(t *testing.T) {
	t.Parallel()
	other := newReceiver(t)
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.srv.URL, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirect.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/hook-canary"
	ln.Close()
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // so that the server notices the client leave
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	t.Cleanup(hang.Close)

	s, err := NewWebhookSender(http.DefaultClient, testSecret) // unguarded: the receivers are on loopback
	if err != nil {
		t.Fatal(err)
	}
	ev := batch.WebhookEvent{ID: "msg_x", Type: batch.EventJobFinished, JobID: "x", Status: batch.JobDone}
	f := func(ctx context.Context, url string, check func(error) bool) {
		t.Helper()
		ev.URL = url
		err := s.Deliver(ctx, ev)
		if err == nil || !check(err) {
			t.Errorf("Deliver to %s = %v", url, err)
			return
		}
		host := strings.TrimPrefix(url, "http://")
		host, _, _ = strings.Cut(host, "/")
		name, _, _ := strings.Cut(host, ":")
		for _, leak := range []string{url, host, name, "canary"} {
			if strings.Contains(err.Error(), leak) {
				t.Errorf("the error of a delivery to %s holds %q: %v", url, leak, err)
			}
		}
	}
	f(t.Context(), redirect.URL, func(err error) bool {
		se, ok := errors.AsType[*WebhookStatusError](err)
		return ok && se.StatusCode == http.StatusTemporaryRedirect
	})
	if n := len(other.deliveries()); n != 0 {
		t.Errorf("the redirect was followed (%d deliveries)", n)
	}
	f(t.Context(), closed, func(err error) bool { _, ok := errors.AsType[*WebhookSendError](err); return ok })
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	f(ctx, hang.URL, func(err error) bool { return errors.Is(err, context.DeadlineExceeded) })
}

// A delivery the client's guard refused keeps its outcome, "blocked", in
// the error, so that the runner drops it instead of retrying it for a day;
// the message still holds neither the URL nor the host.
func TestWebhookSender_BlockedKeepsOutcome(t *testing.T) {
	t.Parallel()
	guard := batchnet.NewGuard(nil)
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return nil, guard.Precheck(r.URL.String())
	})}
	s, err := NewWebhookSender(client, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	ev := batch.WebhookEvent{ID: "msg_x", Type: batch.EventJobFinished, JobID: "x", Status: batch.JobDone, URL: "https://127.0.0.1/canary"}
	err = s.Deliver(t.Context(), ev)
	oe, ok := errors.AsType[batch.OutcomeError](err)
	if !ok || oe.Outcome() != batch.OutcomeBlocked {
		t.Fatalf("Deliver = %v, want an error with the outcome blocked", err)
	}
	if _, ok := errors.AsType[*WebhookSendError](err); !ok {
		t.Errorf("Deliver = %T, want a *WebhookSendError", err)
	}
	for _, leak := range []string{"127.0.0.1", "canary"} {
		if strings.Contains(err.Error(), leak) {
			t.Errorf("the error holds %q: %v", leak, err)
		}
	}
}

// A sender made without a client gets batchnet's guarded one, not
// http.DefaultClient: a webhook to loopback is refused as blocked, and the
// receiver there sees nothing.
func TestWebhookSender_NilClientGuarded(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	s, err := NewWebhookSender(nil, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	ev := batch.WebhookEvent{ID: "msg_x", Type: batch.EventJobFinished, JobID: "x", Status: batch.JobDone, URL: srv.URL + "/hook"}
	err = s.Deliver(t.Context(), ev)
	if oe, ok := errors.AsType[batch.OutcomeError](err); !ok || oe.Outcome() != batch.OutcomeBlocked {
		t.Errorf("Deliver to loopback with a nil client = %v, want blocked", err)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the loopback receiver got %d requests", n)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Submit: the webhook passes the pre-check as a target does; the owner
// sees it in the status, nobody else sees the job; a runner without
// Deliver refuses it.
func TestHandler_SubmitWebhook(t *testing.T) {
	t.Parallel()
	t.Run("Blocked", func(t *testing.T) {
		t.Parallel()
		b := hookBundle(t, PrecheckURL, nil)
		for url, want := range map[string]string{
			"http://127.0.0.1/hook":         "blocked: webhook: loopback address",
			"https://10.1.2.3/hook":         "blocked: webhook: private address",
			"https://localhost/hook":        "blocked: webhook: loopback address",
			"https://[::1]/hook":            "blocked: webhook: loopback address",
			"ftp://hooks.example/":          "blocked: webhook: scheme not allowed",
			"https://hooks.example:8443/in": "blocked: webhook: port not allowed",
		} {
			rec := b.do(t, http.MethodPost, "/v1/batch", keyAlice, submitHookBody(t, batchtest.Targets("b", 1), url))
			wantError(t, rec, http.StatusUnprocessableEntity, want)
		}
		if jobs, _ := b.runner.List(t.Context(), alice, 10); len(jobs) != 0 {
			t.Errorf("%d jobs after refused submits", len(jobs))
		}
	})
	t.Run("Disabled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		rec := b.do(t, http.MethodPost, "/v1/batch", keyAlice, submitHookBody(t, batchtest.Targets("d", 1), "https://hooks.example/"))
		wantError(t, rec, http.StatusUnprocessableEntity, "webhooks are not enabled on this server")
	})
	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		b := hookBundle(t, nil, nil)
		rec := b.do(t, http.MethodPost, "/v1/batch", keyAlice, submitHookBody(t, batchtest.Targets("i", 1), "hooks.example/in"))
		wantError(t, rec, http.StatusBadRequest, "invalid batch: webhook: url must be an absolute http or https url")
	})
	t.Run("OwnerOnly", func(t *testing.T) {
		t.Parallel()
		f := batchtest.NewBlockingFetcher()
		t.Cleanup(func() { f.Release() })
		b := hookBundle(t, PrecheckURL, func(c *batch.Config) { c.Fetch = f.Fetch })
		const hook = "https://hooks.example/in?token=t0k"
		rec := b.do(t, http.MethodPost, "/v1/batch", keyAlice, submitHookBody(t, batchtest.Targets("o", 1), hook))
		if rec.Code != http.StatusAccepted {
			t.Fatalf("submit: %d %s", rec.Code, rec.Body)
		}
		var sub SubmitResponse
		decodeJSON(t, rec.Body.Bytes(), &sub)
		// The same list with the same webhook is the same job; with another
		// webhook it is a new one (here refused by the caller cap).
		again := b.do(t, http.MethodPost, "/v1/batch", keyAlice, submitHookBody(t, batchtest.Targets("o", 1), hook))
		var re SubmitResponse
		decodeJSON(t, again.Body.Bytes(), &re)
		if again.Code != http.StatusAccepted || !re.Reused || re.JobID != sub.JobID {
			t.Errorf("resubmit with the same webhook: %d %s", again.Code, again.Body)
		}
		other := b.do(t, http.MethodPost, "/v1/batch", keyAlice, submitHookBody(t, batchtest.Targets("o", 1), hook+"2"))
		wantError(t, other, http.StatusTooManyRequests, "busy: a batch of yours is still running")
		for _, path := range []string{"/v1/batch/" + sub.JobID, "/v1/batch/" + sub.JobID + "?results=1"} {
			rec = b.do(t, http.MethodGet, path, keyAlice, "")
			var st StatusResponse
			decodeJSON(t, rec.Body.Bytes(), &st)
			if rec.Code != http.StatusOK || st.Webhook == nil || st.Webhook.URL != hook {
				t.Errorf("owner's %s: %d %s", path, rec.Code, rec.Body)
			}
		}
		foreign := b.do(t, http.MethodGet, "/v1/batch/"+sub.JobID, keyBob, "")
		unknown := b.do(t, http.MethodGet, "/v1/batch/00000000-0000-4000-8000-000000000000", keyBob, "")
		if foreign.Code != http.StatusNotFound || foreign.Body.String() != unknown.Body.String() {
			t.Errorf("another caller: %d %s; unknown job: %s", foreign.Code, foreign.Body, unknown.Body)
		}
		if strings.Contains(foreign.Body.String(), "hooks.example") {
			t.Errorf("another caller sees the webhook: %s", foreign.Body)
		}
	})
}

// A submit with a webhook by a caller at its cap of pending webhook events
// is a 429 webhooks_busy with Retry-After; one without a webhook is not.
func TestHandler_SubmitWebhooksBusy(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, http.StatusServiceUnavailable) // the event stays pending, its retry an hour away
	b := hookBundle(t, nil, func(c *batch.Config) {
		c.WebhookPendingPerCaller, c.WebhookBackoff = 1, batch.Duration(time.Hour)
	})
	rec := b.do(t, http.MethodPost, "/v1/batch", keyAlice, submitHookBody(t, batchtest.Targets("first", 1), rc.srv.URL))
	if rec.Code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", rec.Code, rec.Body)
	}
	var sub SubmitResponse
	decodeJSON(t, rec.Body.Bytes(), &sub)
	batchtest.WaitFinished(t, b.runner, alice, sub.JobID, 10*time.Second)
	rc.wait(t, 1)
	rec = b.do(t, http.MethodPost, "/v1/batch", keyAlice, submitHookBody(t, batchtest.Targets("second", 1), rc.srv.URL))
	wantError(t, rec, http.StatusTooManyRequests, "busy: too many of your webhook events are pending")
	if code := rec.Header().Get("Retry-After"); code != "60" {
		t.Errorf("Retry-After %q, want 60", code)
	}
	var e ErrorResponse
	decodeJSON(t, rec.Body.Bytes(), &e)
	if e.Code != CodeWebhooksBusy {
		t.Errorf("code %q, want %s", e.Code, CodeWebhooksBusy)
	}
	b.submit(t, keyAlice, batchtest.Targets("plain", 1), http.StatusAccepted)
}

// GET /v1/batch/webhook-secret answers each caller its own secret, the
// one its deliveries verify with; without HandlerConfig.WebhookSecret it is
// 422 webhooks_disabled.
func TestHandler_WebhookSecretRoute(t *testing.T) {
	t.Parallel()
	sender, err := NewWebhookSender(nil, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	auth := CallerFunc(testAuth)
	r := batchtest.NewRunner(t, batch.Config{})
	h, err := NewHandler(r, &HandlerConfig{Authenticate: auth, WebhookSecret: sender.CallerSecret})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]WebhookSecretResponse{
		keyAlice: {Caller: "alice", Secret: aliceSecret}, keyBob: {Caller: "bob", Secret: bobSecret},
	} {
		rec := serve(t, h, http.MethodGet, "/v1/batch/webhook-secret", key, "")
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		var got WebhookSecretResponse
		decodeJSON(t, rec.Body.Bytes(), &got)
		if got != want {
			t.Errorf("answered %+v, want %+v", got, want)
		}
		if cc := rec.Header().Get("Cache-Control"); cc != "no-store" {
			t.Errorf("Cache-Control %q, want no-store", cc)
		}
	}
	if rec := serve(t, h, http.MethodGet, "/v1/batch/webhook-secret", "", ""); rec.Code != http.StatusUnauthorized {
		t.Errorf("without a key: %d", rec.Code)
	}
	forbid := func(w http.ResponseWriter, r *http.Request) (batch.Caller, bool) {
		WriteError(w, http.StatusForbidden, CodeForbidden, "forbidden", "")
		return batch.Caller{}, false
	}
	refused, err := NewHandler(r, &HandlerConfig{Authenticate: forbid, WebhookSecret: sender.CallerSecret})
	if err != nil {
		t.Fatal(err)
	}
	wantError(t, serve(t, refused, http.MethodGet, "/v1/batch/webhook-secret", keyAlice, ""), http.StatusForbidden, "forbidden")
	plain, err := NewHandler(r, &HandlerConfig{Authenticate: auth})
	if err != nil {
		t.Fatal(err)
	}
	wantError(t, serve(t, plain, http.MethodGet, "/v1/batch/webhook-secret", keyAlice, ""), http.StatusUnprocessableEntity,
		"webhooks are not enabled on this server")
}
