package batchmcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
)

// The tools' names.
const (
	toolSubmit = "batch_submit"
	toolStatus = "batch_status"
	toolResult = "batch_result"
	toolCancel = "batch_cancel"
)

type tool struct {
	tool   *mcp.Tool
	handle mcp.ToolHandler
}

// tools returns the four tools, their input schemas built from the
// runner's option set and cap.
func (h *Handler) tools() []tool {
	target := h.cfg.Runner.Options().Schema()
	if props, ok := target["properties"].(map[string]any); ok {
		props["custom_id"] = map[string]any{"type": "string", "minLength": 1, "maxLength": batch.MaxCustomIDBytes,
			"description": "Optional: your id of the target, unique in the job; every answer about the target carries it."}
	}
	targets := map[string]any{"type": "array", "minItems": 1, "items": target,
		"description": "The URLs to fetch, each with its options. Submitting the same list again returns the same job."}
	if max := h.cfg.Runner.TargetsPerJob(); max > 0 {
		targets["maxItems"] = max
	}
	jobID := map[string]any{"type": "string", "description": "The job_id batch_submit returned."}
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(false)}
	return []tool{{
		tool: &mcp.Tool{
			Name:  toolSubmit,
			Title: "Submit a batch of URLs to fetch",
			Description: "Fetch several URLs as one background job. Use it instead of a loop of single fetches " +
				"when you have more than a couple of URLs: it answers at once with a job_id, and the targets are fetched " +
				"one at a time in the background while you do other work. Then call batch_status (with wait_seconds to wait " +
				"for progress) and batch_result to read each target's content. Submitting the same list again returns the " +
				"same job (reused: true).",
			InputSchema: object(map[string]any{"targets": targets, "deadline": deadlineSchema(h.cfg.Runner.MaxDeadline()),
				"metadata": metadataSchema, "on_invalid": onInvalidSchema}, "targets"),
			// A plain call answers the submit; under a task, the task's
			// result is the job's final status.
			OutputSchema: map[string]any{"type": "object", "anyOf": []any{submitSchema, statusSchema}},
			Annotations:  &mcp.ToolAnnotations{OpenWorldHint: new(true)},
		},
		handle: h.submitTool,
	}, {
		tool: &mcp.Tool{
			Name:  toolStatus,
			Title: "Status of a batch job",
			Description: "Report a batch job's progress: its status (queued, running, then done, partial, failed or cancelled), " +
				"how many targets are done, and each target's status, outcome and error. Finished targets come with a " +
				"resource link to their content. wait_seconds waits up to that long for the job to make progress " +
				fmt.Sprintf("(at most %d); a long target list is paged with from_idx and next_idx.", MaxWaitSeconds),
			InputSchema: object(map[string]any{
				"job_id": jobID,
				"wait_seconds": map[string]any{"type": "integer", "minimum": 0, "maximum": MaxWaitSeconds,
					"description": "Wait up to this long for the job to finish or for targets_done to change from since. 0 answers at once."},
				"since": map[string]any{"type": "integer", "minimum": 0,
					"description": "The targets_done of your last answer: a wait ends as soon as it changes."},
				"from_idx": map[string]any{"type": "integer", "minimum": 0, "description": "List targets from this idx on (the next_idx of your last answer)."},
				"failed_only": map[string]any{"type": "boolean",
					"description": "List the failed targets only, with their outcome, error and hint: what to retry or report. outcomes still counts every target."},
			}, "job_id"),
			OutputSchema: statusSchema,
			Annotations:  readOnly,
		},
		handle: h.statusTool,
	}, {
		tool: &mcp.Tool{
			Name:  toolResult,
			Title: "Read one target's result",
			Description: "Read the content a batch job fetched for one target (idx counts from 0), one page at a time: " +
				"an answer carries content from offset on, total_bytes, and next_offset while more remains. Call again with " +
				"offset set to next_offset to read on. A failed target answers with its error and hint instead.",
			InputSchema: object(map[string]any{
				"job_id": jobID,
				"idx":    map[string]any{"type": "integer", "minimum": 0, "description": "The target's index in the submitted list."},
				"offset": map[string]any{"type": "integer", "minimum": 0, "description": "Byte offset of the page in the content (the next_offset of your last answer). Defaults to 0."},
				"max_bytes": map[string]any{"type": "integer", "minimum": 1,
					"description": "Largest page to return, in bytes of content; the server may return less."},
			}, "job_id", "idx"),
			OutputSchema: resultSchema,
			Annotations:  readOnly,
		},
		handle: h.resultTool,
	}, {
		tool: &mcp.Tool{
			Name:        toolCancel,
			Title:       "Cancel a batch job",
			Description: "Cancel a batch job: no further target starts; a target being fetched finishes and is kept. Cancelling a finished job changes nothing and reports its status.",
			InputSchema: object(map[string]any{"job_id": jobID}, "job_id"),
			OutputSchema: object(map[string]any{
				"job_id": map[string]any{"type": "string"}, "status": map[string]any{"type": "string"},
			}, "job_id", "status"),
			Annotations: &mcp.ToolAnnotations{DestructiveHint: new(true), IdempotentHint: true, OpenWorldHint: new(false)},
		},
		handle: h.cancelTool,
	}}
}

