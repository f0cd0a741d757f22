package batchmcp

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
)

// A refusal is how a call fails, in one of two forms. Input the caller
// must change (bad arguments, too many targets, a blocked URL) is a
// JSON-RPC error, -32602 with the stable code and hint in its data. A
// refusal of well-formed input (an unknown job, a busy service) is a tool
// result with isError set, its text the JSON of [ToolError], which a
// model reads and acts on. Both carry the HTTP API's stable codes
// (batchhttp.Code…).
type refusal struct {
	protocol   bool // a JSON-RPC error, not a tool error
	code       string
	msg        string
	hint       string
	retryAfter int // seconds
}

func (r *refusal) Error() string { return r.msg }

// ToolError is the JSON text of a tool result with isError set.
type ToolError struct {
	Code  string `json:"code"`
	Error string `json:"error"`
	Hint  string `json:"hint,omitempty"`
	// RetryAfterSeconds is how long to wait before trying again, for a
	// busy or unavailable service.
	RetryAfterSeconds int `json:"retry_after_seconds,omitempty"`
}

// invalidArgs is the refusal of a tool's arguments.
func invalidArgs(format string, args ...any) *refusal {
	return &refusal{protocol: true, code: batchhttp.CodeInvalidRequest, msg: "invalid arguments: " + fmt.Sprintf(format, args...)}
}

// notFound is the one answer to an unknown job, another caller's job and
// an idx outside the job.
var notFound = &refusal{
	code: batchhttp.CodeNotFound, msg: "not found",
	hint: "check the job_id; a finished job is kept for a while after its last read, then deleted",
}

// refusalFor maps an error of the runner to a refusal. maxTargets fills
// the message of batch.ErrTooManyTargets.
func refusalFor(err error, maxTargets int) *refusal {
	if r, ok := errors.AsType[*refusal](err); ok {
		return r
	}
	switch {
	case errors.Is(err, batch.ErrNotFound):
		return notFound
	case errors.Is(err, batch.ErrTooManyTargets):
		return tooManyTargets(maxTargets)
	case errors.Is(err, batch.ErrDeadlineTooFar):
		return &refusal{protocol: true, code: batchhttp.CodeDeadlineTooFar, msg: "deadline too far" + reasonOf(err, batch.ErrDeadlineTooFar),
			hint: "ask for an earlier deadline, or none for the server's default"}
	case errors.Is(err, batch.ErrInvalidDeadline):
		return &refusal{protocol: true, code: batchhttp.CodeInvalidBatch, msg: "invalid batch: deadline" + reasonOf(err, batch.ErrInvalidDeadline)}
	case errors.Is(err, batch.ErrInvalidMetadata):
		return &refusal{protocol: true, code: batchhttp.CodeInvalidBatch, msg: "invalid batch: metadata" + reasonOf(err, batch.ErrInvalidMetadata)}
	case errors.Is(err, batch.ErrNoTargets):
		return &refusal{protocol: true, code: batchhttp.CodeInvalidBatch, msg: "invalid batch: no targets"}
	case errors.Is(err, batch.ErrInvalidTarget):
		msg := "invalid batch: invalid target"
		if te, ok := errors.AsType[*batch.TargetError](err); ok {
			msg = fmt.Sprintf("invalid batch: targets[%d]: %s", te.Index, te.Reason)
		}
		return &refusal{protocol: true, code: batchhttp.CodeInvalidBatch, msg: msg}
	case errors.Is(err, batch.ErrCallerBusy):
		return &refusal{
			code: batchhttp.CodeCallerBusy, msg: "busy: a batch of yours is still running", retryAfter: 30,
			hint: "wait for it (batch_status with wait_seconds) or cancel it (batch_cancel)",
		}
	case errors.Is(err, batch.ErrBusy):
		return &refusal{code: batchhttp.CodeJobsBusy, msg: "batch jobs busy", retryAfter: 60}
	case errors.Is(err, batch.ErrClosed), errors.Is(err, batch.ErrNotStarted), errors.Is(err, batch.ErrUnavailable),
		errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, context.Canceled): // the client left, or the server is stopping: no one's fault
		return &refusal{code: batchhttp.CodeUnavailable, msg: "batch jobs unavailable", retryAfter: 5}
	}
	return &refusal{protocol: true, code: batchhttp.CodeInternal, msg: "internal error"}
}

