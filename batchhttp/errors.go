package batchhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/siftfetch/batchkit/batch"
)

// httpError is an answer decided on: what the client sees, and its fixed
// code, which the log line carries instead of the message (which may hold
// client input or a pre-check reason naming a host).
type httpError struct {
	status     int
	msg        string
	hint       string
	code       string // one of the Code constants, safe to log
	retryAfter int    // seconds; 0 means no Retry-After header
	cause      error  // logged with a 5xx answer, for unrestricted callers only
	// routes: hint names routes as /v1/batch…, which the answer writes
	// under the path the client reached the API at (see basePath).
	routes bool
}

func (e *httpError) Error() string { return e.msg }

// The codes of error answers: the "code" field of every [ErrorResponse],
// stable across releases, so that a client branches on it instead of on
// the English of "error". docs/http-api.md lists each with its status.
const (
	CodeInvalidBatch     = "invalid_batch"      // 400: the submit body or a target is malformed
	CodeInvalidRequest   = "invalid_request"    // 400: a bad query parameter or path element
	CodeUnauthorized     = "unauthorized"       // 401: no key, or an unknown one
	CodeForbidden        = "forbidden"          // 403: a host's [CallerFunc] refused the caller
	CodeNotFound         = "not_found"          // 404: no such job for this caller, or no such route
	CodeMethodNotAllowed = "method_not_allowed" // 405: see the Allow header
	CodeTimeout          = "timeout"            // 408: the body did not arrive in time
	CodeJobFinished      = "job_finished"       // 409: cancel of a finished job
	CodeJobLive          = "job_live"           // 409: retry of a job that is still queued or running
	CodeNothingToRetry   = "nothing_to_retry"   // 409: retry of a job whose every target is done
	CodeBodyTooLarge     = "body_too_large"     // 413: the submit body is over its cap
	CodeBlocked          = "blocked"            // 422: the pre-check refused a target or the webhook URL
	CodeInvalidOption    = "invalid_option"     // 422: the host's option check refused a target (e.g. a grep pattern over its limits)
	CodeTooManyTargets   = "too_many_targets"   // 422: more targets than a job may have
	CodeWebhooksDisabled = "webhooks_disabled"  // 422: a submit with a webhook to a server that sends none
	CodeResultsTooLarge  = "results_too_large"  // 422: ?results=1 of a job over the answer cap
	CodeDeadlineTooFar   = "deadline_too_far"   // 422: a deadline later than the server's max_deadline from now
	CodeCallerBusy       = "caller_busy"        // 429: the caller is at its cap of live jobs
	CodeJobsBusy         = "jobs_busy"          // 429: the service is at its cap of live jobs
	CodeResultsBusy      = "results_busy"       // 429: too many ?results=1 answers at once, in all or of the caller's
	CodeWebhooksBusy     = "webhooks_busy"      // 429: a submit with a webhook by a caller at its cap of pending webhook events
	CodeWaitsBusy        = "waits_busy"         // 429: the caller is at its cap of long-polls at once
	CodeStreamsBusy      = "streams_busy"       // 429: the caller is at its cap of results streams at once
	CodeSubmitsBusy      = "submits_busy"       // 429: the caller is at its cap of submits in flight at once
	CodeInternal         = "internal"           // 500
	CodeUnavailable      = "unavailable"        // 503: the store cannot serve now; see Retry-After
)

