package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/batchstore"
	"github.com/siftfetch/batchkit/examples/internal/testbin"
)

// raceEnabled is set when the test binary is built with -race, so the
// program is built the same way.
var raceEnabled bool

// marker is in every page path, so that a log line carrying a target URL
// shows.
const marker = "secret-path-4d1f"

// host is a running embed process.
type host struct {
	cmd    *exec.Cmd
	url    string
	logs   *logTail
	done   chan error
	pages  string // the page server's address
	dbPath string
	slow   chan struct{} // a request to /slow arrived
	freed  chan struct{} // closed to let /slow answer
}

// logTail collects the process's stderr.
type logTail struct {
	mu    sync.Mutex
	all   strings.Builder
	ended chan struct{} // closed once stderr is read to its end
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.all.String()
}

func startHost(t *testing.T) *host {
	t.Helper()
	h := &host{slow: make(chan struct{}, 4), freed: make(chan struct{}), done: make(chan error, 1)}
	pages := http.NewServeMux()
	pages.HandleFunc("GET /"+marker+"/{n}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "page %s", r.PathValue("n"))
	})
	pages.HandleFunc("GET /"+marker+"/slow", func(w http.ResponseWriter, r *http.Request) {
		h.slow <- struct{}{}
		select {
		case <-h.freed:
		case <-r.Context().Done():
		}
	})
	pln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	psrv := &http.Server{Handler: pages, ReadHeaderTimeout: 5 * time.Second}
	go psrv.Serve(pln)
	t.Cleanup(func() { close(h.freed); psrv.Close() })
	h.pages = pln.Addr().String()

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "keys"), []byte("alice=alice-key-0123456789\nbob=bob-key-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.dbPath = filepath.Join(dir, "embed.db")
	conf := fmt.Sprintf(`[server]
addr = "127.0.0.1:0"
db = %q

[auth]
keys_file = %q

[fetch]
allow = [%q]

[batch]
targets_per_job = 2
ttl = "2h"
target_timeout = "30s"
`, h.dbPath, filepath.Join(dir, "keys"), h.pages)
	confPath := filepath.Join(dir, "embed.toml")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	h.cmd = exec.Command(testbin.Build(t, "embed", raceEnabled), "-config", confPath)
	stderr, err := h.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h.logs = &logTail{ended: make(chan struct{})}
	serving := make(chan string, 1)
	go func() {
		defer close(h.logs.ended)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			h.logs.mu.Lock()
			h.logs.all.WriteString(sc.Text() + "\n")
			h.logs.mu.Unlock()
			if _, addr, ok := strings.Cut(sc.Text(), "msg=\"embed serving\" addr="); ok {
				serving <- addr
			}
		}
	}()
	go func() { h.done <- h.cmd.Wait() }()
	t.Cleanup(func() {
		h.cmd.Process.Kill()
		<-h.done
		h.done <- nil
	})
	select {
	case addr := <-serving:
		h.url = "http://" + addr
	case <-h.logs.ended:
		t.Fatalf("embed did not start:\n%s", h.logs)
	case <-time.After(60 * time.Second):
		t.Fatalf("embed did not start within 60s:\n%s", h.logs)
	}
	return h
}

