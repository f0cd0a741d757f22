package batchmcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/siftfetch/batchkit/batch"
)

// TasksExtension is the MCP extension a batch_submit becomes a task
// under: declared by the client on a request, the submit answers with the
// task (the job) as soon as the job is committed, and tasks/get reports
// its progress and, once it finished, its status as the tool result.
//
// The 2025-11-25 experimental tasks are served too, to a client that
// negotiated that revision and asks for a task with params.task:
// tasks/get, tasks/result (blocking) and tasks/cancel.
const TasksExtension = "io.modelcontextprotocol/tasks"

// The task methods.
const (
	methodTasksGet    = "tasks/get"
	methodTasksCancel = "tasks/cancel"
	methodTasksResult = "tasks/result" // 2025-11-25 only
)

// Protocol revisions the two task flavours belong to.
const (
	revisionExtension = "2026-07-28"
	revisionLegacy    = "2025-11-25"
)

// codeMissingCapability is the JSON-RPC error of a task method called
// without the extension declared.
const codeMissingCapability = -32021

// rawResult is a result the SDK has no type for, sent as it is.
type rawResult struct {
	mcp.ResultBase
	raw json.RawMessage
}

func (r *rawResult) MarshalJSON() ([]byte, error) { return r.raw, nil }

func newRaw(v any) (*rawResult, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return &rawResult{raw: b}, nil
}

// flavour is how a request speaks of tasks.
type flavour int

const (
	noTasks   flavour = iota
	extension         // 2026-07-28, the extension declared on the request
	legacy            // 2025-11-25
)

// flavourOf returns the task flavour of req, and for the extension
// whether the request declared it.
func flavourOf(req mcp.Request) (f flavour, declared bool) {
	meta := req.GetParams().GetMeta()
	if v, _ := meta[mcp.MetaKeyProtocolVersion].(string); v >= revisionExtension {
		caps, _ := meta[mcp.MetaKeyClientCapabilities].(map[string]any)
		exts, _ := caps["extensions"].(map[string]any)
		_, declared = exts[TasksExtension]
		return extension, declared
	}
	if extra := req.GetExtra(); extra != nil && extra.Header.Get("Mcp-Protocol-Version") == revisionLegacy {
		return legacy, false
	}
	return noTasks, false
}

// tasks is the middleware that turns a batch_submit into a task for a
// request that asks for one, and advertises the 2025-11-25 tasks to a
// client that negotiated that revision.
func (h *Handler) tasks(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "initialize":
			res, err := next(ctx, method, req)
			if ir, ok := res.(*mcp.InitializeResult); ok && err == nil && ir.ProtocolVersion == revisionLegacy {
				return rewrite(ir, "capabilities", legacyCapabilities)
			}
			return res, err
		case "tools/list":
			res, err := next(ctx, method, req)
			if f, _ := flavourOf(req); f == legacy && err == nil {
				return rewrite(res, "tools", legacyTools)
			}
			return res, err
		case "tools/call":
			p, ok := req.GetParams().(*mcp.CallToolParamsRaw)
			if !ok || p.Name != toolSubmit {
				break
			}
			switch f, declared := flavourOf(req); {
			case f == extension && declared:
				return h.submitTask(ctx, p.Arguments, extension)
			case f == legacy && intakeOf(ctx).task:
				return h.submitTask(ctx, p.Arguments, legacy)
			}
		}
		return next(ctx, method, req)
	}
}

// rewrite returns res with its JSON field key decoded into a T, edited
// and encoded again: a field the SDK has no type for.
func rewrite[T any](res mcp.Result, key string, edit func(*T)) (mcp.Result, error) {
	b, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	var v T
	if raw, ok := m[key]; ok {
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, err
		}
	}
	edit(&v)
	if m[key], err = json.Marshal(v); err != nil {
		return nil, err
	}
	return newRaw(m)
}

// legacyCapabilities adds the 2025-11-25 tasks to an initialize result's
// capabilities: cancel and tools/call, not list (see docs/design/mcp.md).
func legacyCapabilities(caps *map[string]any) {
	if *caps == nil {
		*caps = map[string]any{}
	}
	(*caps)["tasks"] = map[string]any{
		"cancel": map[string]any{}, "requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}},
	}
}

// legacyTools marks batch_submit as taking a 2025-11-25 task
// (execution.taskSupport "optional") in a tools/list result.
func legacyTools(tools *[]map[string]any) {
	for _, t := range *tools {
		if t["name"] == toolSubmit {
			t["execution"] = map[string]any{"taskSupport": "optional"}
		}
	}
}

// task is a job as a task: the fields both flavours share, named as the
// extension names them.
type task struct {
	ResultType     string  `json:"resultType,omitempty"`
	TaskID         string  `json:"taskId"`
	Status         string  `json:"status"`
	StatusMessage  string  `json:"statusMessage,omitempty"`
	CreatedAt      string  `json:"createdAt"`
	LastUpdatedAt  string  `json:"lastUpdatedAt"`
	TTLMs          *int64  `json:"ttlMs"`
	PollIntervalMs int64   `json:"pollIntervalMs,omitempty"`
	Result         any     `json:"result,omitempty"`
	Error          *rpcErr `json:"error,omitempty"`
}

