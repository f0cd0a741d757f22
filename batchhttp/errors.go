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

// httpError is an answer decided on: what the client sees, and the fixed
// word that the log line carries instead of the message (which may hold
// client input or a pre-check reason naming a host).
type httpError struct {
	status     int
	msg        string
	hint       string
	code       string // fixed vocabulary, safe to log
	retryAfter int    // seconds; 0 means no Retry-After header
	cause      error  // logged with a 5xx answer, for unrestricted callers only
}

func (e *httpError) Error() string { return e.msg }

// Log codes of the answers.
const (
	codeInvalid     = "invalid"
	codeBlocked     = "blocked"
	codeTooMany     = "too_many_targets"
	codeCallerBusy  = "caller_busy"
	codeBusy        = "busy"
	codeTooLarge    = "too_large"
	codeNotFound    = "not_found"
	codeFinished    = "finished"
	codeMethod      = "method_not_allowed"
	codeUnavailable = "unavailable"
	codeInternal    = "internal"
	codeAuth        = "unauthorized"
	codeTimeout     = "timeout"
	codeResultsBig  = "results_too_large"
	codeResultsBusy = "results_busy"
	codeNoWebhooks  = "webhooks_disabled"
)

// errorTable maps the core's sentinels to answers: the one place where a
// batch error becomes an HTTP status. Rows are tried in order with
// [errors.Is]; the first match wins. An error matching no row is a 500 whose
// message never leaks the error's text.
var errorTable = []struct {
	err error
	ans httpError
}{
	{batch.ErrNotFound, httpError{status: http.StatusNotFound, msg: "not found", code: codeNotFound}},
	{batch.ErrFinished, httpError{status: http.StatusConflict, msg: "job already finished", code: codeFinished}},
	{batch.ErrCallerBusy, httpError{
		status: http.StatusTooManyRequests, msg: "busy: a batch of yours is still running",
		hint: "wait for it (GET /v1/batch lists your jobs) or cancel it", code: codeCallerBusy, retryAfter: 30,
	}},
	{batch.ErrBusy, httpError{status: http.StatusTooManyRequests, msg: "batch jobs busy", code: codeBusy, retryAfter: 60}},
	{batch.ErrNoTargets, httpError{status: http.StatusBadRequest, msg: "invalid batch: no targets", code: codeInvalid}},
	// The message gets the configured cap: "too many targets (max N)".
	{batch.ErrTooManyTargets, httpError{status: http.StatusUnprocessableEntity, msg: "too many targets", code: codeTooMany}},
	// The message gets the *batch.TargetError's index and reason.
	{batch.ErrInvalidTarget, httpError{status: http.StatusBadRequest, msg: "invalid batch: invalid target", code: codeInvalid}},
	// The message gets the core's reason: "invalid batch: webhook: …".
	{batch.ErrInvalidWebhook, httpError{status: http.StatusBadRequest, msg: "invalid batch: webhook", code: codeInvalid}},
	{batch.ErrWebhooksDisabled, httpError{status: http.StatusUnprocessableEntity, msg: "webhooks are not enabled on this server", code: codeNoWebhooks}},
	{batch.ErrClosed, httpError{status: http.StatusServiceUnavailable, msg: "batch jobs unavailable", code: codeUnavailable, retryAfter: 5}},
	{batch.ErrNotStarted, httpError{status: http.StatusServiceUnavailable, msg: "batch jobs unavailable", code: codeUnavailable, retryAfter: 5}},
	{batch.ErrUnavailable, httpError{status: http.StatusServiceUnavailable, msg: "batch jobs unavailable", code: codeUnavailable, retryAfter: 5}},
	// A store call that ran out of time (e.g. waiting for a lock).
	{context.DeadlineExceeded, httpError{status: http.StatusServiceUnavailable, msg: "batch jobs unavailable", code: codeUnavailable, retryAfter: 5}},
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
		}
		return &ans
	}
	return &httpError{status: http.StatusInternalServerError, msg: "internal error", code: codeInternal, cause: err}
}

func tooManyTargets(max int) string { return fmt.Sprintf("too many targets (max %d)", max) }

// notFound is the one 404 answer: an unknown id, a malformed id, another
// caller's job and an idx outside the job all get exactly these bytes.
var notFound = &httpError{status: http.StatusNotFound, msg: "not found", code: codeNotFound}

// invalidRequest is a 400 for a bad query parameter.
func invalidRequest(format string, args ...any) *httpError {
	return &httpError{status: http.StatusBadRequest, msg: "invalid request: " + fmt.Sprintf(format, args...), code: codeInvalid}
}

// invalidBatch is a 400 for a bad submit body.
func invalidBatch(format string, args ...any) *httpError {
	return &httpError{status: http.StatusBadRequest, msg: "invalid batch: " + fmt.Sprintf(format, args...), code: codeInvalid}
}

// WriteError writes the error body every /v1/batch answer uses,
// {"success":false,"error":msg,"hint":hint} (hint left out when empty), with
// the given status. A [CallerFunc] can use it to refuse a request in the same
// shape.
func WriteError(w http.ResponseWriter, status int, msg, hint string) {
	writeJSON(w, status, ErrorResponse{Success: false, Error: msg, Hint: hint})
}

// writeAnswer writes e, with its Retry-After header.
func writeAnswer(w http.ResponseWriter, e *httpError) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	WriteError(w, e.status, e.msg, e.hint)
}

// writeJSON encodes v and writes it with status. It encodes before writing
// the header, so a value that cannot be encoded becomes a clean 500.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := marshal(v)
	if err != nil {
		b = []byte(`{"success":false,"error":"internal error"}` + "\n")
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