// errorTable maps the core's sentinels to answers: the one place where a
// batch error becomes an HTTP status. Rows are tried in order with
// [errors.Is]; the first match wins. An error matching no row is a 500 whose
// message never leaks the error's text.
var errorTable = []struct {
	err error
	ans httpError
}{
	{batch.ErrNotFound, httpError{status: http.StatusNotFound, msg: "not found", code: CodeNotFound}},
	{batch.ErrFinished, httpError{status: http.StatusConflict, msg: "job already finished", code: CodeJobFinished}},
	{batch.ErrLive, httpError{
		status: http.StatusConflict, msg: "job still live", code: CodeJobLive,
		hint: "retry it once it has finished (GET /v1/batch/{id}?wait=60s waits for that) or cancel it", routes: true,
	}},
	{batch.ErrNothingToRetry, httpError{status: http.StatusConflict, msg: "nothing to retry: every target is done", code: CodeNothingToRetry}},
	{batch.ErrCallerBusy, httpError{
		status: http.StatusTooManyRequests, msg: "busy: a batch of yours is still running",
		hint: "wait for it (GET /v1/batch lists your jobs) or cancel it", routes: true, code: CodeCallerBusy, retryAfter: 30,
	}},
	{batch.ErrBusy, httpError{status: http.StatusTooManyRequests, msg: "batch jobs busy", code: CodeJobsBusy, retryAfter: 60}},
	{batch.ErrWebhooksBusy, httpError{
		status: http.StatusTooManyRequests, msg: "busy: too many of your webhook events are pending",
		hint: "your receiver has not taken your earlier jobs' events yet; submit without a webhook, or wait", code: CodeWebhooksBusy, retryAfter: 60,
	}},
	{batch.ErrNoTargets, httpError{status: http.StatusBadRequest, msg: "invalid batch: no targets", code: CodeInvalidBatch}},
	// The message gets the configured cap: "too many targets (max N)".
	{batch.ErrTooManyTargets, httpError{status: http.StatusUnprocessableEntity, msg: "too many targets", code: CodeTooManyTargets}},
	// The message gets the *batch.TargetError's index and reason.
	{batch.ErrInvalidTarget, httpError{status: http.StatusBadRequest, msg: "invalid batch: invalid target", code: CodeInvalidBatch}},
	// The message gets the bound: "invalid batch: metadata: 17 pairs (max 16)".
	{batch.ErrInvalidMetadata, httpError{status: http.StatusBadRequest, msg: "invalid batch: metadata", code: CodeInvalidBatch}},
	// The message gets the core's reason: "invalid batch: webhook: …".
	{batch.ErrInvalidWebhook, httpError{status: http.StatusBadRequest, msg: "invalid batch: webhook", code: CodeInvalidBatch}},
	// The message gets the cap: "deadline too far: at most 1h0m0s from now".
	{batch.ErrDeadlineTooFar, httpError{status: http.StatusUnprocessableEntity, msg: "deadline too far", code: CodeDeadlineTooFar}},
	// The message gets the core's reason: "invalid batch: deadline: …".
	{batch.ErrInvalidDeadline, httpError{status: http.StatusBadRequest, msg: "invalid batch: deadline", code: CodeInvalidBatch}},
	{batch.ErrWebhooksDisabled, httpError{status: http.StatusUnprocessableEntity, msg: "webhooks are not enabled on this server", code: CodeWebhooksDisabled}},
	{batch.ErrClosed, httpError{status: http.StatusServiceUnavailable, msg: "batch jobs unavailable", code: CodeUnavailable, retryAfter: 5}},
	{batch.ErrNotStarted, httpError{status: http.StatusServiceUnavailable, msg: "batch jobs unavailable", code: CodeUnavailable, retryAfter: 5}},
	{batch.ErrUnavailable, httpError{status: http.StatusServiceUnavailable, msg: "batch jobs unavailable", code: CodeUnavailable, retryAfter: 5}},
	// A store call that ran out of time (e.g. waiting for a lock).
	{context.DeadlineExceeded, httpError{status: http.StatusServiceUnavailable, msg: "batch jobs unavailable", code: CodeUnavailable, retryAfter: 5}},
}

// answerFor returns the answer to err. maxTargets fills the message of
// [batch.ErrTooManyTargets].
func answerFor(err error, maxTargets int) *httpError {
	if he, ok := errors.AsType[*httpError](err); ok {
		return he
	}
	for _, row := range errorTable {
		if !errors.Is(err, row.err) {
			continue
		}
		ans := row.ans
		ans.cause = err
		switch row.err {
		case batch.ErrTooManyTargets:
			ans.msg = tooManyTargets(maxTargets)
		case batch.ErrInvalidTarget:
			if te, ok := errors.AsType[*batch.TargetError](err); ok {
				ans.msg = fmt.Sprintf("invalid batch: target %d: %s", te.Index, te.Reason)
			}
		case batch.ErrInvalidWebhook:
			if _, reason, ok := strings.Cut(err.Error(), batch.ErrInvalidWebhook.Error()+": "); ok {
				ans.msg = "invalid batch: webhook: " + reason
			}
		case batch.ErrDeadlineTooFar, batch.ErrInvalidDeadline, batch.ErrInvalidMetadata:
			if _, reason, ok := strings.Cut(err.Error(), row.err.Error()+": "); ok {
				ans.msg += ": " + reason
			}
		}
		return &ans
	}
	return &httpError{status: http.StatusInternalServerError, msg: "internal error", code: CodeInternal, cause: err}
}

