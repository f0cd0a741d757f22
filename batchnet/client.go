package batchnet

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/siftfetch/batchkit/batch"
)

// Defaults for [ClientConfig].
const (
	// DefaultTimeout bounds one request made with [Client.Do], redirects
	// and reading the body included.
	DefaultTimeout = 30 * time.Second
	// DefaultHeaderTimeout is how long an upstream may take to start its
	// answer once a request is sent.
	DefaultHeaderTimeout = 30 * time.Second
	// DefaultMaxRedirects is how many redirects one request follows at
	// most.
	DefaultMaxRedirects = 5
)

// LookupFunc resolves a host name to its addresses.
type LookupFunc func(ctx context.Context, host string) ([]netip.Addr, error)

// ConnectFunc is called with each address a connection is about to be made
// to, after the guard let it through; a non-nil error refuses the
// connection.
type ConnectFunc func(network string, addr netip.AddrPort) error

// ClientConfig configures a [Client]. The zero value is ready to use; a
// negative duration or count is an error from [NewClient].
type ClientConfig struct {
	// Allow lists exact "host:port" strings exempt from the guard's port
	// and address rules, for local testing; see [Guard]. Defaults to none.
	Allow []string
	// Timeout bounds one request made with [Client.Do], redirects and
	// reading the body included, within the deadline the request's context
	// already has. Defaults to [DefaultTimeout] (30s).
	Timeout time.Duration
	// HeaderTimeout bounds the wait for the response headers once a
	// request is sent; it takes effect only when shorter than Timeout.
	// Defaults to [DefaultHeaderTimeout] (30s).
	HeaderTimeout time.Duration
	// MaxRedirects is how many redirects one request follows at most; one
	// more fails with "fetch: too many redirects (max N)". Defaults to
	// [DefaultMaxRedirects] (5).
	MaxRedirects int
	// Lookup resolves host names. Tests set it to map names to loopback
	// addresses without real DNS. Defaults to [net.DefaultResolver]'s
	// LookupNetIP.
	Lookup LookupFunc
	// BeforeConnect, if set, is called just before each connect, after the
	// guard approved the address; tests use it to record dials and to make
	// sure nothing but loopback is ever dialled. Defaults to nil (no hook).
	BeforeConnect ConnectFunc
}

func (o ClientConfig) validate() error {
	switch {
	case o.Timeout < 0:
		return errors.New("batchnet: negative Timeout")
	case o.HeaderTimeout < 0:
		return errors.New("batchnet: negative HeaderTimeout")
	case o.MaxRedirects < 0:
		return errors.New("batchnet: negative MaxRedirects")
	}
	return nil
}

// Client is an HTTP client behind the SSRF guard. It never uses a proxy
// from the environment; it checks the URL of every request and every
// redirect with [Guard.Precheck] and follows at most MaxRedirects
// redirects, none from https to http ("blocked: redirect from https to
// http"); it resolves a host name once and refuses the name whole if
// any of its answers is refused by the guard (so a name with mixed public
// and private answers is refused, whichever answer a dialer would pick);
// and it dials the checked addresses rather than the name, each checked
// once more by [Guard.Control] just before connect. This holds for every
// redirect and for a name whose answer changed since the pre-check (DNS
// rebinding).
//
// [Client.Do] returns errors already cleaned by [CleanError]; the
// *http.Client of [Client.HTTPClient] returns net/http's own. A Client is
// safe for concurrent use.
type Client struct {
	guard         *Guard
	timeout       time.Duration
	headerTimeout time.Duration
	maxRedirects  int
	lookup        LookupFunc
	beforeConnect ConnectFunc
	dialer        *net.Dialer
	transport     *http.Transport
	client        *http.Client
	// errTooManyRedirects is the redirect check's refusal, with the cap.
	errTooManyRedirects *FetchError
}

// NewClient returns a Client configured by opts. It fails only for a
// negative Timeout, HeaderTimeout or MaxRedirects.
func NewClient(opts ClientConfig) (*Client, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	c := &Client{
		guard:         NewGuard(opts.Allow),
		timeout:       cmp.Or(opts.Timeout, DefaultTimeout),
		headerTimeout: cmp.Or(opts.HeaderTimeout, DefaultHeaderTimeout),
		maxRedirects:  cmp.Or(opts.MaxRedirects, DefaultMaxRedirects),
		lookup:        opts.Lookup,
		beforeConnect: opts.BeforeConnect,
	}
	if c.lookup == nil {
		c.lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	c.errTooManyRedirects = failf(batch.OutcomeOther, "fetch: too many redirects (max "+strconv.Itoa(c.maxRedirects)+")")
	c.dialer = &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: c.control}
	c.transport = c.newTransport()
	c.client = &http.Client{Transport: c.transport, CheckRedirect: c.checkRedirect}
	return c, nil
}

// Guard returns the client's guard, with its allow list: its
// [Guard.PrecheckFunc] is the matching pre-check for a batchhttp handler.
func (c *Client) Guard() *Guard { return c.guard }

// Precheck checks rawURL with the client's allow list and no DNS; see
// [Guard.Precheck].
func (c *Client) Precheck(rawURL string) error { return c.guard.Precheck(rawURL) }

// HTTPClient returns the client's *http.Client: every connection it
// makes, redirects included, passes the guard at connect time. A host
// gives it to batchhttp.NewWebhookSender, so that a webhook cannot reach
// what a target cannot. It sets no overall timeout (bound each request
// with its context), it does not pre-check the first request's URL (call
// [Client.Precheck]), and its errors are net/http's, which hold the URL:
// pass them through [CleanError] before they are stored or logged.
func (c *Client) HTTPClient() *http.Client { return c.client }

// CloseIdleConnections closes the idle connections of the client's
// transport.
func (c *Client) CloseIdleConnections() { c.transport.CloseIdleConnections() }

// Do checks req's URL with [Guard.Precheck], sends req, and returns the
// response, whatever its status ([StatusError] classifies it). It bounds
// the request by [ClientConfig.Timeout] within req's context, redirects
// and reading the body included.
//
// Every error Do returns, and every error of reading the response body
// other than io.EOF, is already cleaned by [CleanError]: it is a
// *[BlockedError] or a *[FetchError], and it never holds the URL, a host or
// an address. As with net/http, the caller must close the body; closing it
// also releases the request's deadline.
func (c *Client) Do(req *http.Request) (*http.Response, error) {
	if req.URL == nil {
		return nil, blocked(ReasonUnparseable)
	}
	if err := c.guard.Precheck(req.URL.String()); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(req.Context(), c.timeout)
	resp, err := c.client.Do(req.WithContext(ctx))
	if err != nil {
		err = CleanError(ctx, err)
		cancel()
		return nil, err
	}
	resp.Body = &cleanBody{rc: resp.Body, ctx: ctx, cancel: cancel}
	return resp, nil
}

// Get is [Client.Do] of a GET of rawURL with ctx. A URL that does not parse is a *[BlockedError], as the
// pre-check has it; no error holds the URL.
func (c *Client) Get(ctx context.Context, rawURL string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, blocked(ReasonUnparseable)
	}
	return c.Do(req)
}

// cleanBody is a response body whose read errors are cleaned, and whose
// Close ends the request's context.
type cleanBody struct {
	rc     io.ReadCloser
	ctx    context.Context
	cancel context.CancelFunc
}

func (b *cleanBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil && err != io.EOF {
		err = CleanError(b.ctx, err)
	}
	return n, err
}

func (b *cleanBody) Close() error {
	err := CleanError(b.ctx, b.rc.Close())
	b.cancel()
	return err
}
