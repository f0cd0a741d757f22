package batchnet

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/siftfetch/batchkit/batch"
)

// DefaultRetryAfter is the wait [ResponseError] asks for after a 429
// that gives no usable Retry-After header.
const DefaultRetryAfter = time.Second

// ResponseError maps a fetch's final response to an error. It is nil for
// a 2xx and [StatusError](resp.StatusCode) otherwise, so the outcome is
// upstream_4xx or upstream_5xx as before.
//
// A 429 or a 503 with a Retry-After header is also marked with
// [batch.RetryAfter]: the runner then holds the host back for that long
// and fetches the target again, instead of failing it. The wait is
// measured from the response's Date header when it has one, so that a
// skew between the upstream's clock and ours does not change it.
//
// A 429 without a usable header still waits [DefaultRetryAfter]: a 429
// always asks the client to slow down, and a retry at once would only
// earn another. A 503 without one is a plain error: it is as often an
// outage as a request to wait, and the caller may retry it later.
//
// The error never holds the URL or the host.
func ResponseError(resp *http.Response) error {
	err := StatusError(resp.StatusCode)
	if err == nil {
		return nil
	}
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
		return err
	}
	now := time.Now()
	if date, derr := http.ParseTime(resp.Header.Get("Date")); derr == nil {
		now = date
	}
	if d, ok := ParseRetryAfter(resp.Header.Get("Retry-After"), now); ok {
		return batch.RetryAfter(d, err)
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		return batch.RetryAfter(DefaultRetryAfter, err)
	}
	return err
}

// ParseRetryAfter parses a Retry-After header value: delta-seconds, or an
// HTTP date measured from now. A date in the past, or a negative number,
// gives zero. It reports false for an empty or unparseable value.
func ParseRetryAfter(h string, now time.Time) (time.Duration, bool) {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0, false
	}
	switch n, err := strconv.ParseInt(h, 10, 64); {
	case err == nil:
		const maxSeconds = math.MaxInt64 / int64(time.Second)
		return time.Duration(min(max(n, 0), maxSeconds)) * time.Second, true
	case errors.Is(err, strconv.ErrRange) && strings.HasPrefix(h, "-"):
		return 0, true
	case errors.Is(err, strconv.ErrRange):
		return time.Duration(math.MaxInt64), true
	}
	t, err := http.ParseTime(h)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}
