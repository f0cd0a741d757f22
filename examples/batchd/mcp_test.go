package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/batchmcp"
	"github.com/siftfetch/batchkit/batchstore/pgstore/pgstoretest"
	"github.com/siftfetch/batchkit/internal/conntest"
)

// The callers of the MCP tests: two plain ones and a restricted one.
const (
	mcpAliceKey   = "alice-secret-0123"
	mcpBobKey     = "bob-secret-0123456"
	mcpPartnerKey = "partner-secret-0123"
)

// mcpKeys are batchd's -key flags for the callers above.
var mcpKeys = []string{"-key", "alice=" + mcpAliceKey, "-key", "bob=" + mcpBobKey, "-key", "partnertenant=" + mcpPartnerKey + ":restricted"}

// unknownJob is a job id of the right shape that no job has.
const unknownJob = "5f0c3a6e-8d1b-4c2a-9e7f-0123456789ab"

// connectMCP connects the official Go SDK's client to batchd's /mcp over
// streamable HTTP, as caller key, speaking version (empty: the SDK's
// latest).
func connectMCP(t *testing.T, server, key, version string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "batchd-test", Version: "1"}, nil)
	transport := &mcp.StreamableClientTransport{
		Endpoint:   server + batchmcp.Path,
		HTTPClient: &http.Client{Transport: conntest.Bearer{Key: key}, Timeout: time.Minute},
	}
	s, err := client.Connect(t.Context(), transport, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect to %s%s: %v", server, batchmcp.Path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// callTool calls a tool and fails the test on a JSON-RPC error.
func callTool(t *testing.T, s *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := s.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return res
}

// structured decodes a tool result's structured output, failing the test
// for a tool error or a text that is not the same JSON.
func structured[T any](t *testing.T, res *mcp.CallToolResult) T {
	t.Helper()
	if res.IsError {
		t.Fatalf("tool error: %s", toolText(res))
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var v, fromText T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("structured output %s: %v", b, err)
	}
	if err := json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &fromText); err != nil {
		t.Fatalf("the text beside the structured output: %v", err)
	}
	return v
}

// toolText is the text of a tool result's text contents.
func toolText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// anyAnswer is what a tool call answered, tool error or JSON-RPC error
// alike, with id replaced by "ID": for comparing two answers.
func anyAnswer(t *testing.T, s *mcp.ClientSession, name string, args map[string]any, id string) string {
	t.Helper()
	res, err := s.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
	var out string
	if err != nil {
		out = "rpc error: " + err.Error()
	} else {
		b, _ := json.Marshal(res)
		out = string(b)
	}
	return strings.ReplaceAll(out, id, "ID")
}

