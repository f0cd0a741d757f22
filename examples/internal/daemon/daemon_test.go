package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/batchhttp/batchserver"
	"github.com/siftfetch/batchkit/batchstore"
)

func openTest(t *testing.T, cfg Config) *httptest.Server {
	t.Helper()
	_, srv := openDaemon(t, cfg)
	return srv
}

// testConfig is cfg with the tests' defaults: a database in the test's
// directory, and alice's key.
func testConfig(t *testing.T, cfg Config) Config {
	if cfg.DB == "" {
		cfg.DB = filepath.Join(t.TempDir(), "d.db")
	}
	if cfg.Keys == nil {
		cfg.Keys = []batchserver.Key{{Name: "alice", Secret: "alice-key"}}
	}
	return cfg
}

// openDaemon opens a daemon on cfg (a new SQLite file and alice's key by
// default) and serves it; the cleanup closes both. An error of Close fails
// the test unless the test closed the store itself.
func openDaemon(t *testing.T, cfg Config) (*Daemon, *httptest.Server) {
	t.Helper()
	d, err := Open(t.Context(), testConfig(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.Close(ctx); err != nil && !errors.Is(err, batchstore.ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return d, srv
}

func get(t *testing.T, url, key string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

var sampleLine = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"\n]*"(, ?[a-zA-Z_][a-zA-Z0-9_]*="[^"\n]*")*\})? \S+$`)

func TestDaemon_Metrics(t *testing.T) {
	t.Parallel()
	srv := openTest(t, Config{})
	// One batch request first, so the HTTP series exist.
	if code, _ := get(t, srv.URL+"/v1/batch", "alice-key"); code != http.StatusOK {
		t.Fatalf("list: %d", code)
	}
	code, body := get(t, srv.URL+"/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics = %d", code)
	}
	for _, want := range []string{
		"# HELP batch_jobs_total Batch jobs by outcome",
		"# TYPE batch_jobs_total counter",
		`batch_targets_total{outcome="blocked"} 0`,
		"# TYPE batch_job_seconds histogram",
		`batchd_http_requests_total{route="/v1/batch",status="200"} 1`,
		"go_goroutines ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	helped := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(body), "\n") {
		if name, ok := strings.CutPrefix(line, "# HELP "); ok {
			fam, text, _ := strings.Cut(name, " ")
			if text == "" {
				t.Errorf("family %s has no help text", fam)
			}
			helped[fam] = true
			continue
		}
		if strings.HasPrefix(line, "# TYPE ") {
			continue
		}
		if !sampleLine.MatchString(line) {
			t.Errorf("not Prometheus text: %q", line)
		}
	}
	if len(helped) < 10 {
		t.Errorf("only %d families have # HELP", len(helped))
	}
	promtool(t, body)
}

// promtool lints the exposition with `promtool check metrics` (Debian's
// prometheus package). CI installs it; elsewhere the lint is skipped.
func promtool(t *testing.T, body string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool is not installed; .ci/run installs Debian's prometheus package")
		}
		t.Log("promtool not installed: lint skipped")
		return
	}
	cmd := exec.CommandContext(t.Context(), path, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || out.Len() > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out.String())
	}
}

func TestDaemon_MetricsKeyAndHealth(t *testing.T) {
	t.Parallel()
	srv := openTest(t, Config{MetricsKey: "m-key"})
	if code, _ := get(t, srv.URL+"/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("metrics without key = %d, want 401", code)
	}
	if code, _ := get(t, srv.URL+"/metrics", "wrong"); code != http.StatusUnauthorized {
		t.Errorf("metrics with a wrong key = %d, want 401", code)
	}
	if code, _ := get(t, srv.URL+"/metrics", "m-key"); code != http.StatusOK {
		t.Errorf("metrics with the key = %d, want 200", code)
	}
	if code, body := get(t, srv.URL+"/healthz", ""); code != http.StatusOK || !strings.Contains(body, `"ok":true`) {
		t.Errorf("healthz = %d %s", code, body)
	}
	if code, body := get(t, srv.URL+"/nope", ""); code != http.StatusNotFound || !strings.Contains(body, `"success":false`) {
		t.Errorf("unknown path = %d %s", code, body)
	}
}

