package batchmcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/batchhttp/batchserver"
	"github.com/siftfetch/batchkit/batchmcp"
	"github.com/siftfetch/batchkit/internal/conntest"
)

// Test keys: alice and bob are plain callers, rita is restricted.
const (
	keyAlice = "alice-key"
	keyBob   = "bob-key"
	keyRita  = "rita-key"
)

// env is one runner over an in-memory store, served over HTTP at
// /v1/batch and over MCP at /mcp, with the same callers.
type env struct {
	t       *testing.T
	runner  *batch.Runner
	srv     *httptest.Server
	logs    *batchtest.Buffer
	metrics *metrics.Set
}

// newEnv starts an env whose runner fetches with fetch and whose MCP
// handler is configured by cfg (Runner and Authenticate are filled in).
func newEnv(t *testing.T, fetch batch.FetchFunc, cfg batchmcp.Config) *env {
	t.Helper()
	return newEnvRunner(t, batch.Config{Fetch: fetch}, cfg)
}

// newEnvRunner is newEnv with more of the runner's config: rc's Options
// and TargetsPerJob are newEnv's.
func newEnvRunner(t *testing.T, rc batch.Config, cfg batchmcp.Config) *env {
	t.Helper()
	e := &env{t: t, logs: &batchtest.Buffer{}, metrics: metrics.NewSet()}
	rc.Options, rc.TargetsPerJob = batchsift.Options, 8
	e.runner = batchtest.NewRunner(t, rc)
	auth, err := batchserver.NewKeyAuth([]batchserver.Key{
		{Name: "alice", Secret: keyAlice}, {Name: "bob", Secret: keyBob}, {Name: "rita", Secret: keyRita, Restricted: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	api, err := batchhttp.NewHandler(e.runner, &batchhttp.HandlerConfig{Authenticate: auth})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Runner, cfg.Authenticate = e.runner, auth
	cfg.Logger = slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if cfg.Metrics == nil {
		cfg.Metrics = e.metrics
	}
	h, err := batchmcp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	api.Mount(mux)
	mux.Handle(batchmcp.Path, h)
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	return e
}

// client connects the Go SDK's client as the caller of key.
func (e *env) client(key string) *mcp.ClientSession {
	e.t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint:   e.srv.URL + batchmcp.Path,
		HTTPClient: &http.Client{Transport: conntest.Bearer{Key: key}},
	}, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool and fails the test on a protocol error.
func call(t *testing.T, cs *mcp.ClientSession, name string, args any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

// decode decodes a tool result's structured output into v; it fails the
// test on a tool error.
func decode(t *testing.T, res *mcp.CallToolResult, v any) {
	t.Helper()
	if res.IsError {
		t.Fatalf("tool error: %s", text(res))
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
}

// text is the first text content of res.
func text(res *mcp.CallToolResult) string {
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			return tc.Text
		}
	}
	return ""
}

// toolError decodes the refusal a tool result with isError carries.
func toolError(t *testing.T, res *mcp.CallToolResult) batchmcp.ToolError {
	t.Helper()
	if !res.IsError {
		t.Fatalf("want a tool error, got %s", text(res))
	}
	var te batchmcp.ToolError
	if err := json.Unmarshal([]byte(text(res)), &te); err != nil {
		t.Fatalf("%v in %q", err, text(res))
	}
	return te
}

// targets is a batch_submit's targets of urls.
func targets(urls ...string) map[string]any {
	list := make([]map[string]any, len(urls))
	for i, u := range urls {
		list[i] = map[string]any{"url": u}
	}
	return map[string]any{"targets": list}
}

// waitDone polls batch_status with wait_seconds until the job finished.
func waitDone(t *testing.T, cs *mcp.ClientSession, id string) batchmcp.StatusOutput {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st batchmcp.StatusOutput
		decode(t, call(t, cs, "batch_status", map[string]any{"job_id": id, "wait_seconds": 5}), &st)
		if st.Status.Finished() {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %s", id, st.Status)
		}
	}
}

// httpGet reads path of the HTTP API as the caller of key.
func (e *env) httpGet(path, key string) (int, []byte) {
	e.t.Helper()
	return e.httpDo(http.MethodGet, path, key)
}

func (e *env) httpDo(method, path, key string) (int, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, b
}

// rpc is a raw JSON-RPC client of /mcp, for what the Go SDK's client does
// not speak: the task methods.
type rpc struct {
	t        *testing.T
	url, key string
	version  string // "2026-07-28" or "2025-11-25"
	declare  bool   // declare the tasks extension on each request
	id       int
}

// rpcReply is a JSON-RPC answer.
type rpcReply struct {
	Status int
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int64           `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
	Raw []byte
}

func (e *env) rpc(key, version string, declare bool) *rpc {
	return &rpc{t: e.t, url: e.srv.URL + batchmcp.Path, key: key, version: version, declare: declare}
}

// do sends method with params (a JSON object, or nil) and returns the
// answer.
func (c *rpc) do(method string, params map[string]any) rpcReply {
	c.t.Helper()
	c.id++
	if params == nil {
		params = map[string]any{}
	}
	name := ""
	if c.version >= "2026-07-28" {
		caps := map[string]any{}
		if c.declare {
			caps["extensions"] = map[string]any{batchmcp.TasksExtension: map[string]any{}}
		}
		params["_meta"] = map[string]any{
			"io.modelcontextprotocol/protocolVersion":    c.version,
			"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw", "version": "1"},
			"io.modelcontextprotocol/clientCapabilities": caps,
		}
		switch {
		case method == "tools/call":
			name, _ = params["name"].(string)
		case strings.HasPrefix(method, "tasks/"):
			name, _ = params["taskId"].(string)
		case method == "resources/read":
			name, _ = params["uri"].(string)
		}
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": c.id, "method": method, "params": params})
	if err != nil {
		c.t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+c.key)
	if method != "initialize" {
		req.Header.Set("MCP-Protocol-Version", c.version)
	}
	if c.version >= "2026-07-28" {
		req.Header.Set("Mcp-Method", method)
		if name != "" {
			req.Header.Set("Mcp-Name", name)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	r := rpcReply{Status: resp.StatusCode, Raw: raw}
	if err := json.Unmarshal(raw, &r); err != nil {
		c.t.Fatalf("%s: %d %q: %v", method, resp.StatusCode, raw, err)
	}
	return r
}

// ok decodes a successful answer's result into v.
func (r rpcReply) ok(t *testing.T, v any) {
	t.Helper()
	if r.Error != nil {
		t.Fatalf("error %d %q data %s", r.Error.Code, r.Error.Message, r.Error.Data)
	}
	if err := json.Unmarshal(r.Result, v); err != nil {
		t.Fatalf("%v in %s", err, r.Result)
	}
}

// itoa is strconv.Itoa, short.
func itoa(i int) string { return strconv.Itoa(i) }
