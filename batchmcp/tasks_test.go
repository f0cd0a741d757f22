package batchmcp_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchmcp"
)

// extTask is a task as the 2026-07-28 extension answers it.
type extTask struct {
	ResultType     string `json:"resultType"`
	TaskID         string `json:"taskId"`
	Status         string `json:"status"`
	StatusMessage  string `json:"statusMessage"`
	CreatedAt      string `json:"createdAt"`
	LastUpdatedAt  string `json:"lastUpdatedAt"`
	TTLMs          *int64 `json:"ttlMs"`
	PollIntervalMs int64  `json:"pollIntervalMs"`
	Result         *struct {
		Content []struct {
			Type string `json:"type"`
			URI  string `json:"uri"`
			Text string `json:"text"`
		} `json:"content"`
		StructuredContent batchmcp.StatusOutput `json:"structuredContent"`
		IsError           bool                  `json:"isError"`
	} `json:"result"`
}

// submitArgs are a tools/call of batch_submit with urls.
func submitArgs(urls ...string) map[string]any {
	return map[string]any{"name": "batch_submit", "arguments": targets(urls...)}
}

// TestTasks_Extension: under the 2026-07-28 extension a declared
// batch_submit is a task whose id is the job's; tasks/get reports it
// working, then completed with the status inlined and bounded.
func TestTasks_Extension(t *testing.T) {
	f := batchtest.NewBlockingFetcher()
	t.Cleanup(f.Release)
	e := newEnv(t, f.Fetch, batchmcp.Config{MaxAnswerBytes: 8192})
	c := e.rpc(keyAlice, "2026-07-28", true)

	var disc struct {
		Capabilities struct {
			Extensions map[string]any `json:"extensions"`
		} `json:"capabilities"`
	}
	c.do("server/discover", nil).ok(t, &disc)
	if _, ok := disc.Capabilities.Extensions[batchmcp.TasksExtension]; !ok {
		t.Fatalf("server/discover does not advertise the extension: %+v", disc)
	}

	var created extTask
	c.do("tools/call", submitArgs(urlShort, urlLong)).ok(t, &created)
	if created.ResultType != "task" || created.Status != "working" || created.TaskID == "" || created.TTLMs == nil ||
		*created.TTLMs <= 0 || created.PollIntervalMs != batchmcp.DefaultPollInterval.Milliseconds() || created.StatusMessage == "" {
		t.Fatalf("created: %+v", created)
	}
	if _, err := time.Parse(time.RFC3339, created.CreatedAt); err != nil {
		t.Fatalf("createdAt %q: %v", created.CreatedAt, err)
	}
	// The task is the job: the HTTP API knows it by the same id.
	if code, body := e.httpGet("/v1/batch/"+created.TaskID, keyAlice); code != 200 {
		t.Fatalf("GET /v1/batch/%s: %d %s", created.TaskID, code, body)
	}
	<-f.Started
	var working extTask
	c.do("tasks/get", map[string]any{"taskId": created.TaskID}).ok(t, &working)
	if working.ResultType != "complete" || working.Status != "working" || working.Result != nil ||
		!strings.Contains(working.StatusMessage, "of 2 targets") {
		t.Fatalf("working: %+v", working)
	}
	f.Release()
	f.Release()

	var done extTask
	reply := pollTask(t, c, created.TaskID, "completed", &done)
	if len(reply.Raw) > 8192 {
		t.Fatalf("tasks/get answered %d bytes, over the 8192 budget", len(reply.Raw))
	}
	st := done.Result.StructuredContent
	if done.Result.IsError || st.JobID != created.TaskID || st.Status != batch.JobDone || len(st.Targets) != 2 {
		t.Fatalf("completed: %+v", done.Result)
	}
	var links []string
	for _, c := range done.Result.Content {
		if c.Type == "resource_link" {
			links = append(links, c.URI)
		}
	}
	if len(links) != 2 || links[1] != "batch://"+created.TaskID+"/1" {
		t.Fatalf("links %v", links)
	}
	if strings.Contains(string(reply.Raw), `"content":"ok"`) {
		t.Fatal("the final result carries a body")
	}
	if done.LastUpdatedAt < done.CreatedAt {
		t.Fatalf("lastUpdatedAt %s before createdAt %s", done.LastUpdatedAt, done.CreatedAt)
	}
}

