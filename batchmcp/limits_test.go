package batchmcp_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/batchmcp"
)

// TestLimits_AnswerBudget: no answer exceeds Config.MaxAnswerBytes, on
// the wire: a result read without max_bytes is paged to fit, a status of
// long URLs is paged with next_idx, and the pages cover everything.
func TestLimits_AnswerBudget(t *testing.T) {
	const budget = 6000
	long := longText(50000)
	e := newEnv(t, scripted(long), batchmcp.Config{MaxAnswerBytes: budget})
	c := e.rpc(keyAlice, "2026-07-28", false)
	urls := []string{urlLong}
	for i := range 7 {
		urls = append(urls, "https://example.test/"+strings.Repeat("p", 1500)+itoa(i))
	}
	var sub struct {
		StructuredContent batchmcp.SubmitOutput `json:"structuredContent"`
	}
	c.do("tools/call", submitArgs(urls...)).ok(t, &sub)
	id := sub.StructuredContent.JobID
	batchtest.WaitFinished(t, e.runner, batch.Caller{Name: "alice"}, id, 30*time.Second)

	var got strings.Builder
	offset := 0
	for {
		r := c.do("tools/call", map[string]any{"name": "batch_result", "arguments": map[string]any{"job_id": id, "idx": 0, "offset": offset}})
		if len(r.Raw) > budget {
			t.Fatalf("batch_result at %d: %d bytes over the %d budget", offset, len(r.Raw), budget)
		}
		var res struct {
			StructuredContent batchmcp.ResultOutput `json:"structuredContent"`
		}
		r.ok(t, &res)
		got.WriteString(res.StructuredContent.Content)
		if res.StructuredContent.NextOffset == nil {
			break
		}
		offset = *res.StructuredContent.NextOffset
	}
	if got.String() != long {
		t.Fatalf("pages add up to %d bytes, want %d", got.Len(), len(long))
	}

	seen := map[int]bool{}
	from := 0
	for {
		r := c.do("tools/call", map[string]any{"name": "batch_status", "arguments": map[string]any{"job_id": id, "from_idx": from}})
		if len(r.Raw) > budget {
			t.Fatalf("batch_status from %d: %d bytes over the %d budget", from, len(r.Raw), budget)
		}
		var res struct {
			StructuredContent batchmcp.StatusOutput `json:"structuredContent"`
		}
		r.ok(t, &res)
		if len(res.StructuredContent.Targets) == 0 {
			t.Fatalf("batch_status from %d lists no target", from)
		}
		for _, tg := range res.StructuredContent.Targets {
			seen[tg.Idx] = true
		}
		if res.StructuredContent.NextIdx == nil {
			break
		}
		from = *res.StructuredContent.NextIdx
	}
	if len(seen) != len(urls) {
		t.Fatalf("status pages listed %d targets, want %d", len(seen), len(urls))
	}
}

// TestLimits_ConcurrentSubmits: the same list submitted at once over MCP
// and HTTP is one job.
func TestLimits_ConcurrentSubmits(t *testing.T) {
	f := batchtest.NewBlockingFetcher()
	t.Cleanup(f.Release)
	const n = 6
	e := newEnv(t, f.Fetch, batchmcp.Config{MaxSubmitsPerCaller: n})
	ids := make(chan string, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			var res struct {
				StructuredContent batchmcp.SubmitOutput `json:"structuredContent"`
			}
			e.rpc(keyAlice, "2026-07-28", false).do("tools/call", submitArgs(urlShort)).ok(t, &res)
			ids <- res.StructuredContent.JobID
		})
	}
	wg.Wait()
	close(ids)
	first := ""
	for id := range ids {
		if first == "" {
			first = id
		}
		if id != first || id == "" {
			t.Fatalf("concurrent submits made jobs %q and %q", first, id)
		}
	}
}