// The API's OpenAPI document is served without a key, as JSON, with a
// request id, and is the one batchhttp embeds.
func TestDaemon_OpenAPI(t *testing.T) {
	t.Parallel()
	srv := openTest(t, Config{})
	resp, err := http.Get(srv.URL + batchhttp.OpenAPIPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" ||
		!batchhttp.ValidRequestID(resp.Header.Get(batchhttp.RequestIDHeader)) || !bytes.Equal(body, batchhttp.OpenAPI(batchsift.Options)) {
		t.Fatalf("GET %s = %d, headers %v, %d bytes; want 200 and the document", batchhttp.OpenAPIPath, resp.StatusCode, resp.Header, len(body))
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+batchhttp.OpenAPIPath, nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST %s = %d, Allow %q; want 405 with GET, HEAD", batchhttp.OpenAPIPath, resp.StatusCode, resp.Header.Get("Allow"))
	}
}

func TestOpen_Errors(t *testing.T) {
	t.Parallel()
	if _, err := Open(t.Context(), Config{DB: filepath.Join(t.TempDir(), "x.db")}); err == nil {
		t.Error("Open without keys succeeded")
	}
	bad := filepath.Join(t.TempDir(), "junk.db")
	if err := os.WriteFile(bad, bytes.Repeat([]byte("junk"), 1024), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(t.Context(), Config{DB: bad, Keys: []batchserver.Key{{Name: "a", Secret: "b"}}}); err == nil {
		t.Error("Open on a junk file succeeded")
	}
}

func TestDaemon_ShutdownEndsLongPolls(t *testing.T) {
	t.Parallel()
	// A page server that accepts and never answers, so the job stays running.
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hang.Close() })
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	d, err := Open(t.Context(), Config{
		DB:    filepath.Join(t.TempDir(), "d.db"),
		Keys:  []batchserver.Key{{Name: "alice", Secret: "alice-key"}},
		Allow: []string{hang.Addr().String()},
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.Serve(ctx, ln, 30*time.Second) }()
	client, _ := batchhttp.NewClient("http://"+ln.Addr().String(), "alice-key", nil)
	sub, err := client.Submit(t.Context(), []batch.Target{{URL: "http://" + hang.Addr().String() + "/"}})
	if err != nil {
		t.Fatal(err)
	}
	conn := <-accepted // the fetch is in flight
	defer conn.Close()
	polled := make(chan batchhttp.StatusResponse, 1)
	go func() {
		st, err := client.Status(context.Background(), sub.JobID, batchhttp.StatusQuery{Wait: time.Minute, Since: new(int)})
		if err != nil {
			t.Errorf("long-poll: %v", err)
		}
		polled <- st
	}()
	time.Sleep(200 * time.Millisecond) // the long-poll is waiting
	start := time.Now()
	stop()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("shutdown waited for the long-poll")
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("shutdown took %s", took)
	}
	// The answer is the job as it stood when the wait ended: still running,
	// or already failed by the shutdown (Close fails the jobs it holds).
	st := <-polled
	running := st.Status == batch.JobRunning && st.TargetsDone == 0
	failed := st.Status == batch.JobFailed && st.Error == "restart"
	if !running && !failed {
		t.Errorf("the long-poll answered %+v, want the job running, or failed by the shutdown", st)
	}
}

// A PostgreSQL URL is shown without its user information or parameters,
// where a password may be.
func TestDescribeDB(t *testing.T) {
	t.Parallel()
	for db, want := range map[string]string{
		"batchkit.db": "batchkit.db",
		"postgres://bob:hunter2@db.internal:5432/jobs?sslmode=require&password=x": "postgres://db.internal:5432/jobs",
		"postgresql://db/jobs": "postgresql://db/jobs",
		"postgres://%zz":       "a PostgreSQL database (unparsable URL)",
		// Passwords with characters that should have been escaped.
		"postgres://bob:hun@ter2@db.internal/jobs":     "postgres://db.internal/jobs",
		"postgres://bob:1234/hunter2@db.internal/jobs": "postgres://db.internal/jobs",
		"postgres://bob:12#hunter2@db.internal/jobs":   "postgres://db.internal/jobs",
		"postgres://bob:12?hunter2@db.internal/jobs":   "postgres://db.internal/jobs",
		// A libpq keyword/value string is not shown at all.
		"host=db.internal password=hunter2 dbname=jobs": "a PostgreSQL keyword/value connection string (not shown)",
	} {
		if got := DescribeDB(db); got != want {
			t.Errorf("DescribeDB(%q) = %q, want %q", db, got, want)
		}
	}
}

