// Package fetcher is a real web fetcher for the example daemon: a
// [batch.FetchFunc] over the guarded HTTP client of [batchnet], with the
// fetch modes, content types and text decoding of its own.
//
// # Guard
//
// Every fetch goes through a [batchnet.Client]: the URL passes
// [batchnet.Guard.Precheck] (the pre-check a batchhttp handler runs at
// submit too), the host is resolved once and refused whole if any answer is
// refused by [batchnet.Classify], the checked addresses are dialled and
// checked again just before connect, every redirect (at most
// [batchnet.DefaultMaxRedirects]) is checked the same way, and no proxy
// from the environment is used. An allow list of exact host:port strings
// exempts local test servers; see [batchnet.Guard].
//
// # Errors
//
// No error the fetcher returns contains the URL, a host name or an address:
// the runner stores target errors and returns them to the job's owner.
// Every error has a fixed text and carries a [batch.Outcome]. Those of the
// network, the guard and the HTTP status are [batchnet]'s (see
// [batchnet.CleanError] and [batchnet.StatusError]): "blocked: …"
// (blocked), "upstream: status 404" (upstream_4xx), "upstream: status 502"
// (upstream_5xx), "timeout: …" (a context deadline also matches
// context.DeadlineExceeded with [errors.Is]), "dns: …", "connect: …",
// "tls: …" and "fetch: …". The fetcher adds its own: "unsupported: …"
// (unsupported: a mode, an option or a content type it cannot serve) and
// "too long: …" (too_long).
//
// # Modes
//
// Mode "" and "raw" return the body as text. Mode "clean" returns the readable
// text of an HTML page (see [ExtractText]) and other text types unchanged.
// Grep then keeps only the lines that match: Grep is a Go regular expression
// (RE2 syntax; use "(?i)" for case-insensitive matching) when it parses, and
// a literal substring otherwise (see Grep limits). Mode "digest" and the options question, jq and
// pages need a model or a parser this fetcher does not have: they fail with
// outcome unsupported before anything is fetched. Context and Recover are
// accepted and ignored. Bodies are decoded as UTF-8 (invalid bytes become
// U+FFFD) unless the charset is ISO-8859-1 or windows-1252, read as Latin-1;
// a body whose type is not text fails with outcome unsupported.
//
// # Grep limits
//
// Go's regexp is linear in the input, but times the size of the compiled
// program, so a caller's pattern could otherwise hold a worker for hours.
// A pattern is refused when it is longer than [Options].MaxGrepBytes (1024
// bytes by default) or compiles to a program of more than
// [Options].MaxGrepInsts instructions (1000; x{n} repeats x's program n
// times: \w{900} is 902 instructions), and when Go itself refuses it
// as too large or too deep: [Fetcher.CheckTarget] refuses it at submit (the
// example daemon answers 422 invalid_option), and a fetch fails with
// outcome unsupported ("unsupported: grep pattern too large: …" or "…
// too complex: …") before anything is fetched. A line longer than
// [GrepWindow] (2 KiB) is matched in overlapping windows, and the fetch's
// context is checked before every line and every window: a grep that its
// deadline ends fails with outcome timeout ("timeout: grep did not finish
// before the deadline", which matches context.DeadlineExceeded), so that a
// target's CPU work ends with its deadline. At about 7ns per byte and
// instruction, the largest program takes some 15s over a 2 MiB body on one
// core.
package fetcher

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batchnet"
	"github.com/siftfetch/batchkit/batchrobots"
)

// Defaults for [Options].
const (
	DefaultMaxBytes  = 2 << 20
	DefaultUserAgent = "batchkit-fetcher/1.0"
)

// Options configure a [Fetcher]. The zero value is ready to use.
type Options struct {
	// Allow lists exact "host:port" strings exempt from the guard's port
	// and address rules, for local testing; see [batchnet.Guard]. Defaults
	// to none.
	Allow []string
	// MaxBytes caps a response body (after decompression); a larger body
	// fails with outcome too_long. Defaults to DefaultMaxBytes (2 MiB).
	MaxBytes int64
	// Timeout bounds one fetch, redirects and body included, within the
	// deadline the caller's context already has. Defaults to
	// [batchnet.DefaultTimeout] (30s).
	Timeout time.Duration
	// HeaderTimeout bounds the wait for the response headers once a
	// request is sent, within Timeout. Defaults to
	// [batchnet.DefaultHeaderTimeout] (30s).
	HeaderTimeout time.Duration
	// UserAgent is the User-Agent header. Defaults to DefaultUserAgent.
	UserAgent string
	// Lookup resolves host names. Tests set it to map names to loopback
	// addresses without real DNS. Defaults to [net.DefaultResolver]'s
	// LookupNetIP.
	Lookup batchnet.LookupFunc
	// BeforeConnect, if set, is called just before each connect, after the
	// guard approved the address; tests use it to record dials and to make
	// sure nothing but loopback is ever dialled. Defaults to nil.
	BeforeConnect batchnet.ConnectFunc
	// MaxGrepBytes caps the length of a Grep pattern. Defaults to
	// DefaultMaxGrepBytes (1024).
	MaxGrepBytes int
	// MaxGrepInsts caps the size of a Grep pattern's compiled program, in
	// instructions (regexp/syntax's), which bounds the work per byte
	// matched. Defaults to DefaultMaxGrepInsts (1000).
	MaxGrepInsts int
}