// onInvalidSchema is the JSON Schema of batch_submit's on_invalid.
var onInvalidSchema = map[string]any{"type": "string", "enum": []string{string(batch.OnInvalidReject), string(batch.OnInvalidSkip)},
	"description": "Optional: what to do with a target the server refuses (a blocked or malformed URL, options it does not take). " +
		"reject (the default) refuses the whole call; skip fetches the others and answers with skipped_targets: " +
		"each refused target's idx, outcome (blocked or invalid) and error, finished at once, never fetched."}

// metadataSchema is the JSON Schema of batch_submit's metadata.
var metadataSchema = map[string]any{"type": "object", "maxProperties": batch.MaxMetadataPairs,
	"propertyNames":        map[string]any{"minLength": 1, "maxLength": batch.MaxMetadataKeyBytes},
	"additionalProperties": map[string]any{"type": "string", "maxLength": batch.MaxMetadataValueBytes},
	"description": fmt.Sprintf("Optional: your labels of the job (at most %d pairs, keys of at most %d bytes, values of at most %d), "+
		"returned by batch_status and in the webhook event. A list of your jobs by label is GET /v1/batch?metadata.KEY=VALUE.",
		batch.MaxMetadataPairs, batch.MaxMetadataKeyBytes, batch.MaxMetadataValueBytes)}

// deadlineSchema is the JSON Schema of batch_submit's deadline, which the
// server caps at max (0: no cap).
func deadlineSchema(max time.Duration) map[string]any {
	desc := "Optional: when the job ends with what it has, as a duration from now in Go's form (\"90s\", \"1h30m\") " +
		"or an RFC 3339 time (\"2026-01-02T15:04:05Z\"). Targets not started by then end failed with outcome expired " +
		"(retryable), and the job ends partial, or failed when none is done, with error \"deadline\"."
	if max > 0 {
		desc += fmt.Sprintf(" At most %s from now, which is also the deadline of a job submitted without one.", max)
	}
	return map[string]any{"type": "string", "description": desc}
}

// object is the JSON Schema of an object with props, no others.
func object(props map[string]any, required ...string) map[string]any {
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

// decodeArgs decodes a tool's arguments into v, refusing unknown fields
// and naming the field of a type error.
func decodeArgs(raw json.RawMessage, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		raw = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if te, ok := err.(*json.UnmarshalTypeError); ok {
			return invalidArgs("%s: want %s", te.Field, te.Type)
		}
		return invalidArgs("%v", trimJSONError(err))
	}
	return nil
}

// trimJSONError drops encoding/json's "json: " prefix.
func trimJSONError(err error) string {
	s := err.Error()
	if len(s) > 6 && s[:6] == "json: " {
		return s[6:]
	}
	return s
}