// legacyTask is a task as 2025-11-25 names its fields.
type legacyTask struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
	TTL           *int64 `json:"ttl"`
	PollInterval  int64  `json:"pollInterval,omitempty"`
}

type rpcErr struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
}

// taskOf is info as a task of flavour f, without its result.
func (h *Handler) taskOf(info batch.JobInfo, f flavour) task {
	t := task{
		TaskID: info.ID, Status: taskStatus(info, f), StatusMessage: progress(info),
		CreatedAt: stamp(info.CreatedAt), LastUpdatedAt: stamp(info.CreatedAt),
		PollIntervalMs: h.cfg.PollInterval.Milliseconds(),
	}
	if !info.FinishedAt.IsZero() {
		t.LastUpdatedAt = stamp(info.FinishedAt)
	}
	// The task lives as long as the job: its lease, which each read
	// slides, plus the TTL, counted from the job's creation.
	ttl := max(info.ExpiresAt.Sub(info.CreatedAt).Milliseconds(), 0)
	t.TTLMs = &ttl
	return t
}

func (t task) legacy() legacyTask {
	return legacyTask{
		TaskID: t.TaskID, Status: t.Status, StatusMessage: t.StatusMessage,
		CreatedAt: t.CreatedAt, LastUpdatedAt: t.LastUpdatedAt, TTL: t.TTLMs, PollInterval: t.PollIntervalMs,
	}
}

// taskStatus maps a job's status to a task's. A job whose every target
// failed ends with a tool result with isError set: completed under the
// extension, failed under 2025-11-25.
func taskStatus(info batch.JobInfo, f flavour) string {
	switch info.Status {
	case batch.JobQueued, batch.JobRunning:
		return "working"
	case batch.JobCancelled:
		return "cancelled"
	case batch.JobFailed:
		if f == legacy {
			return "failed"
		}
	}
	return "completed"
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// submitTask submits a batch_submit as a task: the answer is the task,
// sent once the job is committed, so a tasks/get on any node finds it. A
// refused submit is answered as the plain tool call would be.
func (h *Handler) submitTask(ctx context.Context, args json.RawMessage, f flavour) (mcp.Result, error) {
	caller, _ := callerOf(ctx)
	_, job, err := h.submit(ctx, caller, args)
	if err != nil {
		return h.fail(ctx, err)
	}
	t := h.taskOf(job, f)
	t.Status = "working" // a reused job that finished already is still answered as a new task
	if f == legacy {
		return newRaw(struct {
			Task legacyTask `json:"task"`
		}{t.legacy()})
	}
	t.ResultType = "task"
	return newRaw(t)
}

// taskParams are the params of every task method.
type taskParams struct {
	mcp.ParamsBase
	TaskID string `json:"taskId"`
}

// addTaskMethods registers tasks/get, tasks/cancel and tasks/result.
func (h *Handler) addTaskMethods(s *mcp.Server) error {
	return errors.Join(
		mcp.AddReceivingCustomMethod(s, methodTasksGet, h.taskMethod(h.taskGet)),
		mcp.AddReceivingCustomMethod(s, methodTasksCancel, h.taskMethod(h.taskCancel)),
		mcp.AddReceivingCustomMethod(s, methodTasksResult, h.taskMethod(h.taskResult)),
	)
}

// taskMethod checks what every task method needs: a declared extension,
// a task id, a caller.
func (h *Handler) taskMethod(fn func(context.Context, batch.Caller, string, flavour) (*rawResult, error)) func(context.Context, *mcp.ServerSession, *taskParams) (*rawResult, error) {
	return func(ctx context.Context, _ *mcp.ServerSession, p *taskParams) (*rawResult, error) {
		f := legacy
		if v, _ := p.Meta[mcp.MetaKeyProtocolVersion].(string); v >= revisionExtension {
			f = extension
			caps, _ := p.Meta[mcp.MetaKeyClientCapabilities].(map[string]any)
			exts, _ := caps["extensions"].(map[string]any)
			if _, ok := exts[TasksExtension]; !ok {
				recordOf(ctx).code = "missing_capability"
				return nil, &jsonrpc.Error{
					Code: codeMissingCapability, Message: "the " + TasksExtension + " extension is not declared on this request",
					Data: json.RawMessage(`{"requiredCapabilities":{"extensions":{"` + TasksExtension + `":{}}}}`),
				}
			}
		}
		if p.TaskID == "" {
			recordOf(ctx).code = "invalid_request"
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "invalid params: taskId: required"}
		}
		caller, ok := callerOf(ctx)
		if !ok {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "internal error"}
		}
		recordOf(ctx).jobID = p.TaskID
		return fn(ctx, caller, p.TaskID, f)
	}
}

