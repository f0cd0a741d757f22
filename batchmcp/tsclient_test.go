package batchmcp_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchmcp"
)

// tsClientEnv finds node and npm's @modelcontextprotocol/sdk (in the
// node_modules directory $BATCHKIT_MCP_NODE_DIR) for the TypeScript SDK's
// test. It skips when one is missing, and fails instead under CI=true,
// where .ci/run installs them.
func tsClientEnv(t *testing.T) (node, modules string) {
	t.Helper()
	missing := func(what string) {
		t.Helper()
		msg := what + " (.ci/run installs @modelcontextprotocol/sdk with npm and sets $BATCHKIT_MCP_NODE_DIR to its node_modules)"
		if os.Getenv("CI") == "true" {
			t.Fatal("the TypeScript SDK test needs " + msg)
		}
		t.Skip("needs " + msg)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node")
	}
	modules = os.Getenv("BATCHKIT_MCP_NODE_DIR")
	if modules == "" {
		missing("$BATCHKIT_MCP_NODE_DIR")
	}
	b, err := os.ReadFile(filepath.Join(modules, "@modelcontextprotocol", "sdk", "package.json"))
	var pkg struct {
		Version string `json:"version"`
	}
	if err != nil || json.Unmarshal(b, &pkg) != nil {
		missing("the npm package @modelcontextprotocol/sdk in " + modules)
	}
	t.Logf("node %s, @modelcontextprotocol/sdk %s", node, pkg.Version)
	return node, modules
}

// The TypeScript SDK test's targets.
const (
	tsURLText = "https://example.test/text" // a few KB of text of one- to four-byte characters
	tsURLTask = "https://example.test/task"
	tsURLHold = "https://example.test/hold" // runs until the test ends or the fetch is cancelled
)

// tsReport is what testdata/tsclient.mjs prints.
type tsReport struct {
	Protocol     string `json:"protocol"`
	Capabilities struct {
		Tasks *struct {
			Cancel   *struct{} `json:"cancel"`
			Requests struct {
				Tools struct {
					Call *struct{} `json:"call"`
				} `json:"tools"`
			} `json:"requests"`
		} `json:"tasks"`
	} `json:"capabilities"`
	Tools     []string `json:"tools"`
	Execution map[string]*struct {
		TaskSupport string `json:"taskSupport"`
	} `json:"execution"`
	Submit      batchmcp.SubmitOutput `json:"submit"`
	Status      batch.JobStatus       `json:"status"`
	StatusPolls int                   `json:"status_polls"`
	JobID       string                `json:"job_id"`
	Content0    string                `json:"content0"`
	Pages       int                   `json:"pages"`
	Task        *tsTask               `json:"task"`
	Cancel      *tsTask               `json:"cancel"`
}

// tsTask is one task call of the script: what the SDK's task stream
// yielded.
type tsTask struct {
	TaskID        string   `json:"task_id"`
	CreatedStatus string   `json:"created_status"`
	Statuses      []string `json:"statuses"`
	Result        *struct {
		IsError           bool                  `json:"isError"`
		StructuredContent batchmcp.StatusOutput `json:"structuredContent"`
	} `json:"result"`
	Error  *string `json:"error"`
	Cancel *struct {
		Status string `json:"status"`
		Error  string `json:"error"`
	} `json:"cancel"`
	After *struct {
		Status string `json:"status"`
		Error  string `json:"error"`
	} `json:"after"`
}

