package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/batchhttp/batchserver"
)

const testWebhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// hookReceiver is a webhook receiver on loopback. hold makes it keep the
// first request open (never answering) until the client goes away.
type hookReceiver struct {
	srv  *httptest.Server
	addr string

	mu      sync.Mutex
	got     []hookDelivery
	arrived chan struct{}
}

type hookDelivery struct {
	header http.Header
	body   []byte
}

func newHookReceiver(t *testing.T, hold bool) *hookReceiver {
	t.Helper()
	rc := &hookReceiver{arrived: make(chan struct{}, 16)}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body) // read whole, so the server notices the client leave
		rc.mu.Lock()
		rc.got = append(rc.got, hookDelivery{r.Header.Clone(), body})
		first := len(rc.got) == 1
		rc.mu.Unlock()
		rc.arrived <- struct{}{}
		if hold && first {
			select {
			case <-r.Context().Done():
			case <-time.After(30 * time.Second):
			}
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rc.srv.Close)
	rc.addr = strings.TrimPrefix(rc.srv.URL, "http://")
	return rc
}

func (rc *hookReceiver) deliveries() []hookDelivery {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]hookDelivery(nil), rc.got...)
}

func (rc *hookReceiver) wait(t *testing.T, n int, timeout time.Duration) []hookDelivery {
	t.Helper()
	deadline := time.After(timeout)
	for len(rc.deliveries()) < n {
		select {
		case <-rc.arrived:
		case <-deadline:
			t.Fatalf("%d webhook deliveries within %s, want %d", len(rc.deliveries()), timeout, n)
		}
	}
	return rc.deliveries()
}

// okPages serves "ok" for every path.
func okPages(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// submitWebhook submits one page with a webhook as alice and returns the
// answer's status and body.
func submitWebhook(t *testing.T, server, page, hook string) (int, string) {
	t.Helper()
	body, _ := json.Marshal(batchhttp.SubmitRequest{
		Targets: []batch.Target{{URL: "http://" + page + "/page"}}, Webhook: &batchhttp.Webhook{URL: hook},
	})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, server+"/v1/batch", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer alice-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metricValue reads one series from the daemon's /metrics.
func metricValue(t *testing.T, server, series string) string {
	t.Helper()
	_, body := get(t, server+"/metrics", "")
	for line := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			return v
		}
	}
	return ""
}