// taskNotFound answers an unknown task id and another caller's alike.
func taskNotFound(ctx context.Context) error {
	recordOf(ctx).code = notFound.code
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "task not found"}
}

// taskFailure answers a task method whose runner call failed.
func (h *Handler) taskFailure(ctx context.Context, err error) error {
	r := refusalFor(err, 0)
	if r == notFound {
		return taskNotFound(ctx)
	}
	recordOf(ctx).code = r.code
	return r.rpcError()
}

// taskGet serves tasks/get: the task, with the final tool result inlined
// under the extension once the job finished.
func (h *Handler) taskGet(ctx context.Context, caller batch.Caller, id string, f flavour) (*rawResult, error) {
	info, err := h.cfg.Runner.Status(ctx, caller, id, batch.StatusOptions{Touch: true, JobOnly: true})
	if err != nil {
		return nil, h.taskFailure(ctx, err)
	}
	recordOf(ctx).status = string(info.Status)
	if f == legacy {
		return newRaw(h.taskOf(info, f).legacy())
	}
	t := h.taskOf(info, f)
	t.ResultType = "complete"
	if t.Status == "completed" {
		res, err := h.finalResult(ctx, caller, id)
		if err != nil {
			return nil, h.taskFailure(ctx, err)
		}
		t.Result = res
	}
	return newRaw(t)
}

// taskReserve is the room a task answer keeps, beside its inlined
// result, for the task's own fields.
const taskReserve = 512

// finalResult is a finished task's tool result: the job's status with a
// resource link per done target, never the contents, bounded as every
// answer is.
func (h *Handler) finalResult(ctx context.Context, caller batch.Caller, id string) (*mcp.CallToolResult, error) {
	info, err := h.cfg.Runner.Status(ctx, caller, id, batch.StatusOptions{})
	if err != nil {
		return nil, err
	}
	res, err := h.statusResult(info, 0, taskReserve)
	if err != nil {
		return nil, err
	}
	res.IsError = info.Status == batch.JobFailed
	return res, nil
}

// taskCancel serves tasks/cancel. Under the extension it acknowledges,
// also a task that finished already (cancellation is cooperative); under
// 2025-11-25 it answers the task, cancelled, and refuses a finished one.
func (h *Handler) taskCancel(ctx context.Context, caller batch.Caller, id string, f flavour) (*rawResult, error) {
	err := h.cfg.Runner.Cancel(ctx, caller, id)
	switch {
	case err == nil:
		recordOf(ctx).status = string(batch.JobCancelled)
	case isFinished(err) && f == extension:
	case isFinished(err):
		info, serr := h.cfg.Runner.Status(ctx, caller, id, batch.StatusOptions{JobOnly: true})
		if serr != nil {
			return nil, h.taskFailure(ctx, serr)
		}
		recordOf(ctx).code = "job_finished"
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
			Message: fmt.Sprintf("cannot cancel task: already in terminal status %q", taskStatus(info, f))}
	default:
		return nil, h.taskFailure(ctx, err)
	}
	if f == extension {
		return newRaw(map[string]string{"resultType": "complete"})
	}
	info, err := h.cfg.Runner.Status(ctx, caller, id, batch.StatusOptions{JobOnly: true})
	if err != nil {
		return nil, h.taskFailure(ctx, err)
	}
	return newRaw(h.taskOf(info, f).legacy())
}

// taskResult serves the 2025-11-25 tasks/result: it waits until the job
// finished, then answers its tool result.
func (h *Handler) taskResult(ctx context.Context, caller batch.Caller, id string, f flavour) (*rawResult, error) {
	if f != legacy {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found: tasks/result is not part of the " + TasksExtension + " extension; use tasks/get"}
	}
	if !h.waits.acquire(caller.Name) {
		recordOf(ctx).code = waitsBusy.code
		return nil, waitsBusy.rpcError()
	}
	defer h.waits.release(caller.Name)
	for {
		start := time.Now()
		info, err := h.cfg.Runner.Wait(ctx, caller, id, batch.WaitOptions{
			StatusOptions: batch.StatusOptions{Touch: true, JobOnly: true}, Timeout: batch.MaxWait,
		})
		if err != nil {
			return nil, h.taskFailure(ctx, err)
		}
		if info.Status.Finished() {
			break
		}
		// A wait that ended early without the job finishing (the runner
		// is closing) is paced at the poll interval.
		if d := h.cfg.PollInterval - time.Since(start); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		if ctx.Err() != nil {
			return nil, h.taskFailure(ctx, ctx.Err())
		}
	}
	res, err := h.finalResult(ctx, caller, id)
	if err != nil {
		return nil, h.taskFailure(ctx, err)
	}
	recordOf(ctx).status = "finished"
	res.Meta = mcp.Meta{"io.modelcontextprotocol/related-task": map[string]string{"taskId": id}}
	return newRaw(res)
}
