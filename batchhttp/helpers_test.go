package batchhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

var _ Runner = (*batch.Runner)(nil)

// Test keys: alice and bob are plain callers, rita is restricted.
const (
	keyAlice = "alice-key"
	keyBob   = "bob-key"
	keyRita  = "rita-key"
)

// testKeys are the callers the test keys stand for.
var testKeys = map[string]batch.Caller{
	keyAlice: alice,
	keyBob:   {Name: "bob", Class: "agent"},
	keyRita:  {Name: "rita", Class: "guest", Restricted: true},
}

var alice = batch.Caller{Name: "alice", Class: "agent"}

// testAuth is the tests' [CallerFunc]: it accepts "Authorization: Bearer
// <key>" for the testKeys and refuses anything else as
// batchserver.NewKeyAuth does, with a 401 and a Bearer challenge.
// (batchserver imports this package, so these tests cannot use it; its
// own tests check NewKeyAuth's answers.)
func testAuth(w http.ResponseWriter, r *http.Request) (batch.Caller, bool) {
	scheme, key, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") || key == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="batch"`)
		WriteError(w, http.StatusUnauthorized, CodeUnauthorized, "unauthorized", "send Authorization: Bearer <key>")
		return batch.Caller{}, false
	}
	c, ok := testKeys[key]
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="batch", error="invalid_token"`)
		WriteError(w, http.StatusUnauthorized, CodeUnauthorized, "unauthorized", "")
	}
	return c, ok
}

// testRequestID is the X-Request-Id that serve sends.
const testRequestID = "test-request-1"

// testBundle is one handler over one runner over an in-memory store.
type testBundle struct {
	runner  *batch.Runner
	store   batchdriver.Store
	clock   *batchtest.Clock
	handler *Handler
	logs    *logBuffer // the handler's log lines, as JSON
	obs     *observations
}

type setupOpts struct {
	fetch    batch.FetchFunc
	precheck PrecheckFunc
	check    CheckTargetFunc // HandlerConfig.CheckTarget
	store    batchdriver.Store
	config   func(*batch.Config) // adjusts the runner config
	noStart  bool                // build the runner without starting it
}

func setup(t *testing.T, o setupOpts) *testBundle {
	t.Helper()
	b := &testBundle{clock: batchtest.NewClock(), logs: &logBuffer{}, obs: &observations{}}
	b.store = o.store
	if b.store == nil {
		b.store = batchtest.NewStore()
	}
	cfg := batch.Config{Store: b.store, Fetch: o.fetch, Options: batchsift.Options, Now: b.clock.Now, PollInterval: batch.Duration(10 * time.Millisecond)}
	if o.config != nil {
		o.config(&cfg)
	}
	if o.noStart {
		if cfg.Fetch == nil {
			cfg.Fetch = batchtest.StaticFetcher("ok")
		}
		cfg.Logger = batchtest.Logger(t)
		r, err := batch.New(cfg)
		if err != nil {
			t.Fatalf("batch.New: %v", err)
		}
		b.runner = r
		t.Cleanup(func() { _ = r.Close(context.Background()) })
	} else {
		b.runner = batchtest.NewRunner(t, cfg)
	}
	b.handler = newTestHandler(t, b.runner, o.precheck, b.logs, b.obs)
	b.handler.check = o.check
	return b
}

func newTestHandler(t *testing.T, r Runner, precheck PrecheckFunc, logs *logBuffer, obs *observations) *Handler {
	t.Helper()
	auth := CallerFunc(testAuth)
	h, err := NewHandler(r, &HandlerConfig{
		Authenticate: auth,
		Precheck:     precheck,
		Logger:       slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Observe:      obs.observe,
	})
	if err != nil {
		t.Fatalf("NewHandler: %v", err)
	}
	return h
}

// do serves one request with the given bearer key (none if empty).
func (b *testBundle) do(t *testing.T, method, target, key, body string) *httptest.ResponseRecorder {
	t.Helper()
	return serve(t, b.handler, method, target, key, body)
}

// serve serves one request with h and returns the answer, which it
// records to be checked against openapi.json (see serveRequest): an answer
// that the document does not describe fails batchhttp/openapitest.
func serve(t testing.TB, h http.Handler, method, target, key, body string) *httptest.ResponseRecorder {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, rd)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	// One request id for every request, so that two answers compare byte
	// for byte and golden files hold still; TestHandler_RequestID tests
	// the ids themselves.
	req.Header.Set(RequestIDHeader, testRequestID)
	return serveRequest(t, h, req)
}

// submit posts targets as key's caller and returns the answer, failing the
// test unless it is wantStatus.
func (b *testBundle) submit(t *testing.T, key string, targets []batch.Target, wantStatus int) SubmitResponse {
	t.Helper()
	rec := b.do(t, http.MethodPost, "/v1/batch", key, submitBody(t, targets))
	if rec.Code != wantStatus {
		t.Fatalf("submit: status %d, want %d; body %s", rec.Code, wantStatus, rec.Body)
	}
	var resp SubmitResponse
	if wantStatus == http.StatusAccepted {
		decodeJSON(t, rec.Body.Bytes(), &resp)
	}
	return resp
}

func submitBody(t testing.TB, targets []batch.Target) string {
	t.Helper()
	b, err := json.Marshal(SubmitRequest{Targets: targets})
	if err != nil {
		t.Fatalf("encode targets: %v", err)
	}
	return string(b)
}

func decodeJSON(t testing.TB, data []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
}

// wantError checks an error answer: status, the one error shape, message.
func wantError(t *testing.T, rec *httptest.ResponseRecorder, status int, msg string) {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status %d, want %d; body %s", rec.Code, status, rec.Body)
	}
	var got map[string]any
	decodeJSON(t, rec.Body.Bytes(), &got)
	if got["success"] != false || got["error"] != msg {
		t.Fatalf("body %s, want success false and error %q", rec.Body, msg)
	}
	for k := range got {
		if k != "success" && k != "error" && k != "hint" && k != "code" && k != "request_id" {
			t.Errorf("error body has unexpected key %q: %s", k, rec.Body)
		}
	}
	if code, _ := got["code"].(string); !knownCode(code) {
		t.Errorf("error body has code %q, not one of the Code constants: %s", got["code"], rec.Body)
	}
	if gotID, _ := got["request_id"].(string); gotID != rec.Header().Get(RequestIDHeader) {
		t.Errorf("error body has request_id %q, header %s %q", gotID, RequestIDHeader, rec.Header().Get(RequestIDHeader))
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
}

// knownCode reports whether c is one of the Code constants.
func knownCode(c string) bool {
	switch c {
	case CodeInvalidBatch, CodeInvalidRequest, CodeUnauthorized, CodeForbidden, CodeNotFound,
		CodeMethodNotAllowed, CodeTimeout, CodeJobFinished, CodeJobLive, CodeNothingToRetry, CodeBodyTooLarge,
		CodeBlocked, CodeInvalidOption, CodeWebhooksDisabled, CodeTooManyTargets, CodeResultsTooLarge, CodeCallerBusy, CodeJobsBusy,
		CodeResultsBusy, CodeWebhooksBusy, CodeWaitsBusy, CodeStreamsBusy, CodeSubmitsBusy, CodeInternal, CodeUnavailable,
		CodeDeadlineTooFar:
		return true
	}
	return false
}

// goldenHeaders are the headers a golden file records.
var goldenHeaders = []string{"Allow", "Cache-Control", "Content-Type", "Retry-After", "Www-Authenticate", "X-Request-Id"}

// checkGolden compares the answer (status, the goldenHeaders, the body) with
// testdata/<test name>.json, after replacing each of ids with "<id-N>". Run
// the tests with -update to rewrite the files.
func checkGolden(t *testing.T, rec *httptest.ResponseRecorder, ids ...string) {
	t.Helper()
	body := rec.Body.String()
	for i, id := range ids {
		body = strings.ReplaceAll(body, id, "<id-"+strconv.Itoa(i)+">")
	}
	headers := map[string]string{}
	for _, h := range goldenHeaders {
		if v := rec.Header().Get(h); v != "" {
			headers[h] = v
		}
	}
	hj, _ := json.Marshal(headers)
	raw := `{"status":` + strconv.Itoa(rec.Code) + `,"headers":` + string(hj) + `,"body":` + body + `}`
	var got bytes.Buffer
	if err := json.Indent(&got, []byte(raw), "", "  "); err != nil {
		t.Fatalf("answer is not JSON: %v\n%s", err, raw)
	}
	got.WriteByte('\n')
	path := filepath.Join("testdata", filepath.FromSlash(t.Name())+".json")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run with -update to create it): %v", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("answer differs from %s:\ngot:\n%s\nwant:\n%s", path, got.Bytes(), want)
	}
}

// logBuffer collects log output; safe for concurrent use.
type logBuffer struct{ batchtest.Buffer }

// lines returns every JSON log record written so far.
func (l *logBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(l.String()) {
		var m map[string]any
		decodeJSON(t, []byte(line), &m)
		out = append(out, m)
	}
	return out
}

// observations records what an ObserveFunc was given.
type observations struct {
	mu   sync.Mutex
	list []observation
}

type observation struct {
	route  string
	status int
	d      time.Duration
}

func (o *observations) observe(route string, status int, d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.list = append(o.list, observation{route, status, d})
}

func (o *observations) all() []observation {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]observation(nil), o.list...)
}