// apiDo sends one request to batchd's HTTP API as caller key.
func apiDo(t *testing.T, server, method, path, key, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, server+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// httpContent is target idx's content as the HTTP API answers it.
func httpContent(t *testing.T, server, key, id string, idx int) string {
	t.Helper()
	code, body := apiDo(t, server, http.MethodGet, fmt.Sprintf("/v1/batch/%s/%d", id, idx), key, "")
	if code != http.StatusOK {
		t.Fatalf("GET /v1/batch/%s/%d: %d %s", id, idx, code, body)
	}
	res := decodeJSON[batchhttp.ResultResponse](t, body)
	env, err := batch.DecodeEnvelope(res.Result)
	if err != nil {
		t.Fatalf("result %d of %s: %v", idx, id, err)
	}
	return env.Content
}

// waitMCP calls batch_status with wait_seconds until the job is finished
// (or until until says so), at most a minute.
func waitMCP(t *testing.T, s *mcp.ClientSession, id string, until func(batchmcp.StatusOutput) bool) batchmcp.StatusOutput {
	t.Helper()
	if until == nil {
		until = func(st batchmcp.StatusOutput) bool { return st.Status.Finished() }
	}
	deadline := time.Now().Add(time.Minute)
	since := 0
	for {
		st := structured[batchmcp.StatusOutput](t, callTool(t, s, "batch_status", map[string]any{"job_id": id, "wait_seconds": 5, "since": since}))
		if until(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s is still %s after a minute", id, st.Status)
		}
		since = st.TargetsDone
	}
}

// readPages reads target idx of job id with batch_result, maxBytes at a
// time, and returns the pages.
func readPages(t *testing.T, s *mcp.ClientSession, id string, idx, maxBytes int) []batchmcp.ResultOutput {
	t.Helper()
	var pages []batchmcp.ResultOutput
	offset := 0
	for range 1000 {
		p := structured[batchmcp.ResultOutput](t, callTool(t, s, "batch_result", map[string]any{"job_id": id, "idx": idx, "offset": offset, "max_bytes": maxBytes}))
		pages = append(pages, p)
		if p.NextOffset == nil {
			return pages
		}
		if *p.NextOffset <= offset {
			t.Fatalf("next_offset %d after offset %d", *p.NextOffset, offset)
		}
		offset = *p.NextOffset
	}
	t.Fatal("more than 1000 pages")
	return nil
}

// TestBatchd_MCP drives the built batchd's /mcp with the official Go
// SDK's client over streamable HTTP, and checks each answer against the
// HTTP API's: the four tools; a submit and its idempotent resubmit; a
// status wait; a result read in small pages (and as a resource) whose
// concatenation is the API's content, multi-byte characters whole; a job
// submitted over MCP is the same job over /v1/batch, cancelled there, and
// a job submitted over the API is cancelled over MCP; another caller's job
// answers exactly as an unknown id; a restricted caller reads what it
// reads over HTTP, and its log lines carry no error details; no log line
// carries a target URL or its host; the MCP requests are in /metrics.
// The SDK's latest protocol (2026-07-28) and 2025-11-25 both work.
func TestBatchd_MCP(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	pages := startMarkedPages(t)
	args := append([]string{"-db", filepath.Join(t.TempDir(), "batchd.db"), "-allow", pages.addr,
		"-jobs-per-caller", "4", "-log-level", "debug"}, mcpKeys...)
	d := startDaemon(t, buildDaemon(t), args...)
	alice := connectMCP(t, d.server, mcpAliceKey, "")
	t.Logf("the SDK's client negotiated protocol %s", alice.InitializeResult().ProtocolVersion)

	tools, err := alice.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	if want := []string{"batch_cancel", "batch_result", "batch_status", "batch_submit"}; !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}

	// A submit of three pages, and the same list again: the same job.
	targets := []any{
		map[string]any{"url": pages.url("/page/1")},
		map[string]any{"url": pages.url("/utf8")},
		map[string]any{"url": pages.url("/page/2"), "mode": "raw"},
	}
	sub := structured[batchmcp.SubmitOutput](t, callTool(t, alice, "batch_submit", map[string]any{"targets": targets}))
	if sub.JobID == "" || sub.Reused || sub.Targets != 3 {
		t.Fatalf("submit = %+v", sub)
	}
	again := structured[batchmcp.SubmitOutput](t, callTool(t, alice, "batch_submit", map[string]any{"targets": targets}))
	if again.JobID != sub.JobID || !again.Reused {
		t.Fatalf("resubmit = %+v, want job %s reused", again, sub.JobID)
	}
	st := waitMCP(t, alice, sub.JobID, nil)
	if st.Status != batch.JobDone || st.TargetsDone != 3 || len(st.Targets) != 3 {
		t.Fatalf("status = %+v", st)
	}
	for _, tg := range st.Targets {
		if want := fmt.Sprintf("batch://%s/%d", sub.JobID, tg.Idx); tg.Resource != want || tg.Outcome != batch.OutcomeOK {
			t.Errorf("target %d: resource %q outcome %q, want %q ok", tg.Idx, tg.Resource, tg.Outcome, want)
		}
	}

	// The same job over the HTTP API: same id, same status.
	code, body := apiDo(t, d.server, http.MethodGet, "/v1/batch/"+sub.JobID, mcpAliceKey, "")
	if hs := decodeJSON[batchhttp.StatusResponse](t, body); code != http.StatusOK || hs.JobID != sub.JobID || hs.Status != batch.JobDone || hs.TargetsTotal != 3 {
		t.Fatalf("GET /v1/batch/%s = %d %s", sub.JobID, code, body)
	}

	// The UTF-8 page in pages of at most 700 bytes: each a whole number of
	// characters, and together the API's content.
	want := httpContent(t, d.server, mcpAliceKey, sub.JobID, 1)
	if want != utf8Page {
		t.Fatalf("the API's content of the UTF-8 page differs from the page (%d bytes, want %d)", len(want), len(utf8Page))
	}
	var got strings.Builder
	read := readPages(t, alice, sub.JobID, 1, 700)
	for i, p := range read {
		if p.Offset != got.Len() || p.TotalBytes != len(want) || len(p.Content) > 700 || len(p.Content) == 0 || !utf8.ValidString(p.Content) {
			t.Errorf("page %d: offset %d (want %d), total %d (want %d), %d bytes (max 700), valid UTF-8 %v",
				i, p.Offset, got.Len(), p.TotalBytes, len(want), len(p.Content), utf8.ValidString(p.Content))
		}
		got.WriteString(p.Content)
	}
	if got.String() != want || len(read) < len(want)/700 {
		t.Fatalf("%d pages make %d bytes; want the API's %d bytes in at least %d pages", len(read), got.Len(), len(want), len(want)/700)
	}
	t.Logf("batch_result read the %d bytes of the UTF-8 page in %d pages of at most 700 bytes", len(want), len(read))
	// And as a resource, paged by the server's own budget.
	got.Reset()
	uri := st.Targets[1].Resource
	for range 100 {
		rr, err := alice.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: uri})
		if err != nil {
			t.Fatalf("resources/read %s: %v", uri, err)
		}
		got.WriteString(rr.Contents[0].Text)
		next, ok := rr.Contents[0].Meta["next_offset"].(float64)
		if !ok {
			break
		}
		uri = fmt.Sprintf("batch://%s/1?offset=%d", sub.JobID, int(next))
	}
	if got.String() != want {
		t.Errorf("resources/read gave %d bytes, not the API's %d", got.Len(), len(want))
	}
	for _, idx := range []int{0, 2} {
		whole := readPages(t, alice, sub.JobID, idx, 1<<20)
		if w := httpContent(t, d.server, mcpAliceKey, sub.JobID, idx); len(whole) != 1 || whole[0].Content != w {
			t.Errorf("target %d over MCP: %+v, want %q", idx, whole, w)
		}
	}

	// A 2025-11-25 client reads the same.
	legacy := connectMCP(t, d.server, mcpAliceKey, "2025-11-25")
	if v := legacy.InitializeResult().ProtocolVersion; v != "2025-11-25" {
		t.Errorf("a 2025-11-25 client negotiated %s", v)
	}
	if lst := structured[batchmcp.StatusOutput](t, callTool(t, legacy, "batch_status", map[string]any{"job_id": sub.JobID})); lst.Status != batch.JobDone || lst.JobID != sub.JobID {
		t.Errorf("status over 2025-11-25 = %+v", lst)
	}
	if p := readPages(t, legacy, sub.JobID, 1, 1<<20); len(p) != 1 || p[0].Content != want {
		t.Errorf("result over 2025-11-25: %d pages", len(p))
	}

	// Another caller's job answers exactly as an unknown one, for every
	// tool and for resources/read, and stays as it was.
	bob := connectMCP(t, d.server, mcpBobKey, "")
	for _, call := range []struct {
		tool string
		args func(id string) map[string]any
	}{
		{"batch_status", func(id string) map[string]any { return map[string]any{"job_id": id} }},
		{"batch_status", func(id string) map[string]any { return map[string]any{"job_id": id, "wait_seconds": 1} }},
		{"batch_result", func(id string) map[string]any { return map[string]any{"job_id": id, "idx": 0} }},
		{"batch_result", func(id string) map[string]any { return map[string]any{"job_id": id, "idx": 1, "offset": 700} }},
		{"batch_cancel", func(id string) map[string]any { return map[string]any{"job_id": id} }},
	} {
		theirs := anyAnswer(t, bob, call.tool, call.args(sub.JobID), sub.JobID)
		unknown := anyAnswer(t, bob, call.tool, call.args(unknownJob), unknownJob)
		if theirs != unknown || !strings.Contains(theirs, `not_found`) {
			t.Errorf("%s of another caller's job:\n%s\nof an unknown one:\n%s", call.tool, theirs, unknown)
		}
	}
	for _, path := range []string{"/0", "/1?offset=700"} {
		_, err1 := bob.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "batch://" + sub.JobID + path})
		_, err2 := bob.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "batch://" + unknownJob + path})
		if err1 == nil || err2 == nil || strings.ReplaceAll(err1.Error(), sub.JobID, "ID") != strings.ReplaceAll(err2.Error(), unknownJob, "ID") {
			t.Errorf("resources/read %s of another caller's job: %v; of an unknown one: %v", path, err1, err2)
		}
	}
	if st := structured[batchmcp.StatusOutput](t, callTool(t, alice, "batch_status", map[string]any{"job_id": sub.JobID})); st.Status != batch.JobDone {
		t.Errorf("alice's job after bob's cancel: %s", st.Status)
	}

	// A job submitted over MCP, live on the gate, is cancelled over HTTP;
	// one submitted over HTTP is cancelled over MCP.
	live := structured[batchmcp.SubmitOutput](t, callTool(t, alice, "batch_submit", map[string]any{"targets": []any{
		map[string]any{"url": pages.url("/gate")}, map[string]any{"url": pages.url("/page/3")},
	}}))
	running := func(st batchmcp.StatusOutput) bool { return st.Status != batch.JobQueued }
	if st := waitMCP(t, alice, live.JobID, running); st.Status != batch.JobRunning {
		t.Fatalf("the gated job = %+v, want running", st)
	}
	code, body = apiDo(t, d.server, http.MethodGet, "/v1/batch/"+live.JobID, mcpAliceKey, "")
	if hs := decodeJSON[batchhttp.StatusResponse](t, body); code != http.StatusOK || hs.JobID != live.JobID || hs.Status != batch.JobRunning {
		t.Fatalf("GET /v1/batch/%s = %d %s, want it running", live.JobID, code, body)
	}
	code, body = apiDo(t, d.server, http.MethodDelete, "/v1/batch/"+live.JobID, mcpAliceKey, "")
	if c := decodeJSON[batchhttp.CancelResponse](t, body); code != http.StatusOK || c.Status != batch.JobCancelled {
		t.Fatalf("DELETE /v1/batch/%s = %d %s", live.JobID, code, body)
	}
	if st := structured[batchmcp.StatusOutput](t, callTool(t, alice, "batch_status", map[string]any{"job_id": live.JobID})); st.Status != batch.JobCancelled {
		t.Errorf("over MCP after the HTTP cancel: %s, want cancelled", st.Status)
	}
	code, body = apiDo(t, d.server, http.MethodPost, "/v1/batch", mcpAliceKey,
		fmt.Sprintf(`{"targets":[{"url":%q},{"url":%q}]}`, pages.url("/gate?2"), pages.url("/page/4")))
	if code != http.StatusAccepted {
		t.Fatalf("POST /v1/batch = %d %s", code, body)
	}
	overHTTP := decodeJSON[batchhttp.SubmitResponse](t, body)
	if st := waitMCP(t, alice, overHTTP.JobID, running); st.Status != batch.JobRunning {
		t.Fatalf("the job submitted over HTTP = %+v, want running", st)
	}
	res := callTool(t, alice, "batch_cancel", map[string]any{"job_id": overHTTP.JobID})
	if c := structured[map[string]string](t, res); c["status"] != "cancelled" || c["job_id"] != overHTTP.JobID {
		t.Fatalf("batch_cancel = %s", toolText(res))
	}
	code, body = apiDo(t, d.server, http.MethodGet, "/v1/batch/"+overHTTP.JobID, mcpAliceKey, "")
	if hs := decodeJSON[batchhttp.StatusResponse](t, body); code != http.StatusOK || hs.Status != batch.JobCancelled {
		t.Fatalf("GET /v1/batch/%s after batch_cancel = %d %s", overHTTP.JobID, code, body)
	}
	pages.release()

	// The restricted caller reads over MCP what it reads over HTTP, its
	// errors included; its refusals are the API's.
	partner := connectMCP(t, d.server, mcpPartnerKey, "")
	psub := structured[batchmcp.SubmitOutput](t, callTool(t, partner, "batch_submit", map[string]any{"targets": []any{
		map[string]any{"url": pages.url("/page/5")}, map[string]any{"url": pages.url("/missing")},
	}}))
	pst := waitMCP(t, partner, psub.JobID, nil)
	code, body = apiDo(t, d.server, http.MethodGet, "/v1/batch/"+psub.JobID, mcpPartnerKey, "")
	hs := decodeJSON[batchhttp.StatusResponse](t, body)
	if code != http.StatusOK || pst.Status != batch.JobPartial || hs.Status != pst.Status || len(hs.Targets) != 2 || len(pst.Targets) != 2 {
		t.Fatalf("the restricted caller's job: over MCP %+v; over HTTP %d %s", pst, code, body)
	}
	for i, ht := range hs.Targets {
		mt := pst.Targets[i]
		if mt.Status != ht.Status || mt.Outcome != ht.Outcome || mt.Error != ht.Error || mt.Hint != ht.Hint || mt.URL != ht.URL {
			t.Errorf("restricted target %d: over MCP %+v; over HTTP %+v", i, mt, ht)
		}
	}
	if pst.Targets[1].Error == "" || pst.Targets[1].Outcome != batch.OutcomeUpstream4xx {
		t.Errorf("the restricted caller's 404 target = %+v, want its error and outcome", pst.Targets[1])
	}
	if p := readPages(t, partner, psub.JobID, 0, 1<<20); p[0].Content != httpContent(t, d.server, mcpPartnerKey, psub.JobID, 0) {
		t.Errorf("restricted result 0 over MCP: %q", p[0].Content)
	}
	failed := readPages(t, partner, psub.JobID, 1, 1<<20)
	code, body = apiDo(t, d.server, http.MethodGet, "/v1/batch/"+psub.JobID+"/1", mcpPartnerKey, "")
	if hr := decodeJSON[batchhttp.ResultResponse](t, body); code != http.StatusOK || failed[0].Error != hr.Error || failed[0].Outcome != hr.Outcome || failed[0].Status != hr.Status {
		t.Errorf("restricted result 1: over MCP %+v; over HTTP %d %s", failed[0], code, body)
	}
	if a := anyAnswer(t, partner, "batch_status", map[string]any{"job_id": unknownJob}, unknownJob); !strings.Contains(a, "not_found") {
		t.Errorf("the restricted caller's unknown job: %s", a)
	}
	_, err = partner.CallTool(t.Context(), &mcp.CallToolParams{Name: "batch_submit", Arguments: map[string]any{
		"targets": []any{map[string]any{"url": "http://10.0.0.1/"}},
	}})
	code, body = apiDo(t, d.server, http.MethodPost, "/v1/batch", mcpPartnerKey, `{"targets":[{"url":"http://10.0.0.1/"}]}`)
	if we, ok := errors.AsType[*jsonrpc.Error](err); !ok || !bytes.Contains(we.Data, []byte(`"code":"blocked"`)) ||
		code != http.StatusUnprocessableEntity || !strings.Contains(body, `"code":"blocked"`) {
		t.Errorf("a blocked submit of the restricted caller: over MCP %v; over HTTP %d %s", err, code, body)
	}

	// /metrics has the MCP series, by tool, and /mcp's HTTP series.
	code, metrics := apiDo(t, d.server, http.MethodGet, "/metrics", mcpAliceKey, "")
	for _, w := range []string{
		`# HELP batch_mcp_requests_total MCP requests`,
		`batch_mcp_requests_total{method="tools/call",tool="batch_submit",result="ok"}`,
		`batch_mcp_requests_total{method="tools/call",tool="batch_status",result="tool_error"}`,
		`batch_mcp_request_seconds_bucket{method="resources/read"`,
		`batchd_http_requests_total{route="/mcp",status="200"}`,
	} {
		if code != http.StatusOK || !strings.Contains(metrics, w) {
			t.Errorf("/metrics (%d) lacks %s", code, w)
		}
	}

	d.stop(t)
	logs := d.stderr.String()
	for _, bad := range []string{pages.marker, pages.addr, "10.0.0.1", mcpAliceKey, mcpBobKey, mcpPartnerKey} {
		if strings.Contains(logs, bad) {
			t.Errorf("the daemon's log carries %q:\n%s", bad, logs)
		}
	}
	var partnerLines, bobRefusals int
	for line := range strings.SplitSeq(logs, "\n") {
		if strings.Contains(line, "caller=bob") && strings.Contains(line, `msg="batch mcp"`) && strings.Contains(line, "error=not_found") {
			bobRefusals++
		}
		if !strings.Contains(line, "caller=partnertenant") {
			continue
		}
		partnerLines++
		for _, detail := range []string{" error=", " outcome=", " cause=", " target_idx="} {
			if strings.Contains(line, detail) {
				t.Errorf("a restricted caller's log line carries%s:\n%s", strings.TrimSuffix(detail, "="), line)
			}
		}
	}
	if partnerLines < 5 || bobRefusals == 0 {
		t.Errorf("%d log lines of the restricted caller, %d of bob's refusals with their code: the checks check little:\n%s", partnerLines, bobRefusals, logs)
	}
}