// reasonOf is ": " and what err adds to its sentinel's message, or "".
func reasonOf(err, sentinel error) string {
	if _, reason, ok := strings.Cut(err.Error(), sentinel.Error()+": "); ok {
		return ": " + reason
	}
	return ""
}

func tooManyTargets(max int) *refusal {
	return &refusal{
		protocol: true, code: batchhttp.CodeTooManyTargets, msg: fmt.Sprintf("too many targets (max %d)", max),
		hint: fmt.Sprintf("split the list into jobs of at most %d targets", max),
	}
}

// waitsBusy refuses a wait over Config.MaxWaitsPerCaller.
var waitsBusy = &refusal{
	code: batchhttp.CodeWaitsBusy, msg: "busy: too many of your calls are waiting at once", retryAfter: 5,
	hint: "wait for one to return, or call without wait_seconds",
}

// submitsBusy refuses a submit over Config.MaxSubmitsPerCaller.
var submitsBusy = &refusal{
	code: batchhttp.CodeSubmitsBusy, msg: "busy: too many of your submits are in flight at once", retryAfter: 5,
	hint: "wait for one to be answered",
}

// fail turns err into the answer of a tool call: a tool result with
// isError, or a JSON-RPC error. It records the refusal's code for the log
// line.
func (h *Handler) fail(ctx context.Context, err error) (*mcp.CallToolResult, error) {
	r := refusalFor(err, h.cfg.Runner.TargetsPerJob())
	recordOf(ctx).code = r.code
	if r.protocol {
		return nil, r.rpcError()
	}
	text, merr := json.Marshal(ToolError{Code: r.code, Error: r.msg, Hint: r.hint, RetryAfterSeconds: r.retryAfter})
	if merr != nil {
		return nil, merr
	}
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: string(text)}}}, nil
}

// rpcError is r as a JSON-RPC error, with its code, hint and retry-after
// in the data: -32602 for input the caller must change, -32603 for any
// other refusal (a task method or a resource read has no tool result to
// carry it in).
func (r *refusal) rpcError() error {
	code := int64(jsonrpc.CodeInvalidParams)
	if !r.protocol || r.code == batchhttp.CodeInternal {
		code = jsonrpc.CodeInternalError
	}
	data, _ := json.Marshal(struct {
		Code              string `json:"code"`
		Hint              string `json:"hint,omitempty"`
		RetryAfterSeconds int    `json:"retry_after_seconds,omitempty"`
	}{r.code, r.hint, r.retryAfter})
	return &jsonrpc.Error{Code: code, Message: r.msg, Data: data}
}

// blocked is the refusal of a URL the pre-check refused with err. Its
// reason may name the host: it goes to the caller only.
func blocked(i int, err error) *refusal {
	reason := cmp.Or(strings.TrimPrefix(err.Error(), "blocked: "), "refused")
	r := &refusal{protocol: true, code: batchhttp.CodeBlocked, msg: fmt.Sprintf("blocked: targets[%d]: %s", i, reason)}
	if he, ok := errors.AsType[batch.HintError](err); ok {
		r.hint = he.Hint()
	}
	return r
}

// invalidOption is the refusal of a target the host's option check
// refused.
func invalidOption(i int, err error) *refusal {
	r := &refusal{
		protocol: true, code: batchhttp.CodeInvalidOption,
		msg: fmt.Sprintf("invalid option: targets[%d]: %s", i, cmp.Or(err.Error(), "refused")),
	}
	if he, ok := errors.AsType[batch.HintError](err); ok {
		r.hint = he.Hint()
	}
	return r
}
