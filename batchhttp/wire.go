package batchhttp

import (
	"encoding/json"
	"time"

	"github.com/siftfetch/batchkit/batch"
)

// This file holds the JSON shapes of the /v1/batch wire API. The [Handler]
// writes them and the [Client] reads them; a CLI can print them as they are.
// Times are RFC 3339 in UTC, to the second.

// SubmitRequest is the body of POST /v1/batch. Each target is flat:
// {"url", "mode", "question", "pages", "grep", "jq", "context", "recover"}.
// Webhook, if set, receives the job's batch.finished event, and with its
// Events per-target events (see [NewWebhookSender]).
//
// Deadline, if set, is when the job ends with what it has (see
// [batch.SubmitOptions]): an RFC 3339 time ("2026-01-02T15:04:05Z") or a
// positive duration from the submit in Go's form ("90s", "1h30m"); see
// [ParseDeadline].
//
// Metadata, if set, is the caller's labels of the job (see
// [batch.SubmitOptions]); a target's "custom_id" is its id (see
// [batch.Target]). Both come back in every read and the webhook event.
//
// OnInvalid, if "skip", makes the submit lenient: a target the pre-check,
// the option check or the runner refuses is finished at once at its idx
// (outcome blocked or invalid) instead of refusing the submit, and the
// answer lists it (see [SubmitResponse]). "reject" or absent refuses the
// submit, as before.
type SubmitRequest struct {
	Targets   []batch.Target    `json:"targets"`
	Webhook   *Webhook          `json:"webhook,omitempty"`
	Deadline  string            `json:"deadline,omitempty"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	OnInvalid batch.OnInvalid   `json:"on_invalid,omitempty"`
}

// SubmitResponse is the 202 answer to POST /v1/batch. Status is "queued"
// for a new job and the job's current status for a reused one.
type SubmitResponse struct {
	Success bool            `json:"success"`
	JobID   string          `json:"job_id"`
	Status  batch.JobStatus `json:"status"`
	Targets int             `json:"targets"`
	Reused  bool            `json:"reused"`
	// RetryOf is, in the answer to a retry, the id of the job retried.
	RetryOf string `json:"retry_of,omitempty"`
	// Skipped counts the targets a lenient submit (on_invalid "skip")
	// finished at once, and SkippedTargets lists them in idx order; both
	// are absent when none was skipped.
	Skipped        int             `json:"skipped,omitempty"`
	SkippedTargets []SkippedTarget `json:"skipped_targets,omitempty"`
}

// SkippedTarget is one target a lenient submit skipped: its idx, its
// outcome (invalid or blocked), its error and hint, as the job's reads
// show them. It never repeats the URL.
type SkippedTarget struct {
	Idx     int           `json:"idx"`
	Outcome batch.Outcome `json:"outcome"`
	Error   string        `json:"error"`
	Hint    string        `json:"hint,omitempty"`
}

// skippedTargets is the wire form of a submit's skipped targets; nil for
// none.
func skippedTargets(rs []batch.Refusal) []SkippedTarget {
	if len(rs) == 0 {
		return nil
	}
	out := make([]SkippedTarget, len(rs))
	for i, rf := range rs {
		out[i] = SkippedTarget{Idx: rf.Idx, Outcome: rf.Outcome, Error: rf.Error, Hint: rf.Hint}
	}
	return out
}

// StatusResponse is the 200 answer to GET /v1/batch/{id}: the job summary.
type StatusResponse struct {
	JobID        string          `json:"job_id"`
	Status       batch.JobStatus `json:"status"`
	Error        string          `json:"error,omitempty"`
	TargetsTotal int             `json:"targets_total"`
	TargetsDone  int             `json:"targets_done"`
	CreatedAt    time.Time       `json:"created_at"`
	ExpiresAt    time.Time       `json:"expires_at"`
	// RetryOf is the id of the job this one retries, if it is a retry.
	RetryOf string `json:"retry_of,omitempty"`
	// Webhook is the job's webhook, shown to its owner (every read is the
	// owner's); absent for none.
	Webhook *Webhook `json:"webhook,omitempty"`
	// Deadline is when the job ends with what it has, if it has one (see
	// [SubmitRequest]); a job it ended has error "deadline".
	Deadline *time.Time `json:"deadline,omitempty"`
	// HandedOn counts the times the job was handed on: queued again, under
	// its id, when the runner draining it stopped (see batch.Config.Resume).
	HandedOn int `json:"handed_on"`
	// Metadata is the job's metadata, if it has any (see [SubmitRequest]).
	Metadata map[string]string `json:"metadata,omitempty"`
	// Outcomes counts the finished targets by outcome (see [batch.Outcome]),
	// over the whole job whatever ?status chose; absent while none has
	// finished.
	Outcomes map[batch.Outcome]int `json:"outcomes,omitempty"`
	// Targets must stay the last field: a ?results=1 answer writes the
	// rest, then streams the targets one at a time (see writeResults).
	Targets []TargetStatus `json:"targets"`
}

// TargetStatus is one target in a [StatusResponse]. Result, the stored
// envelope (Meta plus "content"), is present only when results were asked
// for and the target is done.
type TargetStatus struct {
	Idx int    `json:"idx"`
	URL string `json:"url"`
	// CustomID is the caller's id of the target, if it has one.
	CustomID string             `json:"custom_id,omitempty"`
	Status   batch.TargetStatus `json:"status"`
	// Attempts counts the fetches of the target that may have reached its
	// upstream: 1, more only when the host repeats interrupted fetches
	// (batch.Config.RepeatInterrupted). Always present.
	Attempts int `json:"attempts"`
	// Outcome and Retryable are set once the target finished: how it ended
	// (a [batch.Outcome]; "ok" for a done target) and whether a retry can
	// help (see [batch.Outcome.Retryable]).
	Outcome   batch.Outcome `json:"outcome,omitempty"`
	Retryable *bool         `json:"retryable,omitempty"`
	// RetryOfIdx is, in a retry, the target's idx in the job retried.
	RetryOfIdx *int            `json:"retry_of_idx,omitempty"`
	Error      string          `json:"error,omitempty"`
	Hint       string          `json:"hint,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
}