// With -mcp=false batchd serves no /mcp.
func TestBatchd_MCPOff(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	d := startDaemon(t, buildDaemon(t), append([]string{"-db", filepath.Join(t.TempDir(), "batchd.db"), "-mcp=false"}, mcpKeys...)...)
	if code, body := apiDo(t, d.server, http.MethodPost, batchmcp.Path, mcpAliceKey, `{"jsonrpc":"2.0","id":1,"method":"ping"}`); code != http.StatusNotFound {
		t.Errorf("POST /mcp with -mcp=false = %d %s, want 404", code, body)
	}
}

// rpcAnswer is a JSON-RPC answer, and the HTTP status it came with.
type rpcAnswer struct {
	Result json.RawMessage `json:"result"`
	Error  *jsonrpc.Error  `json:"error"`
	status int
}

// rpcTasks sends one JSON-RPC request to /mcp as protocol 2026-07-28
// speaks it over streamable HTTP, with the tasks extension declared, and
// returns the answer: the Go SDK's client has no tasks API. name is the
// Mcp-Name header: the tool's name, or the task's id.
func rpcTasks(t *testing.T, server, key, method, name string, params map[string]any) rpcAnswer {
	t.Helper()
	params["_meta"] = map[string]any{
		"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientInfo":      map[string]any{"name": "t", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": map[string]any{
			"extensions": map[string]any{batchmcp.TasksExtension: map[string]any{}},
		},
	}
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, server+batchmcp.Path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"Authorization": "Bearer " + key, "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
		"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method, "Mcp-Name": name,
	} {
		req.Header.Set(k, v)
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
	a := rpcAnswer{status: resp.StatusCode}
	if err := json.Unmarshal(body, &a); err != nil || (a.Result == nil) == (a.Error == nil) || (a.Result != nil && a.status != http.StatusOK) {
		t.Fatalf("%s: %d %s (%v)", method, resp.StatusCode, body, err)
	}
	return a
}

