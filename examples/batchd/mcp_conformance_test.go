package main

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The conformance CLI's server scenarios that apply to batchd's MCP
// server, run by TestBatchd_MCPConformance. Those of
// @modelcontextprotocol/conformance 0.1.16 that do not apply, and why:
//
//   - logging-set-level: batchd declares no logging capability.
//   - prompts-list, prompts-get-simple, -with-args, -embedded-resource, -with-image: batchd has no prompts.
//   - completion-complete: batchd has no completions (it needs the suite's prompt test_prompt_with_arguments).
//   - tools-call-simple-text, -image, -audio, -embedded-resource, -mixed-content, -error: they call the suite's own test_* tools.
//   - tools-call-with-logging, -with-progress: the suite's tools, and a stateless JSON server sends no in-request notifications.
//   - tools-call-sampling, -elicitation, elicitation-sep1034-defaults, -sep1330-enums: server-to-client requests, impossible when stateless.
//   - json-schema-2020-12 (pending): it calls the suite's tool json_schema_2020_12_tool.
//   - server-sse-polling (pending), server-sse-multiple-streams: they need a session id and SSE; batchd is stateless and answers JSON.
//   - resources-read-text, -binary: they read the suite's test://static-* resources; batchd has no static resources.
//   - resources-templates-read: it reads the suite's template test://template/{id}/data; batchd's is batch://{job_id}/{idx}.
//   - resources-subscribe, -unsubscribe: batchd has no resource subscriptions.
var mcpScenarios = []string{
	"server-initialize",
	"ping",
	"tools-list",
	"resources-list",
	"dns-rebinding-protection", // the URL must be a loopback one: the proxy below listens on 127.0.0.1
}

// conformanceEnv finds node 22 ($BATCHKIT_NODE22) and npm's
// @modelcontextprotocol/conformance (in the node_modules directory
// $BATCHKIT_MCP_NODE_DIR). It skips when one is missing, and fails
// instead under CI=true, where .ci/run installs them.
func conformanceEnv(t *testing.T) (node, cli string) {
	t.Helper()
	missing := func(what string) {
		t.Helper()
		msg := what + " (.ci/run installs @modelcontextprotocol/conformance and npm's node@22 with npm, " +
			"and sets $BATCHKIT_MCP_NODE_DIR and $BATCHKIT_NODE22)"
		if os.Getenv("CI") == "true" {
			t.Fatal("the MCP conformance test needs " + msg)
		}
		t.Skip("needs " + msg)
	}
	node = os.Getenv("BATCHKIT_NODE22")
	if node == "" {
		missing("node 22 in $BATCHKIT_NODE22")
	}
	out, err := exec.Command(node, "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "v22.") {
		missing("node 22 in $BATCHKIT_NODE22 (" + node + ": " + strings.TrimSpace(string(out)) + ")")
	}
	modules := os.Getenv("BATCHKIT_MCP_NODE_DIR")
	if modules == "" {
		missing("$BATCHKIT_MCP_NODE_DIR")
	}
	cli = filepath.Join(modules, "@modelcontextprotocol", "conformance", "dist", "index.js")
	b, err := os.ReadFile(filepath.Join(modules, "@modelcontextprotocol", "conformance", "package.json"))
	var pkg struct {
		Version string `json:"version"`
	}
	if err != nil || json.Unmarshal(b, &pkg) != nil {
		missing("the npm package @modelcontextprotocol/conformance in " + modules)
	}
	if _, err := os.Stat(cli); err != nil {
		missing(cli)
	}
	t.Logf("node %s (%s), @modelcontextprotocol/conformance %s", node, strings.TrimSpace(string(out)), pkg.Version)
	return node, cli
}

// startKeyProxy serves, on 127.0.0.1, a reverse proxy to server that adds
// the bearer key to every request and keeps the request's Host header:
// the conformance CLI cannot send a header, and the DNS rebinding
// scenario needs its forged Host to reach the server.
func startKeyProxy(t *testing.T, server, key string) string {
	t.Helper()
	target, err := url.Parse(server)
	if err != nil {
		t.Fatal(err)
	}
	p := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Host = r.In.Host
		r.Out.Header.Set("Authorization", "Bearer "+key)
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// ansiColour matches the colour codes the CLI writes whatever its output
// is (it honours no NO_COLOR).
var ansiColour = regexp.MustCompile(`\x1b\[[0-9;]*m`)

// conformanceCheck is one check of the CLI's checks.json.
type conformanceCheck struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	Status       string `json:"status"` // SUCCESS, FAILURE, WARNING or INFO
	ErrorMessage string `json:"errorMessage"`
}

// TestBatchd_MCPConformance runs the applicable server scenarios of npm's
// MCP conformance suite against a running batchd's /mcp, through a proxy
// that adds a caller's key: each must exit 0 with at least one SUCCESS
// and no FAILURE or WARNING in its checks.json. The CLI's output is
// logged only when a scenario fails: its closing "Total: N passed" line
// is not the test's.
func TestBatchd_MCPConformance(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the daemon and the conformance CLI")
	}
	node, cli := conformanceEnv(t)
	bin := buildDaemon(t)
	d := startDaemon(t, bin, "-db", filepath.Join(t.TempDir(), "batchd.db"), "-key", "alice=alice-secret-0123")
	mcpURL := startKeyProxy(t, d.server, "alice-secret-0123") + "/mcp"

	for _, sc := range mcpScenarios {
		t.Run(sc, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cmd := exec.CommandContext(t.Context(), node, cli, "server", "--url", mcpURL, "--scenario", sc, "-o", dir)
			cmd.WaitDelay = 10 * time.Second
			start := time.Now()
			out, err := cmd.CombinedOutput()
			fail := func(format string, args ...any) {
				t.Helper()
				t.Logf("conformance CLI, scenario %s (%v):\n%s", sc, time.Since(start).Round(time.Millisecond), ansiColour.ReplaceAll(out, nil))
				t.Fatalf(format, args...)
			}
			if err != nil {
				fail("scenario %s: %v\ndaemon log:\n%s", sc, err, d.stderr)
			}
			files, _ := filepath.Glob(filepath.Join(dir, "*", "checks.json"))
			if len(files) != 1 {
				fail("scenario %s: want one checks.json under %s, found %v", sc, dir, files)
			}
			b, err := os.ReadFile(files[0])
			if err != nil {
				fail("%v", err)
			}
			var checks []conformanceCheck
			if err := json.Unmarshal(b, &checks); err != nil {
				fail("scenario %s: %v in %s", sc, err, b)
			}
			passed := 0
			var bad []string
			for _, c := range checks {
				switch c.Status {
				case "SUCCESS":
					passed++
				case "FAILURE", "WARNING":
					bad = append(bad, c.Status+" "+c.ID+": "+c.Name+": "+c.ErrorMessage)
				}
			}
			if passed == 0 || len(bad) > 0 {
				fail("scenario %s: %d checks passed; want 1 or more, and no failure or warning:\n%s",
					sc, passed, strings.Join(bad, "\n"))
			}
			t.Logf("scenario %s: %d of %d checks passed (%v)", sc, passed, len(checks), time.Since(start).Round(time.Millisecond))
		})
	}
}
