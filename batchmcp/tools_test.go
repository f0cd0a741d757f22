package batchmcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/batchmcp"
)

// TestMain fails the package's tests if any goroutine outlives them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// longText is content of n bytes or a little more, with characters of one
// to four bytes, so that a page cut in the middle of one shows.
func longText(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString([]string{"plain text ", "é", "€", "🙂", "\n"}[i%5])
	}
	return b.String()
}

const (
	urlLong   = "https://example.test/long"
	urlShort  = "https://example.test/short"
	urlFailed = "https://example.test/missing"
)

// scripted answers urlLong with content long, urlFailed with a 404, and
// any other URL with "ok".
func scripted(long string) batch.FetchFunc {
	return batchtest.ScriptFetcher(map[string]batchtest.Step{
		urlLong:   {Result: batch.Result{Content: long, Meta: map[string]any{"title": "Long"}}},
		urlFailed: {Err: batch.NewFetchError(batch.OutcomeUpstream4xx, "", errors.New("upstream answered 404"))},
	})
}

func TestTools_List(t *testing.T) {
	e := newEnv(t, nil, batchmcp.Config{})
	cs := e.client(keyAlice)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
		if tl.Description == "" || tl.OutputSchema == nil {
			t.Errorf("%s: want a description and an output schema", tl.Name)
		}
	}
	slices.Sort(names)
	if want := []string{"batch_cancel", "batch_result", "batch_status", "batch_submit"}; !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}
	for _, tl := range res.Tools {
		if tl.Name != "batch_submit" {
			continue
		}
		b, _ := json.Marshal(tl.InputSchema)
		// The host's option set and cap are in the schema.
		for _, want := range []string{`"maxItems":8`, `"mode"`, `"url"`} {
			if !strings.Contains(string(b), want) {
				t.Errorf("batch_submit schema lacks %s: %s", want, b)
			}
		}
	}
	tmpl, err := cs.ListResourceTemplates(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tmpl.ResourceTemplates) != 1 || tmpl.ResourceTemplates[0].URITemplate != "batch://{job_id}/{idx}{?offset}" {
		t.Fatalf("resource templates %+v", tmpl.ResourceTemplates)
	}
}