// taskAnswer is a task answer of the extension: a created task, or
// tasks/get's.
type taskAnswer struct {
	ResultType     string              `json:"resultType"`
	TaskID         string              `json:"taskId"`
	Status         string              `json:"status"`
	StatusMessage  string              `json:"statusMessage"`
	TTLMs          *int64              `json:"ttlMs"`
	PollIntervalMs int64               `json:"pollIntervalMs"`
	Result         *mcp.CallToolResult `json:"result"`
}

// TestBatchd_MCPTwoNodes runs two batchd on one PostgreSQL database: a job
// submitted over MCP on node A is the same job on node B, over MCP and
// over /v1/batch; a batch_submit made a task on node A (the tasks
// extension, as raw JSON-RPC) is followed with tasks/get on node B,
// working with its progress while a target is held, then completed with
// its final result inlined. Another caller's tasks/get answers
// as an unknown task's.
func TestBatchd_MCPTwoNodes(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	url, schema := pgstoretest.Schema(t, "mcp")
	pages := startMarkedPages(t)
	bin := buildDaemon(t)
	node := func(id string) *daemonProc {
		return startDaemon(t, bin, append([]string{"-db", url, "-pg-schema", schema, "-runner-id", id, "-allow", pages.addr,
			"-jobs-per-caller", "4", "-poll-interval", "200ms", "-log-level", "debug"}, mcpKeys...)...)
	}
	a, b := node("mcp-a"), node("mcp-b")

	onA, onB := connectMCP(t, a.server, mcpAliceKey, ""), connectMCP(t, b.server, mcpAliceKey, "")
	sub := structured[batchmcp.SubmitOutput](t, callTool(t, onA, "batch_submit", map[string]any{"targets": []any{
		map[string]any{"url": pages.url("/page/1")}, map[string]any{"url": pages.url("/page/2")},
	}}))
	if st := waitMCP(t, onB, sub.JobID, nil); st.JobID != sub.JobID || st.Status != batch.JobDone {
		t.Fatalf("node B over MCP: %+v", st)
	}
	code, body := apiDo(t, b.server, http.MethodGet, "/v1/batch/"+sub.JobID, mcpAliceKey, "")
	if hs := decodeJSON[batchhttp.StatusResponse](t, body); code != http.StatusOK || hs.JobID != sub.JobID || hs.Status != batch.JobDone {
		t.Fatalf("node B's GET /v1/batch/%s = %d %s", sub.JobID, code, body)
	}
	if p := readPages(t, onB, sub.JobID, 1, 1<<20); p[0].Content != httpContent(t, a.server, mcpAliceKey, sub.JobID, 1) {
		t.Errorf("node B's batch_result differs from node A's API: %q", p[0].Content)
	}

	// A task on node A, followed on node B: working while its first
	// target waits on the gate, then completed.
	created := rpcTasks(t, a.server, mcpAliceKey, "tools/call", "batch_submit", map[string]any{
		"name": "batch_submit", "arguments": map[string]any{"targets": []any{
			map[string]any{"url": pages.url("/gate")}, map[string]any{"url": pages.url("/utf8")},
		}},
	})
	var task taskAnswer
	if err := json.Unmarshal(created.Result, &task); created.Error != nil || err != nil ||
		task.ResultType != "task" || task.TaskID == "" || task.Status != "working" || task.TTLMs == nil || *task.TTLMs <= 0 {
		t.Fatalf("batch_submit with the tasks extension = %s %v", created.Result, created.Error)
	}
	deadline := time.Now().Add(time.Minute)
	var got taskAnswer
	var raw json.RawMessage
	var working int
	for ; ; working++ {
		ans := rpcTasks(t, b.server, mcpAliceKey, "tasks/get", task.TaskID, map[string]any{"taskId": task.TaskID})
		got, raw = taskAnswer{}, ans.Result
		if err := json.Unmarshal(ans.Result, &got); ans.Error != nil || err != nil || got.ResultType != "complete" || got.TaskID != task.TaskID {
			t.Fatalf("node B's tasks/get = %s %v", ans.Result, ans.Error)
		}
		if got.Status != "working" || time.Now().After(deadline) {
			break
		}
		if !strings.Contains(got.StatusMessage, "of 2 targets") || got.PollIntervalMs <= 0 {
			t.Errorf("a working task's answer lacks its status message or poll interval: %s", ans.Result)
		}
		pages.release()
		time.Sleep(min(time.Duration(got.PollIntervalMs)*time.Millisecond, 200*time.Millisecond))
	}
	if got.Status != "completed" || got.Result == nil || got.Result.IsError {
		t.Fatalf("node B's last tasks/get = %s", raw)
	}
	t.Logf("node B answered tasks/get working %d times, then completed", working)
	if working == 0 {
		t.Error("tasks/get never answered working, with the first target held at the gate")
	}
	final := structured[batchmcp.StatusOutput](t, got.Result)
	var links int
	for _, c := range got.Result.Content {
		if _, ok := c.(*mcp.ResourceLink); ok {
			links++
		}
	}
	if final.JobID != task.TaskID || final.Status != batch.JobDone || links != 2 || bytes.Contains(raw, []byte("東京")) {
		t.Errorf("the completed task's result: %s; want the job done, a resource link per target and no content", raw)
	}
	code, body = apiDo(t, b.server, http.MethodGet, "/v1/batch/"+task.TaskID, mcpAliceKey, "")
	if hs := decodeJSON[batchhttp.StatusResponse](t, body); code != http.StatusOK || hs.JobID != task.TaskID || hs.Status != batch.JobDone {
		t.Fatalf("node B's GET /v1/batch/%s = %d %s", task.TaskID, code, body)
	}
	if c := httpContent(t, b.server, mcpAliceKey, task.TaskID, 1); c != utf8Page {
		t.Errorf("the task's UTF-8 page over node B's API: %d bytes, want %d", len(c), len(utf8Page))
	}

	// Bob's tasks/get of alice's task is an unknown task's.
	theirs := rpcTasks(t, b.server, mcpBobKey, "tasks/get", task.TaskID, map[string]any{"taskId": task.TaskID})
	unknown := rpcTasks(t, b.server, mcpBobKey, "tasks/get", unknownJob, map[string]any{"taskId": unknownJob})
	if theirs.Error == nil || unknown.Error == nil || theirs.status != unknown.status || theirs.Error.Code != unknown.Error.Code ||
		theirs.Error.Message != unknown.Error.Message || !bytes.Equal(theirs.Error.Data, unknown.Error.Data) {
		t.Errorf("bob's tasks/get of alice's task: %d %s %v; of an unknown one: %d %s %v",
			theirs.status, theirs.Result, theirs.Error, unknown.status, unknown.Result, unknown.Error)
	}

	a.stop(t)
	b.stop(t)
	for _, d := range []*daemonProc{a, b} {
		logs := d.stderr.String()
		for _, bad := range []string{pages.marker, pages.addr} {
			if strings.Contains(logs, bad) {
				t.Errorf("a node's log carries %q:\n%s", bad, logs)
			}
		}
	}
}