// pollTask polls tasks/get until the task has status want.
func pollTask(t *testing.T, c *rpc, id, want string, v *extTask) rpcReply {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := c.do("tasks/get", map[string]any{"taskId": id})
		*v = extTask{}
		r.ok(t, v)
		if v.Status == want {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s still %s, want %s", id, v.Status, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTasks_ExtensionCancel: tasks/cancel cancels the job and
// acknowledges; tasks/get and the HTTP API say cancelled; a cancel of a
// finished task is acknowledged too.
func TestTasks_ExtensionCancel(t *testing.T) {
	f := batchtest.NewBlockingFetcher()
	t.Cleanup(f.Release)
	e := newEnv(t, f.Fetch, batchmcp.Config{})
	c := e.rpc(keyAlice, "2026-07-28", true)
	var created extTask
	c.do("tools/call", submitArgs(urlShort, urlLong)).ok(t, &created)
	<-f.Started

	var ack map[string]any
	c.do("tasks/cancel", map[string]any{"taskId": created.TaskID}).ok(t, &ack)
	if len(ack) != 1 || ack["resultType"] != "complete" {
		t.Fatalf("cancel ack %v", ack)
	}
	var got extTask
	c.do("tasks/get", map[string]any{"taskId": created.TaskID}).ok(t, &got)
	if got.Status != "cancelled" || got.Result != nil {
		t.Fatalf("after cancel: %+v", got)
	}
	if code, body := e.httpGet("/v1/batch/"+created.TaskID, keyAlice); code != 200 || !strings.Contains(string(body), `"status":"cancelled"`) {
		t.Fatalf("HTTP after a task cancel: %d %s", code, body)
	}
	c.do("tasks/cancel", map[string]any{"taskId": created.TaskID}).ok(t, &ack)
}

// TestTasks_ExtensionRefusals: another caller's task answers exactly as
// an unknown one; an undeclared request gets a plain result, and a task
// method without the extension -32021.
func TestTasks_ExtensionRefusals(t *testing.T) {
	e := newEnv(t, nil, batchmcp.Config{})
	alice := e.rpc(keyAlice, "2026-07-28", true)
	var created extTask
	alice.do("tools/call", submitArgs(urlShort)).ok(t, &created)

	bob := e.rpc(keyBob, "2026-07-28", true)
	const unknown = "00000000-0000-4000-8000-000000000000"
	for _, method := range []string{"tasks/get", "tasks/cancel"} {
		theirs := bob.do(method, map[string]any{"taskId": created.TaskID})
		none := bob.do(method, map[string]any{"taskId": unknown})
		if theirs.Error == nil || theirs.Error.Code != -32602 || !sameError(theirs, none) {
			t.Errorf("%s of another caller's task: %s; of an unknown one: %s", method, theirs.Raw, none.Raw)
		}
	}
	// Alice's task is still live to her: bob's cancel did nothing.
	var got extTask
	pollTask(t, alice, created.TaskID, "completed", &got)

	plain := e.rpc(keyAlice, "2026-07-28", false)
	var res struct {
		ResultType        string          `json:"resultType"`
		TaskID            string          `json:"taskId"`
		StructuredContent json.RawMessage `json:"structuredContent"`
	}
	plain.do("tools/call", submitArgs(urlLong)).ok(t, &res)
	if res.TaskID != "" || res.ResultType == "task" || !strings.Contains(string(res.StructuredContent), `"job_id"`) {
		t.Fatalf("undeclared submit: %+v", res)
	}
	r := plain.do("tasks/get", map[string]any{"taskId": created.TaskID})
	if r.Error == nil || r.Error.Code != -32021 || !strings.Contains(string(r.Error.Data), batchmcp.TasksExtension) {
		t.Fatalf("undeclared tasks/get: %s", r.Raw)
	}
	// A refused submit is answered as the plain call would be.
	r = alice.do("tools/call", map[string]any{"name": "batch_submit", "arguments": map[string]any{"targets": []any{}}})
	if r.Error == nil || r.Error.Code != -32602 {
		t.Fatalf("refused task submit: %s", r.Raw)
	}
}

// legacyTask is a task as 2025-11-25 answers it.
type legacyTask struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
	TTL           *int64 `json:"ttl"`
	PollInterval  int64  `json:"pollInterval"`
}

// initLegacy initializes a 2025-11-25 session and returns the
// capabilities the server answered.
func initLegacy(t *testing.T, c *rpc) map[string]any {
	t.Helper()
	var init struct {
		ProtocolVersion string         `json:"protocolVersion"`
		Capabilities    map[string]any `json:"capabilities"`
	}
	c.do("initialize", map[string]any{
		"protocolVersion": "2025-11-25", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "raw", "version": "1"},
	}).ok(t, &init)
	if init.ProtocolVersion != "2025-11-25" {
		t.Fatalf("negotiated %q", init.ProtocolVersion)
	}
	return init.Capabilities
}

