package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
)

const (
	consoleAdminKey = "admin-key-0123456789abcdef"
	consoleAliceKey = "alice-secret-0123"
)

// markedPages serves target pages under a path that carries a random
// marker: /<marker>/page/<n> answers at once, /<marker>/gate waits until
// /release is hit (or the test ends). No answer of the console may carry
// the marker, nor the server's host:port. /<marker>/utf8 answers
// utf8Page, a few KB of multi-byte UTF-8 text.
type markedPages struct {
	addr, marker string
	once         sync.Once
	gate         chan struct{}
}

func startMarkedPages(t *testing.T) *markedPages {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	p := &markedPages{marker: "urlmarker" + hex.EncodeToString(b), gate: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /"+p.marker+"/page/{n}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "page %s of %s", r.PathValue("n"), p.marker)
	})
	mux.HandleFunc("GET /"+p.marker+"/missing", http.NotFound)
	mux.HandleFunc("GET /"+p.marker+"/utf8", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, utf8Page)
	})
	mux.HandleFunc("GET /"+p.marker+"/gate", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-p.gate:
		case <-r.Context().Done():
		}
		fmt.Fprintf(w, "gate of %s", p.marker)
	})
	mux.HandleFunc("GET /release", func(w http.ResponseWriter, r *http.Request) {
		p.release()
		io.WriteString(w, "released")
	})
	p.addr = serveTest(t, mux, p.release)
	return p
}

// utf8Page is about 6 KB of text whose lines hold two-, three- and
// four-byte characters, so that a page cut at any byte count may fall
// inside one.
var utf8Page = func() string {
	var b strings.Builder
	for i := range 100 {
		fmt.Fprintf(&b, "%03d Grüße aus Köln — 東京の天気は晴れ 🌤️ naïve café ✓\n", i)
	}
	return b.String()
}()

func (p *markedPages) release() { p.once.Do(func() { close(p.gate) }) }

func (p *markedPages) url(path string) string { return "http://" + p.addr + "/" + p.marker + path }

// startConsoleDaemon runs batchd with the console on, a normal caller
// (alice) and a restricted one (partner).
func startConsoleDaemon(t *testing.T, pages *markedPages) *daemonProc {
	t.Helper()
	bin := buildDaemon(t)
	return startDaemon(t, bin, "-db", filepath.Join(t.TempDir(), "batchd.db"),
		"-key", "alice="+consoleAliceKey, "-key", "partnertenant=partner-secret-0123:restricted",
		"-admin-key-file", writeFile(t, consoleAdminKey+"\n", 0o600),
		"-allow", pages.addr, "-heartbeat-interval", "1s", "-stale-after", "10s")
}

// consoleGet fetches path from the daemon with key (as a bearer, if not
// empty) and fails the test if the answer carries a marked URL or the
// pages' host.
func consoleGet(t *testing.T, d *daemonProc, pages *markedPages, path, key string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, d.server+path, nil)
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
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{pages.marker, pages.addr} {
		if strings.Contains(string(body), bad) {
			t.Errorf("GET %s carries %q:\n%s", path, bad, body)
		}
	}
	return resp.StatusCode, string(body)
}

// TestBatchd_Console checks the console of a running batchd over HTTP:
// 401 without the operator key (and with a caller's), 200 HTML that names
// a job submitted a moment before, and no target or webhook URL in any
// answer under /console.
func TestBatchd_Console(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	pages := startMarkedPages(t)
	d := startConsoleDaemon(t, pages)
	for _, key := range []string{"", consoleAliceKey, "wrong-key-0123456789"} {
		if status, _ := consoleGet(t, d, pages, "/console", key); status != http.StatusUnauthorized {
			t.Errorf("GET /console with key %q = %d, want 401", key, status)
		}
	}
	in := pages.url("/page/1") + "\n" + pages.url("/missing") + "\n"
	sub := decodeJSON[batchhttp.SubmitResponse](t, cli(t, d.server, consoleAliceKey, in, "submit", "-"))
	status, body := consoleGet(t, d, pages, "/console", consoleAdminKey)
	if status != http.StatusOK || !strings.Contains(body, sub.JobID) {
		t.Fatalf("GET /console = %d, without job %s:\n%s", status, sub.JobID, body)
	}
	out, stderr, err := runCLI(t.Context(), d.server, consoleAliceKey, "", "status", sub.JobID, "--wait")
	if err == nil { // --wait exits with an error for a partial job
		t.Fatalf("status --wait of a partial job succeeded: %s", stderr)
	}
	done := decodeJSON[batchhttp.StatusResponse](t, out)
	if done.Status != batch.JobPartial {
		t.Fatalf("job = %+v, want partial", done)
	}
	for _, path := range []string{"/console", "/console?fragment=live", "/console/jobs/" + sub.JobID,
		"/console/jobs/" + sub.JobID + "?fragment=live", "/console/assets/console.js", "/console/assets/console.css"} {
		if status, _ := consoleGet(t, d, pages, path, consoleAdminKey); status != http.StatusOK {
			t.Errorf("GET %s = %d", path, status)
		}
	}
	_, job := consoleGet(t, d, pages, "/console/jobs/"+sub.JobID, consoleAdminKey)
	if !strings.Contains(job, "upstream_4xx") || !strings.Contains(job, "partial") {
		t.Errorf("the job page lacks the outcome upstream_4xx or the status partial:\n%s", job)
	}
}

