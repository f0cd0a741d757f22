package batchnet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"

	"github.com/siftfetch/batchkit/batch"
)

// FetchError is a failed fetch, with a fixed message that never holds the
// URL, a host or an address, and the [batch.Outcome] the runner records
// for it. [CleanError], [StatusError] and the [Client] make them; the
// messages are listed at [CleanError].
//
// Its cause, if any, is a context sentinel: errors.Is(err,
// context.DeadlineExceeded) holds when the fetch's deadline ended it, and
// errors.Is(err, context.Canceled) when its context was cancelled. No
// error that embeds the URL (*url.Error, *net.OpError, *net.DNSError) is
// reachable through Unwrap.
type FetchError struct {
	msg     string
	outcome batch.Outcome
	cause   error
}

// Error returns the fixed message, such as "connect: connection refused".
func (e *FetchError) Error() string { return e.msg }

// Outcome returns the outcome of the failed fetch; it makes a FetchError
// a [batch.OutcomeError].
func (e *FetchError) Outcome() batch.Outcome { return e.outcome }

// Unwrap returns context.DeadlineExceeded or context.Canceled when the
// fetch's context ended it, and nil otherwise.
func (e *FetchError) Unwrap() error { return e.cause }

func failf(outcome batch.Outcome, msg string) *FetchError {
	return &FetchError{msg: msg, outcome: outcome}
}

// Messages of the errors CleanError returns besides the guard's.
const (
	msgDeadline        = "timeout: no response before the deadline"
	msgCancelled       = "fetch: cancelled"
	msgHeaderTimeout   = "timeout: upstream sent no response headers in time"
	msgUpstreamTimeout = "timeout: upstream did not answer in time"
	msgRefused         = "connect: connection refused"
	msgNoRoute         = "connect: no route to host"
	msgCertificate     = "tls: certificate verification failed"
	msgHandshake       = "tls: handshake failed"
	msgClosed          = "fetch: connection closed by upstream"
	msgFailed          = "fetch: request failed"
	msgDNSNotFound     = "dns: host not found"
	msgDNSTimeout      = "dns: lookup timed out"
	msgDNSFailed       = "dns: lookup failed"
)

// CleanError replaces err, an error of a fetch made through a [Client] (or
// through any net/http client: *url.Error, *net.OpError and x509 errors all
// embed the URL, a host or an address), with an error of fixed text that
// carries a [batch.Outcome]. ctx is the fetch's context: when it has ended,
// the error says so, whatever err is. A nil err gives nil.
//
// The result is a *[BlockedError] for a guard's refusal ("blocked: <reason>",
// outcome blocked) and a *[FetchError] otherwise, with the outcome that says
// whether a retry can help (see [batch.Outcome.Retryable]):
//
//   - "timeout: no response before the deadline": ctx's deadline passed
//     (timeout; also matches context.DeadlineExceeded with [errors.Is]).
//   - "fetch: cancelled": ctx was cancelled (cancel; matches
//     context.Canceled).
//   - "timeout: upstream sent no response headers in time" and
//     "timeout: upstream did not answer in time": a timeout of the
//     transport's own, such as [ClientConfig.HeaderTimeout], before the
//     fetch's deadline (timeout; no context sentinel, so that nobody takes
//     it for the deadline of the whole fetch).
//   - "dns: host not found": the name does not exist (upstream_4xx; a retry
//     repeats it). "dns: lookup timed out" (timeout) and "dns: lookup
//     failed" (upstream_5xx).
//   - "connect: connection refused", "connect: no route to host" and
//     "fetch: connection closed by upstream" (a reset, or an early end of
//     the answer): upstream_5xx.
//   - "tls: certificate verification failed" and "tls: handshake failed":
//     unsupported (the target cannot be fetched securely).
//   - "fetch: too many redirects (max N)" and, for anything else,
//     "fetch: request failed": other.
//
// An error that is already clean (a *BlockedError or a *FetchError
// anywhere in err's chain) is returned as a fresh copy of itself, without
// what wraps it.
func CleanError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var be *BlockedError
	if errors.As(err, &be) {
		return &BlockedError{Reason: be.Reason}
	}
	var fe *FetchError
	if errors.As(err, &fe) {
		return &FetchError{msg: fe.msg, outcome: fe.outcome, cause: fe.cause}
	}
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return &FetchError{msg: msgDeadline, outcome: batch.OutcomeTimeout, cause: context.DeadlineExceeded}
	case ctx.Err() != nil || errors.Is(err, context.Canceled):
		return &FetchError{msg: msgCancelled, outcome: batch.OutcomeCancel, cause: context.Canceled}
	}
	// A timeout of the transport's own (connect, TLS handshake, response
	// headers), before the fetch's deadline: no context sentinel as cause,
	// so that nobody takes it for the deadline of the whole fetch.
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		if strings.Contains(err.Error(), "awaiting response headers") {
			return failf(batch.OutcomeTimeout, msgHeaderTimeout)
		}
		return failf(batch.OutcomeTimeout, msgUpstreamTimeout)
	}
	var (
		cve  *tls.CertificateVerificationError
		hne  x509.HostnameError
		uae  x509.UnknownAuthorityError
		cie  x509.CertificateInvalidError
		rhe  tls.RecordHeaderError
		alrt tls.AlertError
	)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return failf(batch.OutcomeUpstream5xx, msgRefused)
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return failf(batch.OutcomeUpstream5xx, msgNoRoute)
	case errors.As(err, &cve), errors.As(err, &hne), errors.As(err, &uae), errors.As(err, &cie):
		return failf(batch.OutcomeUnsupported, msgCertificate)
	case errors.As(err, &rhe), errors.As(err, &alrt),
		// net/http's own text for a plain-HTTP answer to a TLS hello.
		strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return failf(batch.OutcomeUnsupported, msgHandshake)
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return failf(batch.OutcomeUpstream5xx, msgClosed)
	}
	return failf(batch.OutcomeOther, msgFailed)
}

// StatusError maps the final HTTP status of a fetch to an error, "upstream:
// status <code>": nil for 2xx, a *[FetchError] with outcome upstream_4xx for
// 4xx, upstream_5xx for 5xx, and other for any other code (a 3xx without a
// usable Location, or an odd code).
func StatusError(code int) error {
	msg := "upstream: status " + strconv.Itoa(code)
	switch {
	case code >= 200 && code <= 299:
		return nil
	case code >= 400 && code <= 499:
		return failf(batch.OutcomeUpstream4xx, msg)
	case code >= 500 && code <= 599:
		return failf(batch.OutcomeUpstream5xx, msg)
	}
	return failf(batch.OutcomeOther, msg)
}

// lookupError is the error of a failed name lookup, of fixed text. ctx is
// the dial's context.
func lookupError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var de *net.DNSError
	switch {
	case errors.As(err, &de) && de.IsNotFound:
		return failf(batch.OutcomeUpstream4xx, msgDNSNotFound)
	case errors.As(err, &de) && de.IsTimeout:
		return failf(batch.OutcomeTimeout, msgDNSTimeout)
	}
	return failf(batch.OutcomeUpstream5xx, msgDNSFailed)
}
