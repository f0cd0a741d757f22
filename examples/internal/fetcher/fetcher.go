// Package fetcher is a real web fetcher for the example daemon: a
// [batch.FetchFunc] over net/http with a server-side request forgery (SSRF)
// guard, usable by any host that embeds batchkit.
//
// # Guard
//
// The guard is [batchnet.Guard], the classifier the batchhttp pre-check
// uses too, and works in two places. [batchnet.Guard.Precheck] checks a URL
// without DNS and fits the batchhttp pre-check hook:
// http or https only, port 80 or 443, no userinfo, a host, at most
// [batchnet.MaxURLBytes] bytes, no IP literal in a refused range and no legacy numeric
// host form. It cannot see where a name points, so the [Fetcher] checks every
// connection again at connect time: it resolves the host once, refuses the
// dial if any answer is refused by [batchnet.Classify] (so a name with mixed public and
// private answers is refused whole, whichever answer a dialer would pick), dials
// the checked addresses rather than the name, and a [net.Dialer] Control
// ([batchnet.Guard.Control]) checks the address once more just before connect. This
// holds for every redirect (at most [MaxRedirects]), each of which also passes
// the pre-check, and for a name whose answer changed since the pre-check (DNS
// rebinding). The transport never uses a proxy from the environment.
//
// An allow list of exact host:port strings exempts local test servers; see
// [batchnet.Guard].
//
// # Errors
//
// No error the fetcher returns contains the URL, a host name or an address:
// the runner stores target errors and returns them to the job's owner, and
// *url.Error, *net.OpError and x509 errors all embed them. Every error is
// replaced by one of fixed text that carries a [batch.Outcome]: "blocked: …"
// (blocked), "upstream: status 404" (upstream_4xx), "upstream: status 502"
// (upstream_5xx), "unsupported: …" (unsupported), "too long: …" (too_long),
// "timeout: …" and "dns: lookup timed out" (timeout; a context deadline also
// matches context.DeadlineExceeded with [errors.Is]). Network failures get
// the outcome that says whether a retry can help (see
// [batch.Outcome.Retryable]): "dns: host not found" is upstream_4xx (the
// name does not exist; a retry repeats it), "dns: lookup failed",
// "connect: connection refused", "connect: no route to host" and
// "fetch: connection closed by upstream" (a reset) are upstream_5xx, and
// "tls: certificate verification failed" and "tls: handshake failed" are
// unsupported (the target cannot be fetched securely). What is left,
// "fetch: too many redirects", "fetch: request failed" and an odd status, is
// other.
//
// # Modes
//
// Mode "" and "raw" return the body as text. Mode "clean" returns the readable
// text of an HTML page (see [ExtractText]) and other text types unchanged.
// Grep then keeps only the lines that match: Grep is a Go regular expression
// (RE2 syntax; use "(?i)" for case-insensitive matching) when it compiles, and
// a literal substring otherwise. Mode "digest" and the options question, jq and
// pages need a model or a parser this fetcher does not have: they fail with
// outcome unsupported before anything is fetched. Context and Recover are
// accepted and ignored. Bodies are decoded as UTF-8 (invalid bytes become
// U+FFFD) unless the charset is ISO-8859-1 or windows-1252, read as Latin-1;
// a body whose type is not text fails with outcome unsupported.
package fetcher

import (
	"cmp"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchnet"
)

// Defaults for [Options].
const (
	DefaultMaxBytes = 2 << 20
	DefaultTimeout  = 30 * time.Second
	// DefaultHeaderTimeout: how long an upstream may take to start its
	// answer.
	DefaultHeaderTimeout = 30 * time.Second
	DefaultUserAgent     = "batchkit-fetcher/1.0"
)

// LookupFunc resolves a host name to its addresses.
type LookupFunc func(ctx context.Context, host string) ([]netip.Addr, error)

// ConnectFunc is called with each address a connection is about to be made
// to, after the guard let it through; a non-nil error refuses the
// connection.
type ConnectFunc func(network string, addr netip.AddrPort) error