// TestTools_SubmitStatusResult drives a job through the Go SDK's client:
// submit, an idempotent resubmit, status with wait, results read in pages
// that add up to the HTTP API's content, and the same read as resources.
func TestTools_SubmitStatusResult(t *testing.T) {
	long := longText(30000)
	e := newEnv(t, scripted(long), batchmcp.Config{})
	cs := e.client(keyAlice)

	var sub batchmcp.SubmitOutput
	decode(t, call(t, cs, "batch_submit", targets(urlLong, urlShort, urlFailed)), &sub)
	if sub.JobID == "" || sub.Targets != 3 || sub.Reused {
		t.Fatalf("submit: %+v", sub)
	}
	var again batchmcp.SubmitOutput
	decode(t, call(t, cs, "batch_submit", targets(urlLong, urlShort, urlFailed)), &again)
	if again.JobID != sub.JobID || !again.Reused {
		t.Fatalf("resubmit: %+v, want job %s reused", again, sub.JobID)
	}

	st := waitDone(t, cs, sub.JobID)
	if st.Status != batch.JobPartial || st.TargetsDone != 3 || len(st.Targets) != 3 || st.NextIdx != nil {
		t.Fatalf("status: %+v", st)
	}
	if st.Targets[2].Outcome != batch.OutcomeUpstream4xx || st.Targets[2].Resource != "" || st.Targets[0].Resource != "batch://"+sub.JobID+"/0" {
		t.Fatalf("targets: %+v", st.Targets)
	}
	// The answer links the done targets' content.
	res := call(t, cs, "batch_status", map[string]any{"job_id": sub.JobID})
	var links []string
	for _, c := range res.Content {
		if l, ok := c.(*mcp.ResourceLink); ok {
			links = append(links, l.URI)
		}
	}
	if want := []string{"batch://" + sub.JobID + "/0", "batch://" + sub.JobID + "/1"}; !slices.Equal(links, want) {
		t.Fatalf("resource links %v, want %v", links, want)
	}

	want := httpContent(t, e, sub.JobID, 0, keyAlice)
	if want != long {
		t.Fatal("the HTTP API's content is not what the fetcher returned")
	}
	// Pages of at most 1000 bytes, each on a character boundary.
	var got strings.Builder
	offset, pages := 0, 0
	for {
		var r batchmcp.ResultOutput
		decode(t, call(t, cs, "batch_result", map[string]any{"job_id": sub.JobID, "idx": 0, "offset": offset, "max_bytes": 1000}), &r)
		if r.Offset != offset || r.TotalBytes != len(long) || len(r.Content) > 1000 || r.Content == "" {
			t.Fatalf("page at %d: offset %d, total %d, %d bytes", offset, r.Offset, r.TotalBytes, len(r.Content))
		}
		if (offset == 0) != (r.Meta != nil) {
			t.Fatalf("page at %d: meta %v (only the first page carries it)", offset, r.Meta)
		}
		got.WriteString(r.Content)
		pages++
		if r.NextOffset == nil {
			break
		}
		offset = *r.NextOffset
	}
	if got.String() != want {
		t.Fatalf("pages add up to %d bytes, want the HTTP API's %d", got.Len(), len(want))
	}
	if pages < 30 {
		t.Fatalf("%d pages of at most 1000 bytes for %d bytes", pages, len(want))
	}

	// The same content as resources, paged with ?offset=.
	got.Reset()
	uri := "batch://" + sub.JobID + "/0"
	for uri != "" {
		rr, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri})
		if err != nil {
			t.Fatal(err)
		}
		c := rr.Contents[0]
		got.WriteString(c.Text)
		uri = ""
		if next, ok := c.Meta["next_offset"].(float64); ok {
			uri = "batch://" + sub.JobID + "/0?offset=" + itoa(int(next))
		}
	}
	if got.String() != want {
		t.Fatalf("resource pages add up to %d bytes, want %d", got.Len(), len(want))
	}

	// A failed target answers its error, not content.
	var failed batchmcp.ResultOutput
	decode(t, call(t, cs, "batch_result", map[string]any{"job_id": sub.JobID, "idx": 2}), &failed)
	if failed.Status != batch.TargetFailed || failed.Outcome != batch.OutcomeUpstream4xx || failed.Error == "" || failed.Content != "" {
		t.Fatalf("failed target: %+v", failed)
	}
}