// TestTasks_Legacy: the 2025-11-25 flavour, for a client that
// negotiated that revision and asks with params.task.
func TestTasks_Legacy(t *testing.T) {
	f := batchtest.NewBlockingFetcher()
	t.Cleanup(f.Release)
	e := newEnv(t, f.Fetch, batchmcp.Config{})
	c := e.rpc(keyAlice, "2025-11-25", false)
	caps := initLegacy(t, c)
	tasks, _ := json.Marshal(caps["tasks"])
	if string(tasks) != `{"cancel":{},"requests":{"tools":{"call":{}}}}` {
		t.Fatalf("capabilities.tasks %s", tasks)
	}
	var list struct {
		Tools []struct {
			Name      string         `json:"name"`
			Execution map[string]any `json:"execution"`
		} `json:"tools"`
	}
	c.do("tools/list", nil).ok(t, &list)
	for _, tl := range list.Tools {
		if want := tl.Name == "batch_submit"; want != (tl.Execution["taskSupport"] == "optional") {
			t.Errorf("%s: execution %v", tl.Name, tl.Execution)
		}
	}

	args := submitArgs(urlShort, urlLong)
	args["task"] = map[string]any{"ttl": 60000}
	var created struct {
		Task legacyTask `json:"task"`
	}
	c.do("tools/call", args).ok(t, &created)
	id := created.Task.TaskID
	if id == "" || created.Task.Status != "working" || created.Task.TTL == nil || created.Task.PollInterval == 0 {
		t.Fatalf("created %+v", created)
	}
	<-f.Started
	var got legacyTask
	c.do("tasks/get", map[string]any{"taskId": id}).ok(t, &got)
	if got.TaskID != id || got.Status != "working" {
		t.Fatalf("tasks/get %+v", got)
	}
	// tasks/result blocks until the job finished.
	results := make(chan rpcReply, 1)
	go func() { results <- c.do("tasks/result", map[string]any{"taskId": id}) }()
	select {
	case r := <-results:
		t.Fatalf("tasks/result answered a live task: %s", r.Raw)
	case <-time.After(100 * time.Millisecond):
	}
	f.Release()
	f.Release()
	var res struct {
		Meta              map[string]map[string]string `json:"_meta"`
		StructuredContent batchmcp.StatusOutput        `json:"structuredContent"`
		IsError           bool                         `json:"isError"`
	}
	(<-results).ok(t, &res)
	if res.Meta["io.modelcontextprotocol/related-task"]["taskId"] != id || res.StructuredContent.Status != batch.JobDone || res.IsError {
		t.Fatalf("tasks/result %+v", res)
	}
	c.do("tasks/get", map[string]any{"taskId": id}).ok(t, &got)
	if got.Status != "completed" {
		t.Fatalf("after the result: %+v", got)
	}
	// A finished task cannot be cancelled.
	if r := c.do("tasks/cancel", map[string]any{"taskId": id}); r.Error == nil || r.Error.Code != -32602 || !strings.Contains(r.Error.Message, "completed") {
		t.Fatalf("cancel of a finished task: %s", r.Raw)
	}
	// Another caller's task is unknown.
	bob := e.rpc(keyBob, "2025-11-25", false)
	initLegacy(t, bob)
	for _, method := range []string{"tasks/get", "tasks/result", "tasks/cancel"} {
		theirs := bob.do(method, map[string]any{"taskId": id})
		none := bob.do(method, map[string]any{"taskId": "00000000-0000-4000-8000-000000000000"})
		if theirs.Error == nil || theirs.Error.Code != -32602 || !sameError(theirs, none) {
			t.Errorf("%s of another caller's task: %s; of an unknown one: %s", method, theirs.Raw, none.Raw)
		}
	}
	// Without params.task, a plain result.
	var plain struct {
		Task              *legacyTask     `json:"task"`
		StructuredContent json.RawMessage `json:"structuredContent"`
	}
	c.do("tools/call", submitArgs(urlFailed)).ok(t, &plain)
	if plain.Task != nil || !strings.Contains(string(plain.StructuredContent), `"job_id"`) {
		t.Fatalf("submit without a task: %+v", plain)
	}
}