// submitTool serves batch_submit.
func (h *Handler) submitTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	caller, _ := callerOf(ctx)
	out, _, err := h.submit(ctx, caller, req.Params.Arguments)
	if err != nil {
		return h.fail(ctx, err)
	}
	return h.answer(out, nil)
}

// SubmitOutput is batch_submit's structured output. Skipped and
// SkippedTargets are set when on_invalid "skip" skipped targets, as in the
// HTTP answer (see batchhttp.SubmitResponse).
type SubmitOutput struct {
	JobID          string                    `json:"job_id"`
	Status         batch.JobStatus           `json:"status"`
	Targets        int                       `json:"targets"`
	Reused         bool                      `json:"reused"`
	Skipped        int                       `json:"skipped,omitempty"`
	SkippedTargets []batchhttp.SkippedTarget `json:"skipped_targets,omitempty"`
}

var submitSchema = object(map[string]any{
	"job_id":  map[string]any{"type": "string"},
	"status":  map[string]any{"type": "string"},
	"targets": map[string]any{"type": "integer"},
	"reused":  map[string]any{"type": "boolean"},
	"skipped": map[string]any{"type": "integer", "minimum": 1},
	"skipped_targets": map[string]any{"type": "array", "items": object(map[string]any{
		"idx":     map[string]any{"type": "integer"},
		"outcome": map[string]any{"type": "string"},
		"error":   map[string]any{"type": "string"},
		"hint":    map[string]any{"type": "string"},
	}, "idx", "outcome", "error")},
}, "job_id", "status", "targets", "reused")

// submit decodes, checks and submits a batch_submit's arguments, as the
// HTTP API's submit does: the same decoder, pre-check and option check.
func (h *Handler) submit(ctx context.Context, caller batch.Caller, args json.RawMessage) (SubmitOutput, batch.JobInfo, error) {
	if intakeOf(ctx).busy {
		return SubmitOutput{}, batch.JobInfo{}, submitsBusy
	}
	var in struct {
		Targets   json.RawMessage   `json:"targets"`
		Deadline  string            `json:"deadline"`
		Metadata  map[string]string `json:"metadata"`
		OnInvalid batch.OnInvalid   `json:"on_invalid"`
	}
	if err := decodeArgs(args, &in); err != nil {
		return SubmitOutput{}, batch.JobInfo{}, err
	}
	if len(in.Targets) == 0 {
		return SubmitOutput{}, batch.JobInfo{}, invalidArgs("targets: required")
	}
	switch in.OnInvalid {
	case "", batch.OnInvalidReject, batch.OnInvalidSkip:
	default:
		return SubmitOutput{}, batch.JobInfo{}, invalidArgs("on_invalid: want %q or %q", batch.OnInvalidReject, batch.OnInvalidSkip)
	}
	opts := batch.SubmitOptions{Metadata: in.Metadata}
	if in.Deadline != "" {
		at, d, err := batchhttp.ParseDeadline(in.Deadline)
		if err != nil {
			return SubmitOutput{}, batch.JobInfo{}, invalidArgs("%v", err)
		}
		opts.Deadline, opts.DeadlineIn = at, d
	}
	body, err := json.Marshal(struct {
		Targets json.RawMessage `json:"targets"`
	}{in.Targets})
	if err != nil {
		return SubmitOutput{}, batch.JobInfo{}, invalidArgs("targets: %v", err)
	}
	sub, err := batchhttp.DecodeSubmitRequest(body, h.cfg.Runner.Options())
	if err != nil {
		return SubmitOutput{}, batch.JobInfo{}, &refusal{protocol: true, code: batchhttp.CodeInvalidBatch, msg: err.Error()}
	}
	rec := recordOf(ctx)
	rec.targets = len(sub.Targets)
	if max := h.cfg.Runner.TargetsPerJob(); max > 0 && len(sub.Targets) > max {
		return SubmitOutput{}, batch.JobInfo{}, tooManyTargets(max)
	}
	skip := in.OnInvalid == batch.OnInvalidSkip
	if skip {
		// As the HTTP API's lenient submit: the host's refusals go to the
		// runner, and a call with nothing left gets the default's refusal.
		opts.OnInvalid = batch.OnInvalidSkip
		opts.Refused = batchhttp.Refusals(ctx, caller, sub.Targets, h.cfg.Precheck, h.cfg.CheckTarget)
		if len(opts.Refused) == len(sub.Targets) {
			if err := h.rejectTargets(ctx, caller, sub.Targets); err != nil {
				return SubmitOutput{}, batch.JobInfo{}, err
			}
		}
	} else if err := h.rejectTargets(ctx, caller, sub.Targets); err != nil {
		return SubmitOutput{}, batch.JobInfo{}, err
	}
	job, reused, err := h.cfg.Runner.SubmitWith(ctx, caller, sub.Targets, opts)
	if skip && len(opts.Refused) > 0 && errors.Is(err, batch.ErrInvalidTarget) {
		if rerr := h.rejectTargets(ctx, caller, sub.Targets); rerr != nil {
			return SubmitOutput{}, batch.JobInfo{}, rerr
		}
	}
	if err != nil {
		return SubmitOutput{}, batch.JobInfo{}, err
	}
	rec.jobID, rec.reused, rec.status = job.ID, &reused, string(job.Status)
	out := SubmitOutput{JobID: job.ID, Status: job.Status, Targets: len(sub.Targets), Reused: reused, Skipped: len(job.Skipped)}
	for _, rf := range job.Skipped {
		out.SkippedTargets = append(out.SkippedTargets, batchhttp.SkippedTarget{Idx: rf.Idx, Outcome: rf.Outcome, Error: rf.Error, Hint: rf.Hint})
	}
	return out, job, nil
}

