package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/batchmcp"
	"github.com/siftfetch/batchkit/internal/conntest"
)

// structuredAs decodes a tool result's structured output into v.
func structuredAs(t *testing.T, res *mcp.CallToolResult, err error, v any) {
	t.Helper()
	if err != nil || res.IsError {
		t.Fatalf("tool call: %v %+v", err, res)
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

// TestEmbed_MCP drives the built program's /mcp with the official Go
// SDK's client: behind the host's own auth middleware, a job submitted
// over MCP is the caller's job over /v1/batch, and another caller's job
// is not found; the requests are in /metrics, and no log line carries a
// target URL.
func TestEmbed_MCP(t *testing.T) {
	t.Parallel()
	h := startHost(t)
	if code, body := h.do(t, http.MethodPost, batchmcp.Path, "", `{"jsonrpc":"2.0","id":1,"method":"ping"}`); code != http.StatusUnauthorized {
		t.Errorf("POST /mcp without a key: %d %s", code, body)
	}
	connect := func(key string) *mcp.ClientSession {
		c := mcp.NewClient(&mcp.Implementation{Name: "embed-test", Version: "1"}, nil)
		s, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{
			Endpoint: h.url + batchmcp.Path, HTTPClient: &http.Client{Transport: conntest.Bearer{Key: key}},
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	alice, bob := connect("alice-key-0123456789"), connect("bob-key-0123456789")

	var sub batchmcp.SubmitOutput
	res, err := alice.CallTool(t.Context(), &mcp.CallToolParams{Name: "batch_submit", Arguments: map[string]any{
		"targets": []any{map[string]any{"url": h.page("m1")}, map[string]any{"url": h.page("m2")}},
	}})
	structuredAs(t, res, err, &sub)
	var st batchmcp.StatusOutput
	for range 10 {
		res, err := alice.CallTool(t.Context(), &mcp.CallToolParams{Name: "batch_status", Arguments: map[string]any{
			"job_id": sub.JobID, "wait_seconds": 10, "since": st.TargetsDone,
		}})
		structuredAs(t, res, err, &st)
		if st.Status.Finished() {
			break
		}
	}
	if st.Status != batch.JobDone || st.TargetsDone != 2 {
		t.Fatalf("job over MCP: %+v", st)
	}
	var page batchmcp.ResultOutput
	res, err = alice.CallTool(t.Context(), &mcp.CallToolParams{Name: "batch_result", Arguments: map[string]any{"job_id": sub.JobID, "idx": 1}})
	structuredAs(t, res, err, &page)
	code, body := h.do(t, http.MethodGet, "/v1/batch/"+sub.JobID+"/1", "alice-key-0123456789", "")
	var hr batchhttp.ResultResponse
	if err := json.Unmarshal([]byte(body), &hr); code != http.StatusOK || err != nil {
		t.Fatalf("GET /v1/batch/%s/1: %d %s", sub.JobID, code, body)
	}
	if env, err := batch.DecodeEnvelope(hr.Result); err != nil || page.Content != env.Content || page.Content != "page m2" {
		t.Errorf("result 1 over MCP %q, over HTTP %q (%v)", page.Content, env.Content, err)
	}
	res, err = bob.CallTool(t.Context(), &mcp.CallToolParams{Name: "batch_status", Arguments: map[string]any{"job_id": sub.JobID}})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, `"code":"not_found"`) {
		t.Errorf("bob's status of alice's job: %v %+v", err, res)
	}

	code, metrics := h.do(t, http.MethodGet, "/metrics", "alice-key-0123456789", "")
	for _, want := range []string{
		`embed_http_requests_total{route="/mcp",status="200"}`,
		`embed_http_requests_total{route="/mcp",status="401"} 1`,
		`batch_mcp_requests_total{method="tools/call",tool="batch_submit",result="ok"} 1`,
		"# HELP batch_mcp_requests_total MCP requests",
	} {
		if code != http.StatusOK || !strings.Contains(metrics, want) {
			t.Errorf("/metrics (%d) lacks %s", code, want)
		}
	}
	h.stop(t)
	<-h.logs.ended
	if logs := h.logs.String(); strings.Contains(logs, marker) || strings.Contains(logs, h.pages) {
		t.Errorf("a log line carries a target URL or host:\n%s", logs)
	}
}
