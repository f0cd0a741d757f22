package batchnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
)

func TestCleanError(t *testing.T) {
	t.Parallel()

	live := t.Context()
	expired, cancel := context.WithDeadline(live, time.Unix(0, 0))
	t.Cleanup(cancel)
	cancelled, cancel2 := context.WithCancel(live)
	cancel2()

	const secret = "http://c-host.test:8709/secret-path?token=abc"
	opErr := func(e error) error {
		return &url.Error{Op: "Get", URL: secret, Err: &net.OpError{
			Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 8709}, Err: e,
		}}
	}

	f := func(ctx context.Context, err error, outcome batch.Outcome, msg string) {
		t.Helper()
		got := CleanError(ctx, err)
		if got == nil {
			t.Fatalf("CleanError(%v) = nil, want %q", err, msg)
		}
		if got.Error() != msg || outcomeOf(got) != outcome {
			t.Errorf("CleanError(%v) = %q (%s), want %q (%s)", err, got, outcomeOf(got), msg, outcome)
		}
		assertNoLeak(t, got, secret, "c-host.test", "8709", "10.1.2.3", "secret-path", "token=abc")
	}

	f(live, opErr(syscall.ECONNREFUSED), batch.OutcomeUpstream5xx, "connect: connection refused")
	f(live, opErr(syscall.EHOSTUNREACH), batch.OutcomeUpstream5xx, "connect: no route to host")
	f(live, opErr(syscall.ENETUNREACH), batch.OutcomeUpstream5xx, "connect: no route to host")
	f(live, opErr(syscall.ECONNRESET), batch.OutcomeUpstream5xx, "fetch: connection closed by upstream")
	f(live, &url.Error{Op: "Get", URL: secret, Err: io.EOF}, batch.OutcomeUpstream5xx, "fetch: connection closed by upstream")
	f(live, &url.Error{Op: "Get", URL: secret, Err: context.DeadlineExceeded}, batch.OutcomeTimeout, "timeout: upstream did not answer in time")
	f(live, opErr(errors.New("some other failure")), batch.OutcomeOther, "fetch: request failed")
	f(live, errors.New("Get "+secret+": odd"), batch.OutcomeOther, "fetch: request failed")
	f(live, &url.Error{Op: "Get", URL: secret, Err: context.Canceled}, batch.OutcomeCancel, "fetch: cancelled")
	// An ended context decides, whatever the error.
	f(expired, opErr(syscall.ECONNREFUSED), batch.OutcomeTimeout, "timeout: no response before the deadline")
	f(cancelled, opErr(syscall.ECONNREFUSED), batch.OutcomeCancel, "fetch: cancelled")
	// Already clean: a copy without what wraps it.
	f(live, &url.Error{Op: "Get", URL: secret, Err: &BlockedError{Reason: ReasonPrivate}}, batch.OutcomeBlocked, "blocked: private address")
	f(expired, fmt.Errorf("%s: %w", secret, StatusError(503)), batch.OutcomeUpstream5xx, "upstream: status 503")

	if got := CleanError(live, nil); got != nil {
		t.Errorf("CleanError(nil) = %v, want nil", got)
	}
	if err := CleanError(expired, opErr(syscall.ECONNREFUSED)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("errors.Is(%v, DeadlineExceeded) = false", err)
	}
	if err := CleanError(cancelled, opErr(syscall.ECONNREFUSED)); !errors.Is(err, context.Canceled) {
		t.Errorf("errors.Is(%v, Canceled) = false", err)
	}
	if err := CleanError(live, opErr(syscall.ECONNREFUSED)); errors.Unwrap(err) != nil {
		t.Errorf("Unwrap(%v) = %v, want nil", err, errors.Unwrap(err))
	}
}

func TestStatusError(t *testing.T) {
	t.Parallel()

	f := func(code int, want batch.Outcome) {
		t.Helper()
		err := StatusError(code)
		if want == "" {
			if err != nil {
				t.Errorf("StatusError(%d) = %v, want nil", code, err)
			}
			return
		}
		var oe batch.OutcomeError
		if !errors.As(err, &oe) || oe.Outcome() != want {
			t.Errorf("StatusError(%d) = %v, want outcome %s", code, err, want)
		}
		if msg := fmt.Sprintf("upstream: status %d", code); err == nil || err.Error() != msg {
			t.Errorf("StatusError(%d) = %v, want %q", code, err, msg)
		}
	}

	f(200, "")
	f(204, "")
	f(299, "")
	f(100, batch.OutcomeOther)
	f(199, batch.OutcomeOther)
	f(300, batch.OutcomeOther)
	f(304, batch.OutcomeOther)
	f(399, batch.OutcomeOther)
	f(400, batch.OutcomeUpstream4xx)
	f(404, batch.OutcomeUpstream4xx)
	f(429, batch.OutcomeUpstream4xx)
	f(499, batch.OutcomeUpstream4xx)
	f(500, batch.OutcomeUpstream5xx)
	f(502, batch.OutcomeUpstream5xx)
	f(599, batch.OutcomeUpstream5xx)
	f(600, batch.OutcomeOther)
	f(0, batch.OutcomeOther)
}