// rejectTargets runs the host's checks as a submit that rejects does: the
// pre-check on every URL, then the option check on every target, each
// refusing the call at its first failure. An empty URL is left to the
// runner, which refuses it.
func (h *Handler) rejectTargets(ctx context.Context, caller batch.Caller, targets []batch.Target) error {
	if h.cfg.Precheck != nil {
		for i, t := range targets {
			if t.URL == "" {
				continue
			}
			if err := h.cfg.Precheck(ctx, caller, t.URL); err != nil {
				return blocked(i, err)
			}
		}
	}
	if h.cfg.CheckTarget != nil {
		for i, t := range targets {
			if t.URL == "" {
				continue
			}
			if err := h.cfg.CheckTarget(ctx, caller, t); err != nil {
				return invalidOption(i, err)
			}
		}
	}
	return nil
}

// statusArgs are batch_status's arguments.
type statusArgs struct {
	JobID       string `json:"job_id"`
	WaitSeconds *int   `json:"wait_seconds"`
	Since       *int   `json:"since"`
	FromIdx     int    `json:"from_idx"`
	FailedOnly  bool   `json:"failed_only"`
}

// statusTool serves batch_status.
func (h *Handler) statusTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in statusArgs
	if err := decodeArgs(req.Params.Arguments, &in); err != nil {
		return h.fail(ctx, err)
	}
	switch {
	case in.JobID == "":
		return h.fail(ctx, invalidArgs("job_id: required"))
	case in.WaitSeconds != nil && (*in.WaitSeconds < 0 || *in.WaitSeconds > MaxWaitSeconds):
		return h.fail(ctx, invalidArgs("wait_seconds: want 0 to %d", MaxWaitSeconds))
	case in.Since != nil && *in.Since < 0:
		return h.fail(ctx, invalidArgs("since: want 0 or more"))
	case in.FromIdx < 0:
		return h.fail(ctx, invalidArgs("from_idx: want 0 or more"))
	}
	caller, _ := callerOf(ctx)
	rec := recordOf(ctx)
	rec.jobID = in.JobID
	opts := batch.StatusOptions{Touch: true}
	var info batch.JobInfo
	var err error
	if in.WaitSeconds != nil && *in.WaitSeconds > 0 {
		if !h.waits.acquire(caller.Name) {
			return h.fail(ctx, waitsBusy)
		}
		defer h.waits.release(caller.Name)
		info, err = h.cfg.Runner.Wait(ctx, caller, in.JobID, batch.WaitOptions{
			StatusOptions: opts, Timeout: time.Duration(*in.WaitSeconds) * time.Second, Since: in.Since,
		})
	} else {
		info, err = h.cfg.Runner.Status(ctx, caller, in.JobID, opts)
	}
	if err != nil {
		return h.fail(ctx, err)
	}
	rec.targets, rec.status = info.TargetsTotal, string(info.Status)
	return h.statusResultOf(info, in.FromIdx, 0, in.FailedOnly)
}

