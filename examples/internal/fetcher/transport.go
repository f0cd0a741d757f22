package fetcher

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchnet"
)

// MaxRedirects is how many redirects one fetch follows at most.
const MaxRedirects = 5

// maxDialAddrs caps how many of a name's addresses one dial tries.
const maxDialAddrs = 4

// fetchError is an error with a fixed, clean message: it never holds the
// URL, a host or an address. Its cause, if any, is a context sentinel, so
// that errors.Is(err, context.DeadlineExceeded) holds for a timeout while
// no error that embeds the URL (*url.Error, *net.OpError, *net.DNSError)
// stays reachable through Unwrap.
type fetchError struct {
	msg     string
	outcome batch.Outcome
	cause   error
}

func (e *fetchError) Error() string          { return e.msg }
func (e *fetchError) Outcome() batch.Outcome { return e.outcome }
func (e *fetchError) Unwrap() error          { return e.cause }

func failf(outcome batch.Outcome, msg string) error {
	return &fetchError{msg: msg, outcome: outcome}
}

var errTooManyRedirects = failf(batch.OutcomeOther, "fetch: too many redirects (max "+strconv.Itoa(MaxRedirects)+")")

// newTransport returns the guarded transport: no proxy, every connection
// made through f.dialContext, bounded timeouts and header size.
// responseHeaderTimeout is the transport's wait for response headers: the
// header timeout when it is shorter than the fetch's own, and none
// otherwise, since the fetch's deadline then ends the wait first. Were both
// the same, which one fired first would decide the error's text.
func (f *Fetcher) responseHeaderTimeout() time.Duration {
	if f.headerTimeout < f.timeout {
		return f.headerTimeout
	}
	return 0
}

func (f *Fetcher) newTransport() *http.Transport {
	return &http.Transport{
		Proxy:                  nil, // never a proxy from the environment: it would be dialled instead of the target
		DialContext:            f.dialContext,
		ForceAttemptHTTP2:      true,
		TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    10 * time.Second,
		ResponseHeaderTimeout:  f.responseHeaderTimeout(),
		ExpectContinueTimeout:  time.Second,
		MaxIdleConns:           16,
		MaxIdleConnsPerHost:    2,
		IdleConnTimeout:        60 * time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
}

// checkRedirect follows at most MaxRedirects redirects, each to a URL that
// passes the pre-check; the dial of each is guarded again by dialContext.
func (f *Fetcher) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > MaxRedirects {
		return errTooManyRedirects
	}
	return f.guard.Precheck(req.URL.String())
}

// dialContext resolves addr's host once, refuses the dial if any of its
// addresses is refused by the guard, and then dials the addresses (not the
// name) in order, each connection checked again by the dialer's Control
// just before connect.
func (f *Fetcher) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, blocked(batchnet.ReasonInvalid)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, blocked(batchnet.ReasonInvalid)
	}
	ips, err := f.resolve(ctx, host)
	if err != nil {
		return nil, err
	}
	aps := make([]netip.AddrPort, 0, len(ips))
	for _, ip := range ips {
		ap := netip.AddrPortFrom(ip, uint16(port))
		if err := f.guard.CheckAddr(ap); err != nil {
			return nil, err // one refused answer refuses the name
		}
		aps = append(aps, netip.AddrPortFrom(ip.Unmap(), uint16(port)))
	}
	var last error
	for _, ap := range aps[:min(len(aps), maxDialAddrs)] {
		conn, err := f.dialer.DialContext(ctx, network, ap.String())
		if err == nil {
			return conn, nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, last
}

// resolve returns host's addresses: the address itself for an IP literal,
// the lookup's answers for a name. A host that ends in a number but is not
// a canonical IP literal is refused without a lookup.
func (f *Fetcher) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if strings.Contains(host, "%") {
		return nil, blocked(batchnet.ReasonZone)
	}
	h := strings.TrimSuffix(host, ".")
	if ip, err := netip.ParseAddr(h); err == nil {
		return []netip.Addr{ip}, nil
	}
	if batchnet.NumericHost(h) {
		return nil, blocked(batchnet.ReasonNonCanonical)
	}
	ips, err := f.lookup(ctx, host)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var de *net.DNSError
		switch {
		case errors.As(err, &de) && de.IsNotFound:
			return nil, failf(batch.OutcomeUpstream4xx, "dns: host not found")
		case errors.As(err, &de) && de.IsTimeout:
			return nil, failf(batch.OutcomeTimeout, "dns: lookup timed out")
		}
		return nil, failf(batch.OutcomeUpstream5xx, "dns: lookup failed")
	}
	if len(ips) == 0 {
		return nil, failf(batch.OutcomeUpstream4xx, "dns: host not found")
	}
	return ips, nil
}

// control is the dialer's Control: the guard, then the BeforeConnect hook.
func (f *Fetcher) control(network, address string, c syscall.RawConn) error {
	if err := f.guard.Control(network, address, c); err != nil {
		return err
	}
	if f.beforeConnect != nil {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return blocked(batchnet.ReasonInvalid)
		}
		return f.beforeConnect(network, ap)
	}
	return nil
}

// cleanError replaces err, which may embed the URL, a host or an address
// (*url.Error, *net.OpError, x509 errors), with an error of fixed text that
// carries an outcome. ctx is the fetch's context.
func cleanError(ctx context.Context, err error) error {
	var be *batchnet.BlockedError
	if errors.As(err, &be) {
		return &batchnet.BlockedError{Reason: be.Reason}
	}
	var fe *fetchError
	if errors.As(err, &fe) {
		return &fetchError{msg: fe.msg, outcome: fe.outcome, cause: fe.cause}
	}
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return &fetchError{msg: "timeout: no response before the deadline", outcome: batch.OutcomeTimeout, cause: context.DeadlineExceeded}
	case ctx.Err() != nil || errors.Is(err, context.Canceled):
		return &fetchError{msg: "fetch: cancelled", outcome: batch.OutcomeCancel, cause: context.Canceled}
	}
	// A timeout of the transport's own (connect, TLS handshake, response
	// headers), before the fetch's deadline: no context sentinel as cause,
	// so that nobody takes it for the deadline of the whole fetch.
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		if strings.Contains(err.Error(), "awaiting response headers") {
			return failf(batch.OutcomeTimeout, "timeout: upstream sent no response headers in time")
		}
		return failf(batch.OutcomeTimeout, "timeout: upstream did not answer in time")
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
		return failf(batch.OutcomeUpstream5xx, "connect: connection refused")
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return failf(batch.OutcomeUpstream5xx, "connect: no route to host")
	case errors.As(err, &cve), errors.As(err, &hne), errors.As(err, &uae), errors.As(err, &cie):
		return failf(batch.OutcomeUnsupported, "tls: certificate verification failed")
	case errors.As(err, &rhe), errors.As(err, &alrt),
		// net/http's own text for a plain-HTTP answer to a TLS hello.
		strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return failf(batch.OutcomeUnsupported, "tls: handshake failed")
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return failf(batch.OutcomeUpstream5xx, "fetch: connection closed by upstream")
	}
	return failf(batch.OutcomeOther, "fetch: request failed")
}

// blocked is the guard's refusal for reason.
func blocked(reason string) error { return &batchnet.BlockedError{Reason: reason} }
