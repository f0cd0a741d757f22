package batchnet

import (
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()

	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	f := func(h string, want time.Duration, wantOK bool) {
		t.Helper()
		got, ok := ParseRetryAfter(h, now)
		if got != want || ok != wantOK {
			t.Errorf("ParseRetryAfter(%q) = %s, %v; want %s, %v", h, got, ok, want, wantOK)
		}
	}

	f("30", 30*time.Second, true)
	f(" 0 ", 0, true)
	f("-5", 0, true)
	f("99999999999999999999", time.Duration(math.MaxInt64), true)
	f("-99999999999999999999", 0, true)
	f(strconv.FormatInt(math.MaxInt64/int64(time.Second)+1, 10), math.MaxInt64/time.Second*time.Second, true)
	f(now.Add(90*time.Second).Format(http.TimeFormat), 90*time.Second, true)
	f(now.Add(-time.Hour).Format(http.TimeFormat), 0, true)
	f("Wednesday, 02-Dec-26 12:01:00 GMT", time.Minute, true) // RFC 850, an obsolete form
	f("", 0, false)
	f("soon", 0, false)
	f("1.5", 0, false)
	f("30s", 0, false)
}

func TestResponseError(t *testing.T) {
	t.Parallel()

	date := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	f := func(code int, retryAfter string, wantOutcome batch.Outcome, wantWait time.Duration, wantRetry bool) {
		t.Helper()
		resp := &http.Response{StatusCode: code, Header: http.Header{"Date": {date.Format(http.TimeFormat)}}}
		if retryAfter != "" {
			resp.Header.Set("Retry-After", retryAfter)
		}
		err := ResponseError(resp)
		if wantOutcome == "" {
			if err != nil {
				t.Errorf("ResponseError(%d, %q) = %v, want nil", code, retryAfter, err)
			}
			return
		}
		if got := outcomeOf(err); got != wantOutcome {
			t.Errorf("ResponseError(%d, %q) outcome = %q, want %q", code, retryAfter, got, wantOutcome)
		}
		if msg := "upstream: status " + strconv.Itoa(code); err == nil || err.Error() != msg {
			t.Errorf("ResponseError(%d, %q) = %v, want %q", code, retryAfter, err, msg)
		}
		wait, ok := batch.RetryAfterOf(err)
		if wait != wantWait || ok != wantRetry {
			t.Errorf("RetryAfterOf(ResponseError(%d, %q)) = %s, %v; want %s, %v", code, retryAfter, wait, ok, wantWait, wantRetry)
		}
	}

	f(200, "", "", 0, false)
	f(204, "30", "", 0, false)
	f(429, "30", batch.OutcomeUpstream4xx, 30*time.Second, true)
	f(503, "30", batch.OutcomeUpstream5xx, 30*time.Second, true)
	f(429, date.Add(2*time.Minute).Format(http.TimeFormat), batch.OutcomeUpstream4xx, 2*time.Minute, true) // from the response's Date
	f(503, date.Add(-time.Minute).Format(http.TimeFormat), batch.OutcomeUpstream5xx, 0, true)
	f(503, "-3", batch.OutcomeUpstream5xx, 0, true)
	f(429, "", batch.OutcomeUpstream4xx, DefaultRetryAfter, true)
	f(429, "later", batch.OutcomeUpstream4xx, DefaultRetryAfter, true)
	f(503, "", batch.OutcomeUpstream5xx, 0, false)
	f(503, "later", batch.OutcomeUpstream5xx, 0, false)
	f(500, "30", batch.OutcomeUpstream5xx, 0, false)
	f(404, "30", batch.OutcomeUpstream4xx, 0, false)
	f(302, "", batch.OutcomeOther, 0, false)
}

// TestResponseError_NoDate measures an HTTP date from our clock when the
// response has no Date header.
func TestResponseError_NoDate(t *testing.T) {
	t.Parallel()

	resp := &http.Response{StatusCode: 503, Header: http.Header{"Retry-After": {time.Now().Add(time.Hour).Format(http.TimeFormat)}}}
	wait, ok := batch.RetryAfterOf(ResponseError(resp))
	if !ok || wait < 58*time.Minute || wait > time.Hour {
		t.Errorf("RetryAfterOf = %s, %v; want about 1h, true", wait, ok)
	}
}