// A password in a -db URL is found wherever it is, so that batchd can warn.
func TestDBHasPassword(t *testing.T) {
	t.Parallel()
	for db, want := range map[string]bool{
		"batchkit.db":                                     false,
		"postgres://db.internal/jobs":                     false,
		"postgres://bob@db.internal/jobs":                 false,
		"postgres://bob:hunter2@db.internal/jobs":         true,
		"postgres://bob:1234/x@db.internal/jobs":          true,
		"postgres://db.internal/jobs?password=x":          true,
		"postgresql://db/jobs?sslmode=require&password=x": true,
	} {
		if got := DBHasPassword(db); got != want {
			t.Errorf("DBHasPassword(%q) = %v, want %v", db, got, want)
		}
	}
}

func TestDaemon_Readyz(t *testing.T) {
	t.Parallel()
	d, srv := openDaemon(t, Config{})
	probe := func(path string) *http.Response {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for _, path := range []string{"/readyz", "/healthz", "/nope"} {
		if id := probe(path).Header.Get(batchhttp.RequestIDHeader); !batchhttp.ValidRequestID(id) {
			t.Errorf("%s: %s %q, want a request id on every answer", path, batchhttp.RequestIDHeader, id)
		}
	}
	if resp := probe("/readyz"); resp.StatusCode != http.StatusOK {
		t.Fatalf("readyz with a working store = %d, want 200", resp.StatusCode)
	}
	if err := d.store.Close(); err != nil {
		t.Fatal(err)
	}
	resp := probe("/readyz")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("readyz with a closed store = %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if resp := probe("/healthz"); resp.StatusCode != http.StatusOK {
		t.Errorf("healthz with a closed store = %d, want 200: the process still answers", resp.StatusCode)
	}
}

// A local URL refused at submit says how to allow a local test server;
// a URL refused for another reason gets no such hint.
func TestDaemon_AllowHint(t *testing.T) {
	t.Parallel()
	srv := openTest(t, Config{})
	submit := func(url string) batchhttp.ErrorResponse {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/batch",
			strings.NewReader(`{"targets":[{"url":"`+url+`"}]}`))
		req.Header.Set("Authorization", "Bearer alice-key")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e batchhttp.ErrorResponse
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("submit of %s: %d, %v", url, resp.StatusCode, err)
		}
		return e
	}
	for _, u := range []string{"http://127.0.0.1:8709/secret", "http://10.0.0.1/", "http://example.com:8080/", "http://localhost/"} {
		if e := submit(u); e.Code != batchhttp.CodeBlocked || !strings.Contains(e.Hint, "-allow HOST:PORT") {
			t.Errorf("submit of %s: %+v, want blocked with the -allow hint", u, e)
		}
	}
	if e := submit("ftp://example.com/"); e.Code != batchhttp.CodeBlocked || e.Hint != "" {
		t.Errorf("submit of an ftp URL: %+v, want blocked without a hint", e)
	}
}

// A grep pattern over the fetcher's limits is refused at submit with 422
// invalid_option and a hint, and no job is made; one within them is taken.
func TestDaemon_GrepLimits(t *testing.T) {
	t.Parallel()
	srv := openTest(t, Config{})
	submit := func(grep string) (int, batchhttp.ErrorResponse) {
		t.Helper()
		body, _ := json.Marshal(batchhttp.SubmitRequest{Targets: []batch.Target{{URL: "https://example.com/", Options: batchsift.Fields{Grep: grep}.JSON()}}})
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/batch", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer alice-key")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e batchhttp.ErrorResponse
		json.NewDecoder(resp.Body).Decode(&e)
		return resp.StatusCode, e
	}
	for _, c := range []struct{ grep, msg string }{
		{strings.Repeat("[a-z\u0100]{1000}X|", 70) + "X", "invalid option: target 0: grep pattern too large: 1051 bytes (max 1024)"},
		{strings.Repeat("[a-z]{1000}X|", 2) + "X", "invalid option: target 0: grep pattern too complex: its program is over 1000 instructions"},
	} {
		code, e := submit(c.grep)
		if code != http.StatusUnprocessableEntity || e.Code != batchhttp.CodeInvalidOption || e.Error != c.msg || e.Hint == "" {
			t.Errorf("submit of a %d-byte pattern: %d %+v, want 422 %s %q with a hint", len(c.grep), code, e, batchhttp.CodeInvalidOption, c.msg)
		}
	}
	if code, body := get(t, srv.URL+"/v1/batch", "alice-key"); code != http.StatusOK || !strings.Contains(body, `"jobs":[]`) {
		t.Errorf("list after the refusals: %d %s, want no job", code, body)
	}
	if code, e := submit(`(?i)price|cost`); code != http.StatusAccepted {
		t.Errorf("submit of a small pattern: %d %+v, want 202", code, e)
	}
}