// TestLimits_WaitsPerCaller: a caller holds at most MaxWaitsPerCaller
// waiting calls; one more is refused at once with waits_busy.
func TestLimits_WaitsPerCaller(t *testing.T) {
	f := batchtest.NewBlockingFetcher()
	t.Cleanup(f.Release)
	e := newEnv(t, f.Fetch, batchmcp.Config{MaxWaitsPerCaller: 1})
	cs := e.client(keyAlice)
	var sub batchmcp.SubmitOutput
	decode(t, call(t, cs, "batch_submit", targets(urlShort)), &sub)
	<-f.Started
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Until this wait holds the turn: the polls below may take it
		// for a second at a time.
		for call(t, cs, "batch_status", map[string]any{"job_id": sub.JobID, "wait_seconds": 30, "since": 0}).IsError {
		}
	}()
	// A second wait is refused while the first holds its turn: poll
	// until the refusal shows.
	for {
		res := call(t, e.client(keyAlice), "batch_status", map[string]any{"job_id": sub.JobID, "wait_seconds": 1, "since": 0})
		if res.IsError {
			if te := toolError(t, res); te.Code != batchhttp.CodeWaitsBusy {
				t.Fatalf("refusal %+v", te)
			}
			break
		}
	}
	// Another caller is not held back.
	res := call(t, e.client(keyBob), "batch_status", map[string]any{"job_id": sub.JobID, "wait_seconds": 1})
	if te := toolError(t, res); te.Code != batchhttp.CodeNotFound {
		t.Fatalf("bob: %+v", te)
	}
	f.Release()
	<-done
}

// TestLimits_Logs: a log line per request, with the tool, the caller and
// the job: never a URL or a host, and no error code for a restricted
// caller.
func TestLimits_Logs(t *testing.T) {
	const marker = "urlmarker0451"
	e := newEnv(t, batchtest.FailingFetcher(batch.NewFetchError(batch.OutcomeUpstream5xx, "", nil)), batchmcp.Config{})
	u := "https://" + marker + ".example.test/" + marker
	for _, key := range []string{keyAlice, keyRita} {
		cs := e.client(key)
		var sub batchmcp.SubmitOutput
		decode(t, call(t, cs, "batch_submit", targets(u)), &sub)
		waitDone(t, cs, sub.JobID)
		call(t, cs, "batch_result", map[string]any{"job_id": sub.JobID, "idx": 0})
		toolError(t, call(t, cs, "batch_result", map[string]any{"job_id": sub.JobID, "idx": 3}))
	}
	logs := e.logs.String()
	if strings.Contains(logs, marker) {
		t.Fatalf("a log line carries the URL:\n%s", logs)
	}
	var lines []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(logs), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		lines = append(lines, m)
	}
	var aliceRefused, ritaRefused, submits int
	for _, m := range lines {
		if m["msg"] != "batch mcp" {
			continue
		}
		if m["tool"] == "batch_submit" && m["job_id"] != nil && m["targets"] == 1.0 {
			submits++
		}
		if m["result"] == "tool_error" {
			switch m["caller"] {
			case "alice":
				aliceRefused++
				if m["error"] != batchhttp.CodeNotFound {
					t.Errorf("alice's refusal: %v", m)
				}
			case "rita":
				ritaRefused++
				if _, ok := m["error"]; ok {
					t.Errorf("rita's refusal carries its error: %v", m)
				}
			}
		}
	}
	if submits != 2 || aliceRefused != 1 || ritaRefused != 1 {
		t.Fatalf("submits %d, refusals alice %d rita %d in:\n%s", submits, aliceRefused, ritaRefused, logs)
	}
}

// TestLimits_Metrics: requests are counted by method, tool and result,
// with fixed labels.
func TestLimits_Metrics(t *testing.T) {
	e := newEnv(t, nil, batchmcp.Config{})
	cs := e.client(keyAlice)
	var sub batchmcp.SubmitOutput
	decode(t, call(t, cs, "batch_submit", targets(urlShort)), &sub)
	toolError(t, call(t, cs, "batch_status", map[string]any{"job_id": "nope"}))
	var b bytes.Buffer
	e.metrics.WritePrometheus(&b)
	for _, want := range []string{
		`batch_mcp_requests_total{method="tools/call",tool="batch_submit",result="ok"} 1`,
		`batch_mcp_requests_total{method="tools/call",tool="batch_status",result="tool_error"} 1`,
		`batch_mcp_request_seconds_count{method="tools/call"} 2`,
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, b.String())
		}
	}
}
