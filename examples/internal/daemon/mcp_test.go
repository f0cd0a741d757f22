package daemon

import (
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchmcp"
	"github.com/siftfetch/batchkit/internal/conntest"
)

// post sends body to url with key (none if empty).
func post(t *testing.T, url, key, body string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// The daemon serves the MCP server at /mcp under the callers' keys, and
// its requests are in /metrics: the MCP series under the runner's prefix,
// /mcp's HTTP series under batchd's, each family with its help, as
// promtool wants them. NoMCP turns it off.
func TestDaemon_MCP(t *testing.T) {
	t.Parallel()
	srv := openTest(t, Config{Batch: batch.Config{MetricsPrefix: "sift_batch"}})
	if code := post(t, srv.URL+batchmcp.Path, "", `{"jsonrpc":"2.0","id":1,"method":"ping"}`); code != http.StatusUnauthorized {
		t.Errorf("POST /mcp without a key = %d, want 401", code)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "daemon-test", Version: "1"}, nil)
	s, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint: srv.URL + batchmcp.Path, HTTPClient: &http.Client{Transport: conntest.Bearer{Key: "alice-key"}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tools, err := s.ListTools(t.Context(), nil)
	if err != nil || len(tools.Tools) != 4 {
		t.Fatalf("tools/list: %v, %v", tools, err)
	}
	res, err := s.CallTool(t.Context(), &mcp.CallToolParams{Name: "batch_status", Arguments: map[string]any{"job_id": "no-such-job"}})
	if err != nil || !res.IsError {
		t.Fatalf("batch_status of an unknown job: %+v, %v; want a tool error", res, err)
	}

	code, body := get(t, srv.URL+"/metrics", "")
	for _, want := range []string{
		"# HELP sift_batch_mcp_requests_total MCP requests",
		"# TYPE sift_batch_mcp_requests_total counter",
		`sift_batch_mcp_requests_total{method="tools/list",tool="",result="ok"}`,
		`sift_batch_mcp_requests_total{method="tools/call",tool="batch_status",result="tool_error"} 1`,
		"# HELP sift_batch_mcp_request_seconds MCP request handling time",
		"# TYPE sift_batch_mcp_request_seconds histogram",
		`batchd_http_requests_total{route="/mcp",status="200"}`,
		`batchd_http_requests_total{route="/mcp",status="401"} 1`,
	} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("/metrics (%d) lacks %s", code, want)
		}
	}
	promtool(t, body)

	off := openTest(t, Config{NoMCP: true})
	if code := post(t, off.URL+batchmcp.Path, "alice-key", `{"jsonrpc":"2.0","id":1,"method":"ping"}`); code != http.StatusNotFound {
		t.Errorf("POST /mcp with NoMCP = %d, want 404", code)
	}
	if _, body := get(t, off.URL+"/metrics", ""); strings.Contains(body, "_mcp_") {
		t.Error("/metrics has MCP series with NoMCP")
	}
}