// TestTasks_LegacyCancel: a live task cancelled answers the task,
// cancelled; a job whose every target failed is a failed task.
func TestTasks_LegacyCancel(t *testing.T) {
	f := batchtest.NewBlockingFetcher()
	t.Cleanup(f.Release)
	e := newEnv(t, f.Fetch, batchmcp.Config{})
	c := e.rpc(keyAlice, "2025-11-25", false)
	initLegacy(t, c)
	args := submitArgs(urlShort)
	args["task"] = map[string]any{}
	var created struct {
		Task legacyTask `json:"task"`
	}
	c.do("tools/call", args).ok(t, &created)
	<-f.Started
	var got legacyTask
	c.do("tasks/cancel", map[string]any{"taskId": created.Task.TaskID}).ok(t, &got)
	if got.Status != "cancelled" || got.TaskID != created.Task.TaskID {
		t.Fatalf("cancel %+v", got)
	}
}

func TestTasks_LegacyFailed(t *testing.T) {
	e := newEnv(t, scripted(""), batchmcp.Config{})
	c := e.rpc(keyAlice, "2025-11-25", false)
	initLegacy(t, c)
	args := submitArgs(urlFailed)
	args["task"] = map[string]any{"ttl": 1000}
	var created struct {
		Task legacyTask `json:"task"`
	}
	c.do("tools/call", args).ok(t, &created)
	var res struct {
		IsError bool `json:"isError"`
	}
	c.do("tasks/result", map[string]any{"taskId": created.Task.TaskID}).ok(t, &res)
	var got legacyTask
	c.do("tasks/get", map[string]any{"taskId": created.Task.TaskID}).ok(t, &got)
	if !res.IsError || got.Status != "failed" {
		t.Fatalf("a job whose every target failed: isError %v, status %q", res.IsError, got.Status)
	}
	// Under the extension the same job is completed, with isError.
	var ext extTask
	e.rpc(keyAlice, "2026-07-28", true).do("tasks/get", map[string]any{"taskId": created.Task.TaskID}).ok(t, &ext)
	if ext.Status != "completed" || ext.Result == nil || !ext.Result.IsError {
		t.Fatalf("under the extension: %+v", ext)
	}
}

// sameError reports whether two answers carry the same error, byte for
// byte (their JSON-RPC ids differ).
func sameError(a, b rpcReply) bool {
	ea, _ := json.Marshal(a.Error)
	eb, _ := json.Marshal(b.Error)
	return a.Status == b.Status && string(ea) == string(eb)
}