func tooManyTargets(max int) string { return fmt.Sprintf("too many targets (max %d)", max) }

// tooManyTargetsError is the 422 of a submit of more than max targets.
func tooManyTargetsError(max int) *httpError {
	return &httpError{status: http.StatusUnprocessableEntity, msg: tooManyTargets(max), code: CodeTooManyTargets}
}

// notFound is the one 404 answer: an unknown id, a malformed id, another
// caller's job and an idx outside the job all get exactly these bytes.
var notFound = &httpError{status: http.StatusNotFound, msg: "not found", code: CodeNotFound}

// invalidRequest is a 400 for a bad query parameter.
func invalidRequest(format string, args ...any) *httpError {
	return &httpError{status: http.StatusBadRequest, msg: "invalid request: " + fmt.Sprintf(format, args...), code: CodeInvalidRequest}
}

// invalidBatch is a 400 for a bad submit body.
func invalidBatch(format string, args ...any) *httpError {
	return &httpError{status: http.StatusBadRequest, msg: "invalid batch: " + fmt.Sprintf(format, args...), code: CodeInvalidBatch}
}

// WriteError writes the error body every /v1/batch answer uses,
// {"success":false,"code":code,"error":msg,"hint":hint,"request_id":id}
// (hint left out when empty), with the given status. code should be one of
// the Code constants (a host's own refusal of a caller is [CodeUnauthorized]
// or [CodeForbidden]); an empty code is filled in from the status. The
// request id is the X-Request-Id header already set on w, which the
// [Handler] sets before it calls a [CallerFunc]. A [CallerFunc] can use
// WriteError to refuse a request in the same shape.
func WriteError(w http.ResponseWriter, status int, code, msg, hint string) {
	if code == "" {
		code = codeForStatus(status)
	}
	writeJSON(w, status, ErrorResponse{
		Success: false, Code: code, Error: msg, Hint: hint, RequestID: w.Header().Get(RequestIDHeader),
	})
}

// codeForStatus is the code of an answer written without one.
func codeForStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return CodeInvalidRequest
	case http.StatusUnauthorized:
		return CodeUnauthorized
	case http.StatusForbidden:
		return CodeForbidden
	case http.StatusNotFound:
		return CodeNotFound
	case http.StatusMethodNotAllowed:
		return CodeMethodNotAllowed
	case http.StatusRequestEntityTooLarge:
		return CodeBodyTooLarge
	case http.StatusServiceUnavailable:
		return CodeUnavailable
	}
	if status >= 500 {
		return CodeInternal
	}
	return CodeInvalidRequest
}

// writeAnswer writes e, with its Retry-After header.
func writeAnswer(w http.ResponseWriter, e *httpError) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	WriteError(w, e.status, e.code, e.msg, e.hint)
}

// writeJSON encodes v and writes it with status. It encodes before writing
// the header, so a value that cannot be encoded becomes a clean 500.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := marshal(v)
	if err != nil {
		b = []byte(`{"success":false,"code":"internal","error":"internal error"}` + "\n")
		status = http.StatusInternalServerError
		w.Header().Del("Retry-After")
	}
	writeBody(w, status, b)
}

// writeBody writes an encoded JSON answer.
func writeBody(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	setJSONHeaders(h)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// setJSONHeaders sets the headers of every JSON answer.
func setJSONHeaders(h http.Header) {
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
}

// marshal encodes v as the API writes JSON: without HTML escaping, with a
// trailing newline.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
