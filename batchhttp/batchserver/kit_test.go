package batchserver

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchhttp"
)

type readierFunc func(ctx context.Context) error

func (f readierFunc) Ready(ctx context.Context) error { return f(ctx) }

// wantAPIHeaders checks that rec carries the headers of the API's JSON
// answers: those of an answer written by batchhttp.WriteError.
func wantAPIHeaders(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	api := httptest.NewRecorder()
	batchhttp.WriteError(api, http.StatusServiceUnavailable, batchhttp.CodeUnavailable, "not ready", "")
	for _, name := range []string{"Content-Type", "Cache-Control", "X-Content-Type-Options"} {
		if got, want := rec.Header().Get(name), api.Header().Get(name); got != want {
			t.Errorf("%s %q, want the API's %q", name, got, want)
		}
	}
}

func TestReadyHandler(t *testing.T) {
	t.Parallel()
	f := func(r Readier, wantStatus int) {
		t.Helper()
		rec := httptest.NewRecorder()
		ReadyHandler(r).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if rec.Code != wantStatus || rec.Header().Get(batchhttp.RequestIDHeader) == "" {
			t.Errorf("status %d (request id %q), want %d", rec.Code, rec.Header().Get(batchhttp.RequestIDHeader), wantStatus)
		}
		wantAPIHeaders(t, rec)
		if wantStatus == http.StatusServiceUnavailable && (rec.Header().Get("Retry-After") != "5" || !strings.Contains(rec.Body.String(), `"code":"unavailable"`)) {
			t.Errorf("503 without Retry-After or code: %v %s", rec.Header(), rec.Body)
		}
	}
	f(readierFunc(func(context.Context) error { return nil }), http.StatusOK)
	f(readierFunc(func(context.Context) error { return batch.ErrClosed }), http.StatusServiceUnavailable)
	// A store that does not answer: the check ends at ReadyTimeout.
	var deadline time.Time
	f(readierFunc(func(ctx context.Context) error {
		deadline, _ = ctx.Deadline()
		<-ctx.Done()
		return ctx.Err()
	}), http.StatusServiceUnavailable)
	if d := time.Until(deadline); deadline.IsZero() || d > 0 {
		t.Errorf("the hung check's deadline %v, want one that has passed (ReadyTimeout)", deadline)
	}
	// A real runner: ready once started, not after Close.
	r := batchtest.NewRunner(t, batch.Config{Fetch: batchtest.StaticFetcher("x")})
	f(r, http.StatusOK)
	if err := r.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	f(r, http.StatusServiceUnavailable)

	rec := httptest.NewRecorder()
	HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusOK || rec.Body.String() != "{\"ok\":true}\n" {
		t.Errorf("healthz: %d %q", rec.Code, rec.Body)
	}
	wantAPIHeaders(t, rec)
}

// The metrics endpoint: every family has a # HELP text and a # TYPE before
// its samples, the runner's texts come from MetricsHelp, the HTTP series
// count each route and status, and a key is asked for when set.
func TestMetrics(t *testing.T) {
	t.Parallel()
	auth, err := NewKeyAuth([]Key{{Name: "ops", Secret: "metrics-key"}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMetrics(MetricsConfig{Prefix: "host", Authenticate: auth})
	if err != nil {
		t.Fatal(err)
	}
	r := batchtest.NewRunner(t, batch.Config{Fetch: batchtest.StaticFetcher("x"), MetricsPrefix: "host_batch"})
	m.Add(r.Metrics(), r.MetricsHelp())
	extra := metrics.NewSet()
	extra.NewCounter("host_cache_hits_total").Inc()
	m.Add(extra, map[string]string{"host_cache_hits_total": "Cache hits."})
	m.Observe(batchhttp.RouteJob, 200, time.Millisecond)
	m.Observe(batchhttp.RouteJob, 200, time.Millisecond)
	m.Observe("/v1/fetch", 502, time.Millisecond)

	get := func(key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		rec := httptest.NewRecorder()
		m.ServeHTTP(rec, req)
		return rec
	}
	if rec := get(""); rec.Code != http.StatusUnauthorized {
		t.Errorf("no key: %d", rec.Code)
	}
	if rec := get("wrong"); rec.Code != http.StatusUnauthorized {
		t.Errorf("a wrong key: %d", rec.Code)
	}
	rec := get("metrics-key")
	if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") {
		t.Fatalf("with the key: %d %s", rec.Code, rec.Header().Get("Content-Type"))
	}
	body := rec.Body.String()
	for _, want := range []string{
		"# HELP host_batch_jobs_total Batch jobs by outcome",
		"# TYPE host_batch_jobs_total counter",
		"# HELP host_http_requests_total HTTP requests by fixed route label and status.",
		`host_http_requests_total{route="/v1/batch/{id}",status="200"} 2`,
		`host_http_requests_total{route="/v1/fetch",status="502"} 1`,
		"# TYPE host_http_request_seconds histogram",
		"# HELP host_cache_hits_total Cache hits.",
		"host_cache_hits_total 1",
		"# HELP go_goroutines ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// Every sample's family was described first: HELP, then TYPE.
	described := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		switch f := strings.Fields(line); {
		case strings.HasPrefix(line, "# HELP "):
			if len(f) < 4 {
				t.Errorf("a HELP line without a text: %q", line)
			}
			described[f[2]] = 1
		case strings.HasPrefix(line, "# TYPE "):
			if described[f[2]] != 1 {
				t.Errorf("TYPE before HELP: %q", line)
			}
			described[f[2]] = 2
		default:
			name, _, _ := strings.Cut(f[0], "{")
			fam := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(name, suffix); ok && described[base] == 2 {
					fam = base
				}
			}
			if described[fam] != 2 {
				t.Errorf("sample of an undescribed family: %q", line)
			}
		}
	}
	for fam := range misnamedProcessMetrics {
		if strings.Contains(body, fam) {
			t.Errorf("%s is exposed under a misleading type", fam)
		}
	}
	if _, err := NewMetrics(MetricsConfig{Prefix: "bad-prefix"}); err == nil {
		t.Error("a prefix that is not a metric name was accepted")
	}
	head := httptest.NewRecorder()
	m.ServeHTTP(head, func() *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/metrics", nil)
		r.Header.Set("Authorization", "Bearer metrics-key")
		return r
	}())
	if head.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %d", head.Code)
	}
}