// TestTypeScriptSDK drives the server with the official TypeScript SDK's
// client (testdata/tsclient.mjs, on node): the four tools listed, a
// submit, status with wait until the job finished, target 0's content
// read in pages whose concatenation is the HTTP API's content (the SDK
// checks every structured output against the tool's output schema), and
// the 2025-11-25 tasks through client.experimental.tasks: batch_submit as
// a task polled to its result, and a task cancelled with tasks/cancel.
func TestTypeScriptSDK(t *testing.T) {
	t.Parallel()
	node, modules := tsClientEnv(t)
	text := longText(6000)
	hold := make(chan struct{})
	e := newEnv(t, func(ctx context.Context, _ batch.Caller, tg batch.Target) (batch.Result, error) {
		switch tg.URL {
		case tsURLText:
			return batch.Result{Content: text}, nil
		case tsURLHold:
			select {
			case <-hold:
			case <-ctx.Done():
				return batch.Result{}, context.Cause(ctx)
			}
		}
		return batch.Result{Content: "ok"}, nil
	}, batchmcp.Config{PollInterval: 50 * time.Millisecond})
	t.Cleanup(func() { close(hold) }) // before the runner closes

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "testdata/tsclient.mjs")
	cmd.Env = append(os.Environ(),
		"NODE_PATH="+modules,
		"MCP_URL="+e.srv.URL+batchmcp.Path,
		"MCP_KEY="+keyAlice,
		`TARGETS=["`+tsURLText+`","https://example.test/other"]`,
		"MAX_BYTES=1000",
		`TASK_TARGETS=["`+tsURLTask+`"]`,
		`CANCEL_TARGETS=["`+tsURLHold+`"]`,
		"TIMEOUT_MS=60000",
	)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	if err != nil || !strings.Contains(stderr.String(), "tsclient: ok") {
		t.Fatalf("tsclient.mjs: %v\nstderr:\n%s\nstdout:\n%s", err, stderr.String(), out)
	}
	t.Logf("tsclient.mjs:\n%s", stderr.String())
	var r tsReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%v in %s", err, out)
	}

	// What a 2025-11-25 client is told.
	if r.Protocol != "2025-11-25" {
		t.Errorf("protocol %q, want 2025-11-25 (the SDK's latest)", r.Protocol)
	}
	if tk := r.Capabilities.Tasks; tk == nil || tk.Cancel == nil || tk.Requests.Tools.Call == nil {
		t.Errorf("capabilities.tasks lacks cancel or requests.tools.call: %s", out)
	}
	tools := slices.Sorted(slices.Values(r.Tools))
	if want := []string{"batch_cancel", "batch_result", "batch_status", "batch_submit"}; !slices.Equal(tools, want) {
		t.Errorf("tools %v, want %v", tools, want)
	}
	if ex := r.Execution["batch_submit"]; ex == nil || ex.TaskSupport != "optional" {
		t.Errorf("batch_submit's execution %+v, want taskSupport optional", ex)
	}

	// The plain flow, and the content as the HTTP API has it.
	if r.Submit.JobID == "" || r.Submit.JobID != r.JobID || r.Submit.Targets != 2 || r.Submit.Reused {
		t.Errorf("submit %+v", r.Submit)
	}
	if r.Status != batch.JobDone {
		t.Errorf("status %q after %d status calls, want done", r.Status, r.StatusPolls)
	}
	if r.Pages < 6 {
		t.Errorf("target 0 came in %d pages; at max_bytes 1000, want 6 or more", r.Pages)
	}
	if api := httpContent(t, e, r.JobID, 0, keyAlice); r.Content0 != api || api != text {
		t.Errorf("the paged content (%d bytes) differs from the HTTP API's (%d bytes) or the fetched text (%d bytes)",
			len(r.Content0), len(api), len(text))
	}

	// batch_submit as a task: the task is the job, and its result the
	// job's status.
	switch tk := r.Task; {
	case tk == nil:
		t.Error("no task report")
	case tk.Error != nil:
		t.Errorf("task %s: %s (statuses %v)", tk.TaskID, *tk.Error, tk.Statuses)
	case tk.TaskID == "" || tk.CreatedStatus != "working" || len(tk.Statuses) == 0 || tk.Statuses[len(tk.Statuses)-1] != "completed":
		t.Errorf("task %s: created %q, then %v; want working, then completed", tk.TaskID, tk.CreatedStatus, tk.Statuses)
	case tk.Result == nil || tk.Result.IsError:
		t.Errorf("task %s: result %+v", tk.TaskID, tk.Result)
	default:
		st := tk.Result.StructuredContent
		if st.JobID != tk.TaskID || st.Status != batch.JobDone || st.TargetsDone != 1 || len(st.Targets) != 1 ||
			st.Targets[0].Resource != "batch://"+tk.TaskID+"/0" {
			t.Errorf("task %s: result %+v", tk.TaskID, st)
		}
		if code, body := e.httpGet("/v1/batch/"+tk.TaskID, keyAlice); code != 200 || !strings.Contains(string(body), `"status":"done"`) {
			t.Errorf("the task's job over HTTP: %d %s", code, body)
		}
	}

	// A task cancelled with tasks/cancel: the SDK's stream ends with the
	// task cancelled, and the job is cancelled over HTTP too.
	switch tk := r.Cancel; {
	case tk == nil:
		t.Error("no cancel report")
	case tk.TaskID == "" || tk.CreatedStatus != "working":
		t.Errorf("cancelled task %q: created %q", tk.TaskID, tk.CreatedStatus)
	case tk.Cancel == nil || tk.Cancel.Status != "cancelled":
		t.Errorf("task %s: tasks/cancel answered %+v", tk.TaskID, tk.Cancel)
	case len(tk.Statuses) == 0 || tk.Statuses[len(tk.Statuses)-1] != "cancelled" || tk.Error == nil ||
		!strings.Contains(*tk.Error, "cancelled") || tk.Result != nil:
		t.Errorf("task %s after tasks/cancel: statuses %v, error %v, result %+v", tk.TaskID, tk.Statuses, tk.Error, tk.Result)
	case tk.After == nil || tk.After.Status != "cancelled":
		t.Errorf("task %s: tasks/get after the stream: %+v", tk.TaskID, tk.After)
	default:
		if code, body := e.httpGet("/v1/batch/"+tk.TaskID, keyAlice); code != 200 || !strings.Contains(string(body), `"status":"cancelled"`) {
			t.Errorf("the cancelled task's job over HTTP: %d %s", code, body)
		}
	}
}
