package batchhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/siftfetch/batchkit/batch"
)

func TestAnswerFor(t *testing.T) {
	t.Parallel()

	f := func(err error, status int, msg string, retryAfter int) {
		t.Helper()
		got := answerFor(err, 32)
		if got.status != status || got.msg != msg || got.retryAfter != retryAfter {
			t.Errorf("answerFor(%v) = %d %q retry %d; want %d %q retry %d",
				err, got.status, got.msg, got.retryAfter, status, msg, retryAfter)
		}
	}
	wrap := func(err error) error { return fmt.Errorf("batch: submit: %w", err) }
	f(wrap(batch.ErrNotFound), 404, "not found", 0)
	f(wrap(batch.ErrFinished), 409, "job already finished", 0)
	f(wrap(batch.ErrCallerBusy), 429, "busy: a batch of yours is still running", 30)
	f(wrap(batch.ErrBusy), 429, "batch jobs busy", 60)
	f(wrap(batch.ErrWebhooksBusy), 429, "busy: too many of your webhook events are pending", 60)
	f(batch.ErrNoTargets, 400, "invalid batch: no targets", 0)
	f(fmt.Errorf("%w: 33 (max 32)", batch.ErrTooManyTargets), 422, "too many targets (max 32)", 0)
	f(&batch.TargetError{Index: 4, Reason: "empty url"}, 400, "invalid batch: target 4: empty url", 0)
	f(wrap(&batch.TargetError{Index: 0, Reason: `unknown mode "x"`}), 400, `invalid batch: target 0: unknown mode "x"`, 0)
	f(batch.ErrClosed, 503, "batch jobs unavailable", 5)
	f(wrap(batch.ErrNotStarted), 503, "batch jobs unavailable", 5)
	f(wrap(batch.ErrUnavailable), 503, "batch jobs unavailable", 5)
	f(fmt.Errorf("take conn: %w", context.DeadlineExceeded), 503, "batch jobs unavailable", 5)
	f(batch.ErrInvalidCaller, 500, "internal error", 0)
	f(errors.New("SQLITE_CORRUPT: database disk image is malformed"), 500, "internal error", 0)
	f(invalidBatch("no targets"), 400, "invalid batch: no targets", 0)

	// The table itself never answers with a 5xx for a client's mistake.
	for _, row := range errorTable {
		if row.ans.status >= 500 && row.ans.retryAfter == 0 {
			t.Errorf("%v: %d without Retry-After", row.err, row.ans.status)
		}
		if row.ans.status == 429 && row.ans.retryAfter < 1 {
			t.Errorf("%v: 429 without Retry-After", row.err)
		}
	}
}

func TestWriteError(t *testing.T) {
	t.Parallel()

	rec := httptest.NewRecorder()
	WriteError(rec, 403, CodeForbidden, "forbidden", "")
	if got, want := rec.Body.String(), `{"success":false,"code":"forbidden","error":"forbidden"}`+"\n"; got != want {
		t.Errorf("body %q, want %q", got, want)
	}
	rec = httptest.NewRecorder()
	rec.Header().Set(RequestIDHeader, "req-1")
	WriteError(rec, 401, "", "a <b> & c", "use a key")
	if got, want := rec.Body.String(), `{"success":false,"code":"unauthorized","error":"a <b> & c","hint":"use a key","request_id":"req-1"}`+"\n"; got != want {
		t.Errorf("body %q, want %q", got, want)
	}
	if rec.Code != 401 || rec.Header().Get("Content-Type") != "application/json" || rec.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("status %d, headers %v", rec.Code, rec.Header())
	}
}