// resultArgs are batch_result's arguments.
type resultArgs struct {
	JobID    string `json:"job_id"`
	Idx      *int   `json:"idx"`
	Offset   int    `json:"offset"`
	MaxBytes *int   `json:"max_bytes"`
}

// resultTool serves batch_result.
func (h *Handler) resultTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in resultArgs
	if err := decodeArgs(req.Params.Arguments, &in); err != nil {
		return h.fail(ctx, err)
	}
	switch {
	case in.JobID == "":
		return h.fail(ctx, invalidArgs("job_id: required"))
	case in.Idx == nil:
		return h.fail(ctx, invalidArgs("idx: required"))
	case *in.Idx < 0:
		return h.fail(ctx, invalidArgs("idx: want 0 or more"))
	case in.Offset < 0:
		return h.fail(ctx, invalidArgs("offset: want 0 or more"))
	case in.MaxBytes != nil && *in.MaxBytes < 1:
		return h.fail(ctx, invalidArgs("max_bytes: want 1 or more"))
	}
	caller, _ := callerOf(ctx)
	recordOf(ctx).jobID = in.JobID
	tr, err := h.readTarget(ctx, caller, in.JobID, *in.Idx)
	if err != nil {
		return h.fail(ctx, err)
	}
	limit := h.cfg.MaxAnswerBytes
	if in.MaxBytes != nil {
		limit = min(limit, *in.MaxBytes)
	}
	out, err := h.resultAnswer(tr, in.Offset, limit)
	if err != nil {
		return h.fail(ctx, err)
	}
	return out, nil
}

// readTarget reads one target with its result, after bumping the job's
// lease as an owner's read does (a bump that fails does not fail the
// read).
func (h *Handler) readTarget(ctx context.Context, caller batch.Caller, id string, idx int) (batch.TargetResult, error) {
	if err := h.cfg.Runner.Touch(ctx, caller, id); err != nil && isNotFound(err) {
		return batch.TargetResult{}, err
	}
	return h.cfg.Runner.Result(ctx, caller, id, idx)
}

// cancelTool serves batch_cancel. Cancelling a finished job answers its
// status, as a retried cancel would.
func (h *Handler) cancelTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in struct {
		JobID string `json:"job_id"`
	}
	if err := decodeArgs(req.Params.Arguments, &in); err != nil {
		return h.fail(ctx, err)
	}
	if in.JobID == "" {
		return h.fail(ctx, invalidArgs("job_id: required"))
	}
	caller, _ := callerOf(ctx)
	rec := recordOf(ctx)
	rec.jobID = in.JobID
	status, err := h.cancel(ctx, caller, in.JobID)
	if err != nil {
		return h.fail(ctx, err)
	}
	rec.status = string(status)
	return h.answer(struct {
		JobID  string          `json:"job_id"`
		Status batch.JobStatus `json:"status"`
	}{in.JobID, status}, nil)
}

// cancel cancels the caller's job and returns its status: cancelled, or
// the status it had already finished with.
func (h *Handler) cancel(ctx context.Context, caller batch.Caller, id string) (batch.JobStatus, error) {
	err := h.cfg.Runner.Cancel(ctx, caller, id)
	if err == nil {
		return batch.JobCancelled, nil
	}
	if !isFinished(err) {
		return "", err
	}
	info, err := h.cfg.Runner.Status(ctx, caller, id, batch.StatusOptions{JobOnly: true})
	if err != nil {
		return "", err
	}
	return info.Status, nil
}