// Fetcher fetches targets over HTTP behind the SSRF guard. It is safe for
// concurrent use.
type Fetcher struct {
	client    *batchnet.Client
	maxBytes  int64
	userAgent string

	maxGrepBytes int
	maxGrepInsts int
}

// New returns a Fetcher configured by opts. A zero or negative MaxBytes,
// Timeout, HeaderTimeout, MaxGrepBytes or MaxGrepInsts means its default.
func New(opts Options) *Fetcher {
	client, err := batchnet.NewClient(batchnet.ClientConfig{
		Allow:         opts.Allow,
		Timeout:       max(opts.Timeout, 0),
		HeaderTimeout: max(opts.HeaderTimeout, 0),
		Lookup:        opts.Lookup,
		BeforeConnect: opts.BeforeConnect,
	})
	if err != nil {
		panic("fetcher: " + err.Error()) // unreachable: no option passed on is negative
	}
	return &Fetcher{
		client:    client,
		maxBytes:  cmp.Or(max(opts.MaxBytes, 0), DefaultMaxBytes),
		userAgent: cmp.Or(opts.UserAgent, DefaultUserAgent),

		maxGrepBytes: cmp.Or(max(opts.MaxGrepBytes, 0), DefaultMaxGrepBytes),
		maxGrepInsts: cmp.Or(max(opts.MaxGrepInsts, 0), DefaultMaxGrepInsts),
	}
}

// Precheck checks rawURL with the fetcher's allow list and no DNS; see
// [batchnet.Guard.Precheck].
func (f *Fetcher) Precheck(rawURL string) error { return f.client.Precheck(rawURL) }

// Client returns the fetcher's HTTP client: every connection it makes,
// redirects included, passes the guard at connect time. A host gives it to
// batchhttp.NewWebhookSender, so that a webhook cannot reach what a
// target cannot (the sender does not follow redirects). Its errors hold the
// URL: the sender replaces them. See [batchnet.Client.HTTPClient].
func (f *Fetcher) Client() *http.Client { return f.client.HTTPClient() }

// Robots returns a robots.txt checker for the runner's Config.Robots
// that fetches each host's rules through the fetcher's guarded client,
// matching the groups by the fetcher's product token (its User-Agent up
// to the "/").
func (f *Fetcher) Robots(log *slog.Logger) (*batchrobots.Checker, error) {
	token, _, _ := strings.Cut(f.userAgent, "/")
	return batchrobots.New(batchrobots.Config{Client: f.client, UserAgent: token, Logger: log})
}

// CloseIdleConnections closes the idle connections of the fetcher's
// transport.
func (f *Fetcher) CloseIdleConnections() { f.client.CloseIdleConnections() }

const accept = "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.8,*/*;q=0.1"

// Fetch fetches t and returns its content in the mode t asks for. Its
// signature is that of a [batch.FetchFunc]; caller is not used. Result.Meta
// holds "status" (the HTTP status code), "content_type" (the media type,
// without parameters), "bytes" (the body size), "mode" ("raw" or "clean"),
// "elapsed_ms" and, with Grep, "matches" (the number of lines kept). It
// holds neither the URL nor the final URL after redirects.
func (f *Fetcher) Fetch(ctx context.Context, _ batch.Caller, t batch.Target) (batch.Result, error) {
	start := time.Now()
	opts, err := batchsift.Read(t)
	if err != nil {
		return batch.Result{}, failf(batch.OutcomeUnsupported, "unsupported: unreadable options")
	}
	mode, err := checkOptions(opts)
	if err != nil {
		return batch.Result{}, err
	}
	var g *grepper
	if opts.Grep != "" {
		if g, err = f.grep(opts.Grep); err != nil {
			return batch.Result{}, err
		}
	}
	if err := f.client.Precheck(t.URL); err != nil {
		return batch.Result{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
	if err != nil {
		return batch.Result{}, &batchnet.BlockedError{Reason: batchnet.ReasonUnparseable}
	}
	req.Header.Set("User-Agent", f.userAgent)
	req.Header.Set("Accept", accept)
	resp, err := f.client.Do(req) // its errors, and its body's, are clean
	if err != nil {
		return batch.Result{}, err
	}
	defer resp.Body.Close()
	if err := batchnet.ResponseError(resp); err != nil { // a 429 or 503 with Retry-After: the runner waits and retries
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
		return batch.Result{}, err
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
	if mode == batchsift.ModeClean && isHTML(ct.media) {
		content = ExtractText(content)
	}
	meta := map[string]any{
		"status":       resp.StatusCode,
		"content_type": ct.media,
		"bytes":        len(body),
		"mode":         mode,
	}
	if g != nil {
		var n int
		if content, n, err = grepLines(ctx, content, g); err != nil {
			return batch.Result{}, err
		}
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
func checkOptions(o batchsift.Fields) (string, error) {
	mode := o.Mode
	switch mode {
	case batchsift.ModeDefault, batchsift.ModeRaw:
		mode = batchsift.ModeRaw
	case batchsift.ModeClean:
	case batchsift.ModeDigest:
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

// failf is an error of fixed text that carries outcome, for what this
// fetcher refuses on its own.
func failf(outcome batch.Outcome, msg string) error {
	return batch.NewFetchError(outcome, "", errors.New(msg))
}