// Options configure a [Fetcher]. The zero value is ready to use.
type Options struct {
	// Allow lists exact "host:port" strings exempt from the guard's port
	// and address rules, for local testing; see [Guard]. Defaults to none.
	Allow []string
	// MaxBytes caps a response body (after decompression); a larger body
	// fails with outcome too_long. Defaults to DefaultMaxBytes (2 MiB).
	MaxBytes int64
	// Timeout bounds one fetch, redirects and body included, within the
	// deadline the caller's context already has. Defaults to
	// DefaultTimeout (30s).
	Timeout time.Duration
	// HeaderTimeout bounds the wait for the response headers once a
	// request is sent, within Timeout. Defaults to 30s.
	HeaderTimeout time.Duration
	// UserAgent is the User-Agent header. Defaults to DefaultUserAgent.
	UserAgent string
	// Lookup resolves host names. Tests set it to map names to loopback
	// addresses without real DNS. Defaults to [net.DefaultResolver]'s
	// LookupNetIP.
	Lookup LookupFunc
	// BeforeConnect, if set, is called just before each connect, after the
	// guard approved the address; tests use it to record dials and to make
	// sure nothing but loopback is ever dialled. Defaults to nil.
	BeforeConnect ConnectFunc
}

// Fetcher fetches targets over HTTP behind the SSRF guard. It is safe for
// concurrent use.
type Fetcher struct {
	guard         *batchnet.Guard
	maxBytes      int64
	timeout       time.Duration
	headerTimeout time.Duration
	userAgent     string
	lookup        LookupFunc
	beforeConnect ConnectFunc
	dialer        *net.Dialer
	transport     *http.Transport
	client        *http.Client
}

// New returns a Fetcher configured by opts. A zero or negative MaxBytes or
// Timeout means its default.
func New(opts Options) *Fetcher {
	f := &Fetcher{
		guard:         batchnet.NewGuard(opts.Allow),
		maxBytes:      cmp.Or(max(opts.MaxBytes, 0), DefaultMaxBytes),
		timeout:       cmp.Or(max(opts.Timeout, 0), DefaultTimeout),
		headerTimeout: cmp.Or(max(opts.HeaderTimeout, 0), DefaultHeaderTimeout),
		userAgent:     cmp.Or(opts.UserAgent, DefaultUserAgent),
		lookup:        opts.Lookup,
		beforeConnect: opts.BeforeConnect,
	}
	if f.lookup == nil {
		f.lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	f.dialer = &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: f.control}
	f.transport = f.newTransport()
	f.client = &http.Client{Transport: f.transport, CheckRedirect: f.checkRedirect}
	return f
}

// Precheck checks rawURL with the fetcher's allow list and no DNS; see
// [Guard.Precheck]. It fits the batchhttp pre-check hook.
func (f *Fetcher) Precheck(rawURL string) error { return f.guard.Precheck(rawURL) }

// Client returns the fetcher's HTTP client: every connection it makes,
// redirects included, passes the guard at connect time. A host gives it to
// batchhttp.NewWebhookSender, so that a webhook cannot reach what a
// target cannot (the sender does not follow redirects). Its errors hold the
// URL: the sender replaces them.
func (f *Fetcher) Client() *http.Client { return f.client }

// CloseIdleConnections closes the idle connections of the fetcher's
// transport.
func (f *Fetcher) CloseIdleConnections() { f.transport.CloseIdleConnections() }

const accept = "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.8,*/*;q=0.1"