// closer records Runner.Close and what the world looked like then.
type closer struct {
	mu       sync.Mutex
	events   *[]string
	ctxAlive bool
}

func (c *closer) Close(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ctxAlive = ctx.Err() == nil
	*c.events = append(*c.events, "runner closed")
	return nil
}

// Serve shuts down in order: the runner (with a live context, though the
// serving context is done), then the server, which ends a request still in
// flight after Grace by cancelling its context, then AfterShutdown.
func TestServe_ShutdownOrder(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var events []string
	note := func(e string) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
	}
	c := &closer{events: &events}
	inFlight := make(chan struct{})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(inFlight)
		<-r.Context().Done() // a slow host route, say: ends with the base context
		mu.Lock()
		events = append(events, "request ended")
		mu.Unlock()
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() {
		served <- Serve(ctx, ln, ServerConfig{Handler: handler, Runner: c, Grace: 100 * time.Millisecond, AfterShutdown: func() error {
			note("store closed")
			return nil
		}})
	}()
	go http.Get("http://" + ln.Addr().String() + "/stream") // its answer never comes
	<-inFlight
	stop()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return")
	}
	mu.Lock()
	defer mu.Unlock()
	if want := "runner closed,request ended,store closed"; strings.Join(events, ",") != want {
		t.Errorf("shutdown order %q, want %q", events, want)
	}
	if !c.ctxAlive {
		t.Error("Runner.Close got a context that was already done")
	}
}

func TestServe_Errors(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := &closer{events: new([]string)}
	h := http.NotFoundHandler()
	for _, o := range []ServerConfig{
		{Runner: c},
		{Handler: h},
		{Handler: h, Runner: c, Limits: Limits{WriteTimeout: 30 * time.Second}},
		{Handler: h, Runner: c, Limits: Limits{MaxConns: -1}},
		{Handler: h, Runner: c, Grace: -time.Second},
	} {
		if err := Serve(t.Context(), ln, o); err == nil {
			t.Errorf("Serve(%+v) accepted", o)
		}
	}
	if len(*c.events) != 0 {
		t.Errorf("a refused Serve closed the runner: %q", *c.events)
	}
}

// LimitListener holds the connection over its cap in the backlog until one
// closes, and a Close ends a waiting Accept.
func TestLimitListener(t *testing.T) {
	t.Parallel()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := LimitListener(inner, 1)
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	for range 2 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first := <-accepted
	select {
	case <-accepted:
		t.Fatal("a second connection was accepted over the cap of 1")
	case <-time.After(50 * time.Millisecond):
	}
	first.Close()
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting connection was not accepted once the first closed")
	}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	for range accepted {
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v", err)
	}
}

// Add may run while the metrics are written (a runner added late): no
// race, no crash.
func TestMetrics_AddWhileWriting(t *testing.T) {
	t.Parallel()
	m, err := NewMetrics(MetricsConfig{NoProcessMetrics: true})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 500 {
			s := metrics.NewSet()
			name := "late_" + strings.Repeat("x", i%7+1) + "_total"
			s.GetOrCreateCounter(name).Inc()
			m.Add(s, map[string]string{name: "Late."})
		}
	}()
	for range 500 {
		if err := m.WritePrometheus(io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	<-done
}