// playwrightEnv finds node, Debian's chromium and npm's playwright-core
// (through NODE_PATH) for the browser test. It skips when one is missing,
// and fails instead under CI=true, where .ci/run installs them.
func playwrightEnv(t *testing.T) (node, chromium string) {
	t.Helper()
	missing := func(what string) {
		t.Helper()
		msg := what + " (.ci/run installs chromium with apt and playwright-core@1.65.1 with npm, and sets NODE_PATH)"
		if os.Getenv("CI") == "true" {
			t.Fatal("the browser test needs " + msg)
		}
		t.Skip("needs " + msg)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node")
	}
	chromium = os.Getenv("BATCHKIT_CHROMIUM")
	if chromium == "" {
		if chromium, err = exec.LookPath("chromium"); err != nil {
			missing("chromium, or its path in $BATCHKIT_CHROMIUM")
		}
	}
	out, err := exec.Command(node, "-e", "console.log(require('playwright-core/package.json').version)").CombinedOutput()
	if err != nil {
		missing("the npm package playwright-core in $NODE_PATH (NODE_PATH=" + os.Getenv("NODE_PATH") + ")")
	}
	t.Logf("node %s, %s, playwright-core %s", node, chromium, strings.TrimSpace(string(out)))
	return node, chromium
}

// TestBatchd_ConsoleInBrowser loads the console of a running batchd in a
// real browser (testdata/console_browser.js drives chromium through
// playwright-core): a job submitted after the page loaded appears, runs and
// ends done without a reload, its link leads to its targets' statuses and
// outcomes, and no page or response carries a target URL's marker or host.
// It saves a screenshot, to $BATCHKIT_CONSOLE_SCREENSHOT if set (the
// docs/console.md's console.png is made so).
func TestBatchd_ConsoleInBrowser(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the daemon and a browser")
	}
	node, chromium := playwrightEnv(t)
	pages := startMarkedPages(t)
	d := startConsoleDaemon(t, pages)
	shot := os.Getenv("BATCHKIT_CONSOLE_SCREENSHOT")
	if shot == "" {
		shot = filepath.Join(t.TempDir(), "console.png")
	} else if shot, _ = filepath.Abs(shot); shot == "" {
		t.Fatal("bad $BATCHKIT_CONSOLE_SCREENSHOT")
	}
	cmd := exec.CommandContext(t.Context(), node, "testdata/console_browser.js")
	cmd.Env = append(os.Environ(),
		"CONSOLE_SERVER="+d.server,
		"CONSOLE_ADMIN_KEY="+consoleAdminKey,
		"CONSOLE_CALLER_KEY="+consoleAliceKey,
		"CONSOLE_RESTRICTED_KEY=partner-secret-0123",
		"CONSOLE_MARKER="+pages.marker,
		"CONSOLE_PAGES="+pages.addr,
		"CONSOLE_TARGET_GATE="+pages.url("/gate"),
		"CONSOLE_TARGET_PAGE="+pages.url("/page/2"),
		"CONSOLE_TARGET_MISSING="+pages.url("/missing"),
		"CONSOLE_RELEASE=http://"+pages.addr+"/release",
		"CONSOLE_CHROMIUM="+chromium,
		"CONSOLE_SCREENSHOT="+shot,
	)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("console_browser.js:\n%s", out)
	if err != nil {
		t.Fatalf("the browser test failed: %v\ndaemon log:\n%s", err, d.stderr)
	}
	fi, err := os.Stat(shot)
	if err != nil || fi.Size() == 0 {
		t.Fatalf("no screenshot at %s: %v", shot, err)
	}
	if !strings.Contains(string(out), "console browser test: ok") {
		t.Fatal("the script ended without its closing line")
	}
}