func (h *host) do(t *testing.T, method, path, key, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, h.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (h *host) page(n string) string { return "http://" + h.pages + "/" + marker + "/" + n }

// stop sends SIGTERM and waits, at most 10s, for the process to exit 0.
func (h *host) stop(t *testing.T) {
	t.Helper()
	if err := h.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-h.done:
		h.done <- err
		if err != nil {
			t.Fatalf("embed exited with %v after SIGTERM\n%s", err, h.logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("embed did not exit within 10s of SIGTERM")
	}
}

// TestEmbed_BlackBox runs the built program on a configuration file, as a
// person would, and drives it over HTTP only (the host kit's acceptance).
func TestEmbed_BlackBox(t *testing.T) {
	t.Parallel()
	h := startHost(t)
	if code, body := h.do(t, http.MethodGet, "/readyz", "", ""); code != http.StatusOK {
		t.Errorf("readyz: %d %s", code, body)
	}
	if code, body := h.do(t, http.MethodGet, "/v1/batch", "", ""); code != http.StatusUnauthorized || !strings.Contains(body, `"code":"unauthorized"`) {
		t.Errorf("no key: %d %s", code, body)
	}
	if code, _ := h.do(t, http.MethodGet, "/v1/fetch?url="+h.page("1"), "", ""); code != http.StatusUnauthorized {
		t.Errorf("/v1/fetch without a key: %d", code)
	}
	three := fmt.Sprintf(`{"targets":[{"url":%q},{"url":%q},{"url":%q}]}`, h.page("1"), h.page("2"), h.page("3"))
	if code, body := h.do(t, http.MethodPost, "/v1/batch", "alice-key-0123456789", three); code != http.StatusUnprocessableEntity || !strings.Contains(body, `"code":"too_many_targets"`) {
		t.Errorf("3 targets with targets_per_job = 2: %d %s", code, body)
	}

	code, body := h.do(t, http.MethodPost, "/v1/batch", "alice-key-0123456789", fmt.Sprintf(`{"targets":[{"url":%q},{"url":%q}]}`, h.page("1"), h.page("2")))
	if code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", code, body)
	}
	var sub batchhttp.SubmitResponse
	if err := json.Unmarshal([]byte(body), &sub); err != nil {
		t.Fatal(err)
	}
	var st batchhttp.StatusResponse
	for range 10 { // each long-poll answers when a target finishes, or after 10s
		code, body = h.do(t, http.MethodGet, fmt.Sprintf("/v1/batch/%s?wait=10s&since=%d", sub.JobID, st.TargetsDone), "alice-key-0123456789", "")
		if err := json.Unmarshal([]byte(body), &st); code != http.StatusOK || err != nil {
			t.Fatalf("status: %d %s", code, body)
		}
		if st.Status.Finished() {
			break
		}
	}
	if st.Status != batch.JobDone || st.TargetsDone != 2 {
		t.Fatalf("job ended %s with %d done: %s", st.Status, st.TargetsDone, body)
	}
	if d := time.Until(st.ExpiresAt) - 2*time.Hour; d < -time.Minute || d > time.Minute {
		t.Errorf("expires_at %s is %s off the ttl (2h) from now", st.ExpiresAt, d)
	}
	if code, body := h.do(t, http.MethodGet, "/v1/batch/"+sub.JobID+"/1", "alice-key-0123456789", ""); code != http.StatusOK || !strings.Contains(body, `page 2`) {
		t.Errorf("result 1: %d %s", code, body)
	}

	if code, body := h.do(t, http.MethodGet, "/v1/fetch?url="+h.page("7"), "alice-key-0123456789", ""); code != http.StatusOK || body != "page 7" {
		t.Errorf("/v1/fetch: %d %q, want the page", code, body)
	}
	if code, body := h.do(t, http.MethodGet, "/v1/fetch?url=http://10.0.0.1/", "alice-key-0123456789", ""); code != http.StatusUnprocessableEntity || !strings.Contains(body, "blocked: private address") {
		t.Errorf("/v1/fetch of a private address: %d %s", code, body)
	}

	if code, _ := h.do(t, http.MethodGet, "/metrics", "", ""); code != http.StatusUnauthorized {
		t.Errorf("/metrics without a key: %d", code)
	}
	code, metrics := h.do(t, http.MethodGet, "/metrics", "alice-key-0123456789", "")
	for _, want := range []string{
		"# HELP batch_targets_total Batch targets fetched, by outcome.",
		"# TYPE batch_targets_total counter",
		`batch_targets_total{outcome="ok"} 2`,
		`embed_http_requests_total{route="/v1/fetch",status="200"} 1`,
		`embed_http_requests_total{route="/v1/batch",status="202"} 1`,
		"# TYPE embed_http_request_seconds histogram",
	} {
		if code != http.StatusOK || !strings.Contains(metrics, want) {
			t.Errorf("/metrics (%d) lacks %q", code, want)
		}
	}

	// A job mid-target at SIGTERM: the process exits 0 within 10s and the
	// job is not left running.
	code, body = h.do(t, http.MethodPost, "/v1/batch", "alice-key-0123456789", fmt.Sprintf(`{"targets":[{"url":%q},{"url":%q}]}`, h.page("slow"), h.page("3")))
	if code != http.StatusAccepted {
		t.Fatalf("submit of the slow job: %d %s", code, body)
	}
	var slow batchhttp.SubmitResponse
	if err := json.Unmarshal([]byte(body), &slow); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.slow:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow target was not fetched")
	}
	h.stop(t)
	store, err := batchstore.Open(t.Context(), h.dbPath, batchstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	job, _, err := store.Get(t.Context(), batchdriver.GetParams{Caller: "alice", JobID: slow.JobID, JobOnly: true})
	if err != nil || job.Status != batch.JobFailed || job.Error != "restart" {
		t.Errorf("the job in flight at SIGTERM: %s (%q), %v; want failed as restart", job.Status, job.Error, err)
	}
	<-h.logs.ended
	if logs := h.logs.String(); strings.Contains(logs, marker) || strings.Contains(logs, h.pages) {
		t.Errorf("a log line carries a target URL or host:\n%s", logs)
	}
}