// ResultResponse is the 200 answer to GET /v1/batch/{id}/{idx}.
type ResultResponse struct {
	JobID      string             `json:"job_id"`
	Idx        int                `json:"idx"`
	URL        string             `json:"url"`
	CustomID   string             `json:"custom_id,omitempty"` // as in [TargetStatus]
	Status     batch.TargetStatus `json:"status"`
	Attempts   int                `json:"attempts"`               // as in [TargetStatus]
	Outcome    batch.Outcome      `json:"outcome,omitempty"`      // as in [TargetStatus]
	Retryable  *bool              `json:"retryable,omitempty"`    // as in [TargetStatus]
	RetryOfIdx *int               `json:"retry_of_idx,omitempty"` // as in [TargetStatus]
	Result     json.RawMessage    `json:"result,omitempty"`
	Error      string             `json:"error,omitempty"`
	Hint       string             `json:"hint,omitempty"`
	ExpiresAt  time.Time          `json:"expires_at"`
}

// CancelResponse is the 200 answer to DELETE /v1/batch/{id}.
type CancelResponse struct {
	Success bool            `json:"success"`
	Status  batch.JobStatus `json:"status"`
}

// WebhookSecretResponse is the 200 answer to GET /v1/batch/webhook-secret:
// the secret that signs the caller's webhook deliveries (see
// [CallerWebhookSecret]), for its receiver to verify them with.
type WebhookSecretResponse struct {
	Caller string `json:"caller"`
	Secret string `json:"secret"`
}

// ListResponse is the 200 answer to GET /v1/batch: the caller's own jobs,
// newest first.
type ListResponse struct {
	Jobs []JobSummary `json:"jobs"`
}