// httpContent is a target's content as GET /v1/batch/{id}/{idx} answers it.
func httpContent(t *testing.T, e *env, id string, idx int, key string) string {
	t.Helper()
	code, body := e.httpGet("/v1/batch/"+id+"/"+itoa(idx), key)
	if code != 200 {
		t.Fatalf("GET result: %d %s", code, body)
	}
	var r struct {
		Result struct {
			Content string `json:"content"`
		} `json:"result"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	return r.Result.Content
}

// TestTools_Cancel: a job submitted over MCP is the job over HTTP, and a
// cancel on either side shows on the other.
func TestTools_Cancel(t *testing.T) {
	f := batchtest.NewBlockingFetcher()
	t.Cleanup(f.Release)
	e := newEnv(t, f.Fetch, batchmcp.Config{})
	cs := e.client(keyAlice)

	var sub batchmcp.SubmitOutput
	decode(t, call(t, cs, "batch_submit", targets(urlShort, urlLong)), &sub)
	<-f.Started
	code, body := e.httpGet("/v1/batch/"+sub.JobID, keyAlice)
	if code != 200 || !strings.Contains(string(body), `"job_id":"`+sub.JobID+`"`) {
		t.Fatalf("GET over HTTP: %d %s", code, body)
	}
	var c struct {
		JobID  string          `json:"job_id"`
		Status batch.JobStatus `json:"status"`
	}
	decode(t, call(t, cs, "batch_cancel", map[string]any{"job_id": sub.JobID}), &c)
	if c.Status != batch.JobCancelled {
		t.Fatalf("cancel: %+v", c)
	}
	if code, body := e.httpGet("/v1/batch/"+sub.JobID, keyAlice); code != 200 || !strings.Contains(string(body), `"status":"cancelled"`) {
		t.Fatalf("GET after an MCP cancel: %d %s", code, body)
	}
	// Cancelling again reports the status; it is no error.
	decode(t, call(t, cs, "batch_cancel", map[string]any{"job_id": sub.JobID}), &c)
	if c.Status != batch.JobCancelled {
		t.Fatalf("second cancel: %+v", c)
	}

	// The other way: submitted over MCP, cancelled over HTTP.
	var sub2 batchmcp.SubmitOutput
	decode(t, call(t, cs, "batch_submit", targets(urlFailed)), &sub2)
	if code, body := e.httpDo("DELETE", "/v1/batch/"+sub2.JobID, keyAlice); code != 200 {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	var st batchmcp.StatusOutput
	decode(t, call(t, cs, "batch_status", map[string]any{"job_id": sub2.JobID}), &st)
	if st.Status != batch.JobCancelled {
		t.Fatalf("status over MCP after an HTTP cancel: %+v", st)
	}
}

// TestTools_Ownership: another caller's job answers exactly as an
// unknown id does, on every tool and on resources/read.
func TestTools_Ownership(t *testing.T) {
	e := newEnv(t, nil, batchmcp.Config{})
	alice, bob := e.client(keyAlice), e.client(keyBob)
	var sub batchmcp.SubmitOutput
	decode(t, call(t, alice, "batch_submit", targets(urlShort)), &sub)
	waitDone(t, alice, sub.JobID)

	const unknown = "00000000-0000-4000-8000-000000000000"
	for _, tc := range []struct {
		tool string
		args func(id string) map[string]any
	}{
		{"batch_status", func(id string) map[string]any { return map[string]any{"job_id": id} }},
		{"batch_status", func(id string) map[string]any { return map[string]any{"job_id": id, "wait_seconds": 1} }},
		{"batch_result", func(id string) map[string]any { return map[string]any{"job_id": id, "idx": 0} }},
		{"batch_cancel", func(id string) map[string]any { return map[string]any{"job_id": id} }},
	} {
		theirs := call(t, bob, tc.tool, tc.args(sub.JobID))
		none := call(t, bob, tc.tool, tc.args(unknown))
		te := toolError(t, theirs)
		if te.Code != batchhttp.CodeNotFound || text(theirs) != strings.ReplaceAll(text(none), unknown, sub.JobID) {
			t.Errorf("%s of another caller's job: %s; of an unknown one: %s", tc.tool, text(theirs), text(none))
		}
	}
	// An idx outside the job is the same answer.
	if te := toolError(t, call(t, alice, "batch_result", map[string]any{"job_id": sub.JobID, "idx": 5})); te.Code != batchhttp.CodeNotFound {
		t.Errorf("idx outside the job: %+v", te)
	}
	_, errTheirs := bob.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "batch://" + sub.JobID + "/0"})
	_, errNone := bob.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "batch://" + unknown + "/0"})
	if errTheirs == nil || errNone == nil || strings.ReplaceAll(errNone.Error(), unknown, sub.JobID) != errTheirs.Error() {
		t.Errorf("resources/read of another caller's job: %v; of an unknown one: %v", errTheirs, errNone)
	}
	// Alice still reads it.
	if _, err := alice.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "batch://" + sub.JobID + "/0"}); err != nil {
		t.Fatal(err)
	}
}

// TestTools_BadInput: input the caller must change is a JSON-RPC error
// that names the field, or the cap; nothing is submitted.
func TestTools_BadInput(t *testing.T) {
	e := newEnv(t, nil, batchmcp.Config{
		Precheck: func(_ context.Context, _ batch.Caller, u string) error {
			if strings.Contains(u, "blocked") {
				return errors.New("blocked: private address")
			}
			return nil
		},
	})
	cs := e.client(keyAlice)
	nine := make([]string, 9)
	for i := range nine {
		nine[i] = "https://example.test/" + itoa(i)
	}
	for _, tc := range []struct {
		name, tool string
		args       any
		code       string // the stable code in the error's data
		want       string // in the message
	}{
		{"unknown argument", "batch_submit", map[string]any{"targets": []any{map[string]any{"url": urlShort}}, "priority": 1}, "invalid_request", `unknown field "priority"`},
		{"no targets", "batch_submit", map[string]any{}, "invalid_request", "targets: required"},
		{"empty list", "batch_submit", map[string]any{"targets": []any{}}, "invalid_batch", "no targets"},
		{"bad option", "batch_submit", map[string]any{"targets": []any{map[string]any{"url": urlShort, "mode": "loud"}}}, "invalid_batch", "mode"},
		{"bad option type", "batch_submit", map[string]any{"targets": []any{map[string]any{"url": urlShort, "recover": "yes"}}}, "invalid_batch", "recover"},
		{"over the cap", "batch_submit", targets(nine...), "too_many_targets", "too many targets (max 8)"},
		{"blocked", "batch_submit", targets(urlShort, "https://blocked.test/"), "blocked", "blocked: targets[1]: private address"},
		{"idx type", "batch_result", map[string]any{"job_id": "x", "idx": "zero"}, "invalid_request", "idx"},
		{"idx missing", "batch_result", map[string]any{"job_id": "x"}, "invalid_request", "idx: required"},
		{"wait too long", "batch_status", map[string]any{"job_id": "x", "wait_seconds": 600}, "invalid_request", "wait_seconds: want 0 to 30"},
		{"job_id missing", "batch_cancel", map[string]any{}, "invalid_request", "job_id: required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tc.tool, Arguments: tc.args})
			var we *jsonrpc.Error
			if !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams || !strings.Contains(we.Message, tc.want) {
				t.Fatalf("got %v, want -32602 with %q", err, tc.want)
			}
			var data struct{ Code string }
			if json.Unmarshal(we.Data, &data) != nil || data.Code != tc.code {
				t.Fatalf("data %s, want code %s", we.Data, tc.code)
			}
		})
	}
	_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "batch_delete", Arguments: map[string]any{}})
	if err == nil || !strings.Contains(err.Error(), "batch_delete") {
		t.Fatalf("unknown tool: %v", err)
	}
	if jobs, err := e.runner.List(context.Background(), batch.Caller{Name: "alice"}, 10); err != nil || len(jobs) != 0 {
		t.Fatalf("after refusals: jobs %v, %v", jobs, err)
	}
}

// TestTools_Busy: a refusal of well-formed input is a tool result with
// isError, its code, hint and retry-after.
func TestTools_Busy(t *testing.T) {
	f := batchtest.NewBlockingFetcher()
	t.Cleanup(f.Release)
	e := newEnv(t, f.Fetch, batchmcp.Config{})
	cs := e.client(keyAlice)
	for i := range batch.DefaultJobsPerCaller {
		decode(t, call(t, cs, "batch_submit", targets("https://example.test/"+itoa(i))), &batchmcp.SubmitOutput{})
	}
	te := toolError(t, call(t, cs, "batch_submit", targets(urlShort)))
	if te.Code != batchhttp.CodeCallerBusy || te.Hint == "" || te.RetryAfterSeconds == 0 {
		t.Fatalf("over the caller's cap: %+v", te)
	}
}
