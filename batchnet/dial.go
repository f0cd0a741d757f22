package batchnet

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/siftfetch/batchkit/batch"
)

// maxDialAddrs caps how many of a name's addresses one dial tries.
const maxDialAddrs = 4

// responseHeaderTimeout is the transport's wait for response headers: the
// header timeout when it is shorter than the request's own, and none
// otherwise, since the request's deadline then ends the wait first. Were
// both the same, which one fired first would decide the error's text.
func (c *Client) responseHeaderTimeout() time.Duration {
	if c.headerTimeout < c.timeout {
		return c.headerTimeout
	}
	return 0
}

// newTransport returns the guarded transport: no proxy, every connection
// made through c.dialContext, bounded timeouts and header size.
func (c *Client) newTransport() *http.Transport {
	return &http.Transport{
		Proxy:                  nil, // never a proxy from the environment: it would be dialled instead of the target
		DialContext:            c.dialContext,
		ForceAttemptHTTP2:      true,
		TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    10 * time.Second,
		ResponseHeaderTimeout:  c.responseHeaderTimeout(),
		ExpectContinueTimeout:  time.Second,
		MaxIdleConns:           16,
		MaxIdleConnsPerHost:    2,
		IdleConnTimeout:        60 * time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
}

// checkRedirect follows at most maxRedirects redirects, each to a URL that
// passes the pre-check and none from https to http (a page fetched
// securely must not be read back in the clear: "blocked: redirect from
// https to http"); the dial of each is guarded again by dialContext.
func (c *Client) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > c.maxRedirects {
		return c.errTooManyRedirects
	}
	if len(via) > 0 && via[len(via)-1].URL.Scheme == "https" && req.URL.Scheme != "https" {
		return blocked(ReasonDowngrade)
	}
	return c.guard.Precheck(req.URL.String())
}

// dialContext resolves addr's host once, refuses the dial if any of its
// addresses is refused by the guard, and then dials the addresses (not the
// name) in order, each connection checked again by the dialer's Control
// just before connect.
func (c *Client) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, blocked(ReasonInvalid)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, blocked(ReasonInvalid)
	}
	ips, err := c.resolve(ctx, host)
	if err != nil {
		return nil, err
	}
	aps := make([]netip.AddrPort, 0, len(ips))
	for _, ip := range ips {
		ap := netip.AddrPortFrom(ip, uint16(port))
		if err := c.guard.CheckAddr(ap); err != nil {
			return nil, err // one refused answer refuses the name
		}
		aps = append(aps, netip.AddrPortFrom(ip.Unmap(), uint16(port)))
	}
	var last error
	for _, ap := range aps[:min(len(aps), maxDialAddrs)] {
		conn, err := c.dialer.DialContext(ctx, network, ap.String())
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
func (c *Client) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if strings.Contains(host, "%") {
		return nil, blocked(ReasonZone)
	}
	h := strings.TrimSuffix(host, ".")
	if ip, err := netip.ParseAddr(h); err == nil {
		return []netip.Addr{ip}, nil
	}
	if NumericHost(h) {
		return nil, blocked(ReasonNonCanonical)
	}
	ips, err := c.lookup(ctx, host)
	if err != nil {
		return nil, lookupError(ctx, err)
	}
	if len(ips) == 0 {
		return nil, failf(batch.OutcomeUpstream4xx, msgDNSNotFound)
	}
	return ips, nil
}

// control is the dialer's Control: the guard, then the BeforeConnect hook.
func (c *Client) control(network, address string, rc syscall.RawConn) error {
	if err := c.guard.Control(network, address, rc); err != nil {
		return err
	}
	if c.beforeConnect != nil {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return blocked(ReasonInvalid)
		}
		return c.beforeConnect(network, ap)
	}
	return nil
}