// Fetch fetches t and returns its content in the mode t asks for. Its
// signature is that of a [batch.FetchFunc]; caller is not used. Result.Meta
// holds "status" (the HTTP status code), "content_type" (the media type,
// without parameters), "bytes" (the body size), "mode" ("raw" or "clean"),
// "elapsed_ms" and, with Grep, "matches" (the number of lines kept). It
// holds neither the URL nor the final URL after redirects.
func (f *Fetcher) Fetch(ctx context.Context, _ batch.Caller, t batch.Target) (batch.Result, error) {
	start := time.Now()
	mode, err := checkOptions(t.Options)
	if err != nil {
		return batch.Result{}, err
	}
	var match func(string) bool
	if t.Grep != "" {
		match = matcher(t.Grep)
	}
	if err := f.guard.Precheck(t.URL); err != nil {
		return batch.Result{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
	if err != nil {
		return batch.Result{}, blocked(batchnet.ReasonUnparseable)
	}
	req.Header.Set("User-Agent", f.userAgent)
	req.Header.Set("Accept", accept)
	resp, err := f.client.Do(req)
	if err != nil {
		return batch.Result{}, cleanError(ctx, err)
	}
	defer resp.Body.Close()
	if err := statusError(resp.StatusCode); err != nil {
		_, _ = io.CopyN(io.Discard, resp.Body, 64<<10) // lets a small error body's connection be reused
		return batch.Result{}, err
	}
	ct := parseContentType(resp.Header.Get("Content-Type"))
	if ct.declared && !isText(ct.media) {
		return batch.Result{}, unsupportedType(ct.media)
	}
	if resp.ContentLength > f.maxBytes {
		return batch.Result{}, f.tooLong()
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, f.maxBytes+1))
	if err != nil {
		return batch.Result{}, cleanError(ctx, err)
	}
	if int64(len(body)) > f.maxBytes {
		return batch.Result{}, f.tooLong()
	}
	if !ct.declared {
		ct = parseContentType(http.DetectContentType(body))
		if !isText(ct.media) {
			return batch.Result{}, unsupportedType(ct.media)
		}
	}
	content := decodeText(body, ct.charset)
	if mode == batch.ModeClean && isHTML(ct.media) {
		content = ExtractText(content)
	}
	meta := map[string]any{
		"status":       resp.StatusCode,
		"content_type": ct.media,
		"bytes":        len(body),
		"mode":         mode,
	}
	if match != nil {
		var n int
		content, n = grepLines(content, match)
		meta["matches"] = n
	}
	meta["elapsed_ms"] = time.Since(start).Milliseconds()
	return batch.Result{Content: content, Meta: meta}, nil
}

func (f *Fetcher) tooLong() error {
	return failf(batch.OutcomeTooLong, "too long: response body exceeds "+strconv.FormatInt(f.maxBytes, 10)+" bytes")
}

// checkOptions returns the effective mode of o, or an unsupported error for
// what this fetcher cannot serve.
func checkOptions(o batch.Options) (string, error) {
	mode := o.Mode
	switch mode {
	case batch.ModeDefault, batch.ModeRaw:
		mode = batch.ModeRaw
	case batch.ModeClean:
	case batch.ModeDigest:
		return "", unsupported("digest mode")
	default:
		return "", failf(batch.OutcomeUnsupported, "unsupported: unknown mode")
	}
	switch {
	case o.Question != "":
		return "", unsupported("question")
	case o.JQ != "":
		return "", unsupported("jq")
	case o.Pages != "":
		return "", unsupported("pages")
	}
	return mode, nil
}

func unsupported(what string) error {
	return failf(batch.OutcomeUnsupported, "unsupported: "+what+" is not available in this fetcher")
}

// statusError maps a final HTTP status to an error, or nil for 2xx.
func statusError(code int) error {
	msg := "upstream: status " + strconv.Itoa(code)
	switch {
	case code >= 200 && code <= 299:
		return nil
	case code >= 400 && code <= 499:
		return failf(batch.OutcomeUpstream4xx, msg)
	case code >= 500 && code <= 599:
		return failf(batch.OutcomeUpstream5xx, msg)
	}
	return failf(batch.OutcomeOther, msg) // a 3xx without a usable Location, or an odd code
}

// matcher returns the Grep line predicate: a regular expression if pattern
// compiles, a substring test otherwise.
func matcher(pattern string) func(string) bool {
	if re, err := regexp.Compile(pattern); err == nil {
		return re.MatchString
	}
	return func(s string) bool { return strings.Contains(s, pattern) }
}