// The daemon refuses a loopback or private webhook at submit (422), and
// at connect time through the fetcher's guard: here a name the guard lets
// past the pre-check (an allow-list entry for "localhost:<port>") resolves
// to 127.0.0.1, which the guard refuses when the delivery connects. Only
// an exact allow-list entry for the receiver's address lets a delivery
// through, signed with the configured secret.
func TestDaemon_WebhookGuard(t *testing.T) {
	t.Parallel()
	pages := okPages(t)
	rc := newHookReceiver(t, false)
	_, port, _ := net.SplitHostPort(rc.addr)
	logs := &batchtest.Buffer{}
	d, err := Open(t.Context(), Config{
		DB:            filepath.Join(t.TempDir(), "d.db"),
		Keys:          []batchserver.Key{{Name: "alice", Secret: "alice-key"}},
		Allow:         []string{pages, "localhost:" + port},
		WebhookSecret: testWebhookSecret,
		Logger:        slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	server := "http://" + serveOn(t, d)

	for hook, want := range map[string]string{
		"http://127.0.0.1/hook-canary":        "blocked: webhook: loopback address",
		"http://[::1]/hook-canary":            "blocked: webhook: loopback address",
		"http://" + rc.addr + "/hook-canary":  "blocked: webhook: port not allowed", // not on the allow list
		"https://localhost/hook-canary":       "blocked: webhook: loopback address",
		"https://10.20.30.40/hook-canary":     "blocked: webhook: private address",
		"https://192.168.1.1/hook-canary":     "blocked: webhook: private address",
		"https://169.254.169.254/hook-canary": "blocked: webhook: link-local address",
	} {
		code, body := submitWebhook(t, server, pages, hook)
		if code != http.StatusUnprocessableEntity || !strings.Contains(body, want) {
			t.Errorf("submit with webhook %s = %d %s, want 422 %q", hook, code, body, want)
		}
	}

	code, body := submitWebhook(t, server, pages, "http://localhost:"+port+"/hook-canary")
	if code != http.StatusAccepted {
		t.Fatalf("submit with a webhook the pre-check allows = %d %s", code, body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for metricValue(t, server, `batch_webhooks_total{outcome="failed"}`) != "1" {
		if time.Now().After(deadline) {
			t.Fatalf("no failed webhook attempt within 10s; logs:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := len(rc.deliveries()); n != 0 {
		t.Fatalf("the guard let %d deliveries reach loopback", n)
	}
	for _, leak := range []string{"hook-canary", "localhost"} {
		if strings.Contains(logs.String(), leak) {
			t.Errorf("a log line carries %q:\n%s", leak, logs)
		}
	}
	// The port alone is five digits, which a timestamp or a duration can
	// contain by chance: it leaks only as a number of its own.
	if regexp.MustCompile(`(^|[^0-9])` + port + `([^0-9]|$)`).MatchString(logs.String()) {
		t.Errorf("a log line carries the receiver's port %s:\n%s", port, logs)
	}
}

// With an exact allow-list entry the daemon delivers through the same
// client, signed with its secret; without a secret it generates one and
// logs that it did, never the secret.
func TestDaemon_WebhookDelivered(t *testing.T) {
	t.Parallel()
	pages := okPages(t)
	rc := newHookReceiver(t, false)
	logs := &batchtest.Buffer{}
	d, err := Open(t.Context(), Config{
		DB:     filepath.Join(t.TempDir(), "d.db"),
		Keys:   []batchserver.Key{{Name: "alice", Secret: "alice-key"}},
		Allow:  []string{pages, rc.addr},
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	secret := d.WebhookSecret()
	server := "http://" + serveOn(t, d)
	if !strings.HasPrefix(secret, "whsec_") || !strings.Contains(logs.String(), "generated one for this run") {
		t.Fatalf("secret %q; logs:\n%s", secret, logs)
	}
	code, body := submitWebhook(t, server, pages, "http://"+rc.addr+"/hook-canary")
	if code != http.StatusAccepted {
		t.Fatalf("submit = %d %s", code, body)
	}
	got := rc.wait(t, 1, 10*time.Second)
	if err := batchhttp.VerifyWebhook(d.CallerWebhookSecret("alice"), got[0].header, got[0].body, time.Now()); err != nil {
		t.Errorf("delivery does not verify with alice's secret: %v", err)
	}
	if err := batchhttp.VerifyWebhook(secret, got[0].header, got[0].body, time.Now()); err == nil {
		t.Errorf("delivery verifies with the master secret, which a caller must not need")
	}
	// The caller fetches its own secret.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, server+"/v1/batch/webhook-secret", nil)
	req.Header.Set("Authorization", "Bearer alice-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var own batchhttp.WebhookSecretResponse
	err = json.NewDecoder(resp.Body).Decode(&own)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || own.Caller != "alice" || own.Secret != d.CallerWebhookSecret("alice") {
		t.Errorf("GET /v1/batch/webhook-secret = %d %+v, %v; want alice's secret", resp.StatusCode, own, err)
	}
	if err := batchhttp.VerifyWebhook(own.Secret, got[0].header, got[0].body, time.Now()); err != nil {
		t.Errorf("delivery does not verify with the secret the route gave: %v", err)
	}
	for _, leak := range []string{"hook-canary", rc.addr, strings.TrimPrefix(secret, "whsec_")} {
		if strings.Contains(logs.String(), leak) {
			t.Errorf("a log line carries %q:\n%s", leak, logs)
		}
	}
}

// With WebhookLegacySignature (batchd -webhook-legacy-signature) each
// delivery verifies with the master secret, which the builds before
// per-caller secrets signed with and handed receivers, and with the
// caller's secret, and it says so in its log; without it only the
// caller's (TestDaemon_WebhookDelivered).
func TestDaemon_WebhookLegacySignature(t *testing.T) {
	t.Parallel()
	pages := okPages(t)
	rc := newHookReceiver(t, false)
	logs := &batchtest.Buffer{}
	d, err := Open(t.Context(), Config{
		DB:                     filepath.Join(t.TempDir(), "d.db"),
		Keys:                   []batchserver.Key{{Name: "alice", Secret: "alice-key"}},
		Allow:                  []string{pages, rc.addr},
		WebhookSecret:          testWebhookSecret,
		WebhookLegacySignature: true,
		Logger:                 slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	server := "http://" + serveOn(t, d)
	code, body := submitWebhook(t, server, pages, "http://"+rc.addr+"/hook")
	if code != http.StatusAccepted {
		t.Fatalf("submit = %d %s", code, body)
	}
	got := rc.wait(t, 1, 10*time.Second)
	for _, secret := range []string{testWebhookSecret, d.CallerWebhookSecret("alice")} {
		if err := batchhttp.VerifyWebhook(secret, got[0].header, got[0].body, time.Now()); err != nil {
			t.Errorf("the delivery does not verify with a secret a receiver holds: %v", err)
		}
	}
	if !strings.Contains(logs.String(), "also carry a signature under the master secret") ||
		strings.Contains(logs.String(), strings.TrimPrefix(testWebhookSecret, "whsec_")) {
		t.Errorf("logs:\n%s", logs)
	}
}

// The test binary doubles as a daemon child for the kill test: with
// webhookChildEnv set to the JSON of a webhookChild, TestMain serves it.
const webhookChildEnv = "BATCHKIT_DAEMON_WEBHOOK_CHILD"

type webhookChild struct {
	DB     string
	Allow  []string
	Secret string
}

// runWebhookChild serves a daemon until SIGTERM or SIGKILL, logging JSON to
// stderr and printing "listening <addr>" once it serves.
func runWebhookChild(raw string) int {
	var c webhookChild
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		fmt.Fprintln(os.Stderr, "child config:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	return ServeChild(ctx, Config{
		DB: c.DB, Allow: c.Allow, WebhookSecret: c.Secret,
		Keys:   []batchserver.Key{{Name: "alice", Secret: "alice-key"}},
		Batch:  batch.Config{PollInterval: batch.Duration(20 * time.Millisecond)},
		Logger: slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}, os.Stdout, os.Stderr)
}

// childDaemon is a running webhook child.
type childDaemon struct {
	cmd    *exec.Cmd
	server string
	logs   *batchtest.Buffer
	done   chan error
}

func startWebhookChild(t *testing.T, c webhookChild) *childDaemon {
	t.Helper()
	raw, _ := json.Marshal(c)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), webhookChildEnv+"="+string(raw))
	ch := &childDaemon{cmd: cmd, logs: &batchtest.Buffer{}, done: make(chan error, 1)}
	cmd.Stderr = ch.logs
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if addr, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
			ch.server = "http://" + addr
			break
		}
	}
	go io.Copy(io.Discard, out)
	go func() { ch.done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-ch.done
	})
	if ch.server == "" {
		t.Fatalf("daemon child did not start: %s", ch.logs)
	}
	return ch
}

// A daemon SIGKILLed while its webhook delivery is in flight (the receiver
// took the request and never answered) leaves the event in its store: the
// daemon started again on the same file delivers it, with the same id and
// body, signed with the same secret, and delivers it once.
func TestDaemon_WebhookSurvivesKill(t *testing.T) {
	t.Parallel()
	pages := okPages(t)
	rc := newHookReceiver(t, true)
	c := webhookChild{DB: filepath.Join(t.TempDir(), "kill.db"), Allow: []string{pages, rc.addr}, Secret: testWebhookSecret}
	first := startWebhookChild(t, c)
	code, body := submitWebhook(t, first.server, pages, "http://"+rc.addr+"/hook-canary")
	if code != http.StatusAccepted {
		t.Fatalf("submit = %d %s", code, body)
	}
	var sub batchhttp.SubmitResponse
	if err := json.Unmarshal([]byte(body), &sub); err != nil {
		t.Fatal(err)
	}
	rc.wait(t, 1, 20*time.Second) // the first attempt is in flight, never to be answered
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.done
	first.done <- nil // for the cleanup

	second := startWebhookChild(t, c)
	got := rc.wait(t, 2, 20*time.Second)
	if id := got[1].header.Get(batchhttp.HeaderWebhookID); id != "msg_"+sub.JobID ||
		got[0].header.Get(batchhttp.HeaderWebhookID) != got[1].header.Get(batchhttp.HeaderWebhookID) ||
		string(got[0].body) != string(got[1].body) {
		t.Fatalf("the delivery after the restart differs from the one cut short:\n%v %s\n%v %s",
			got[0].header, got[0].body, got[1].header, got[1].body)
	}
	aliceSecret, err := batchhttp.CallerWebhookSecret(testWebhookSecret, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if err := batchhttp.VerifyWebhook(aliceSecret, got[1].header, got[1].body, time.Now()); err != nil {
		t.Errorf("the delivery after the restart does not verify: %v", err)
	}
	var p batchhttp.WebhookPayload
	if err := json.Unmarshal(got[1].body, &p); err != nil || p.Data.JobID != sub.JobID || p.Data.Status != batch.JobDone {
		t.Errorf("payload %s (%v)", got[1].body, err)
	}
	time.Sleep(200 * time.Millisecond) // ten polls: time for a wrong third delivery
	if n := len(rc.deliveries()); n != 2 {
		t.Errorf("%d deliveries, want the one cut short and one after the restart", n)
	}
	if err := second.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-second.done; err != nil {
		t.Errorf("graceful stop: %v\n%s", err, second.logs)
	}
	second.done <- nil
	logs := first.logs.String() + second.logs.String()
	if !strings.Contains(logs, `"msg":"batch webhook delivered"`) {
		t.Errorf("no delivery in the logs:\n%s", logs)
	}
	for _, leak := range []string{"hook-canary", rc.addr} {
		if strings.Contains(logs, leak) {
			t.Errorf("a log line carries %q", leak)
		}
	}
}