// JobSummary is one job in a [ListResponse].
type JobSummary struct {
	JobID        string          `json:"job_id"`
	Status       batch.JobStatus `json:"status"`
	TargetsTotal int             `json:"targets_total"`
	TargetsDone  int             `json:"targets_done"`
	CreatedAt    time.Time       `json:"created_at"`
	ExpiresAt    time.Time       `json:"expires_at"`
	RetryOf      string          `json:"retry_of,omitempty"` // as in [StatusResponse]
	// Metadata is the job's metadata, if it has any.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// ErrorResponse is the body of every error answer.
type ErrorResponse struct {
	Success bool `json:"success"` // always false
	// Code is one of the Code constants: what a client branches on.
	Code string `json:"code"`
	// Error is the English message, for a person; it may change.
	Error string `json:"error"`
	Hint  string `json:"hint,omitempty"`
	// RequestID is the answer's X-Request-Id, to quote in a report.
	RequestID string `json:"request_id,omitempty"`
}

// wireTime is the wire form of a time: UTC, whole seconds.
func wireTime(t time.Time) time.Time { return t.UTC().Truncate(time.Second) }

// wireDeadline is the wire form of a deadline: nil for none.
func wireDeadline(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	w := wireTime(t)
	return &w
}

func statusResponse(info batch.JobInfo) StatusResponse {
	resp := StatusResponse{
		JobID:        info.ID,
		Status:       info.Status,
		Error:        info.Error,
		TargetsTotal: info.TargetsTotal,
		TargetsDone:  info.TargetsDone,
		CreatedAt:    wireTime(info.CreatedAt),
		ExpiresAt:    wireTime(info.ExpiresAt),
		RetryOf:      info.RetryOf,
		HandedOn:     info.HandedOn,
		Metadata:     info.Metadata,
		Outcomes:     info.Outcomes,
		Targets:      make([]TargetStatus, len(info.Targets)),
	}
	if info.WebhookURL != "" {
		resp.Webhook = &Webhook{URL: info.WebhookURL, Events: info.WebhookEvents}
	}
	resp.Deadline = wireDeadline(info.Deadline)
	for i, t := range info.Targets {
		resp.Targets[i] = targetStatus(t)
	}
	return resp
}

// targetStatus is the wire form of t, with its result if t carries one.
func targetStatus(t batch.TargetInfo) TargetStatus {
	outcome, retryable := wireOutcome(t)
	return TargetStatus{
		Idx: t.Idx, URL: t.URL, CustomID: t.CustomID, Status: t.Status, Attempts: t.Attempts, Outcome: outcome, Retryable: retryable,
		RetryOfIdx: t.RetryOfIdx, Error: t.Error, Hint: t.Hint, Result: envelope(t),
	}
}

func resultResponse(tr batch.TargetResult) ResultResponse {
	outcome, retryable := wireOutcome(tr.TargetInfo)
	return ResultResponse{
		JobID: tr.JobID, Idx: tr.Idx, URL: tr.URL, CustomID: tr.CustomID, Status: tr.Status, Attempts: tr.Attempts,
		Outcome: outcome, Retryable: retryable, RetryOfIdx: tr.RetryOfIdx,
		Result: envelope(tr.TargetInfo), Error: tr.Error, Hint: tr.Hint,
		ExpiresAt: wireTime(tr.ExpiresAt),
	}
}

// wireOutcome returns the outcome and retryable fields of t: none while t
// is pending or running, else its outcome folded into the fixed set (a
// target stored without one is "ok" when done and "other" when failed).
func wireOutcome(t batch.TargetInfo) (batch.Outcome, *bool) {
	if !t.Status.Finished() {
		return "", nil
	}
	o := t.Outcome
	if o == "" && t.Status == batch.TargetDone {
		o = batch.OutcomeOK
	}
	o = o.Fold()
	retryable := o.Retryable()
	return o, &retryable
}

// envelope returns the result of a done target, or nil.
func envelope(t batch.TargetInfo) json.RawMessage {
	if t.Status != batch.TargetDone || len(t.Result) == 0 {
		return nil
	}
	return json.RawMessage(t.Result)
}

func listResponse(jobs []batch.JobInfo) ListResponse {
	resp := ListResponse{Jobs: make([]JobSummary, len(jobs))}
	for i, j := range jobs {
		resp.Jobs[i] = JobSummary{
			JobID: j.ID, Status: j.Status, TargetsTotal: j.TargetsTotal, TargetsDone: j.TargetsDone,
			CreatedAt: wireTime(j.CreatedAt), ExpiresAt: wireTime(j.ExpiresAt), RetryOf: j.RetryOf,
			Metadata: j.Metadata,
		}
	}
	return resp
}
