package batchnet

import (
	"context"
	"net"
	"net/netip"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/siftfetch/batchkit/batch"
)

// MaxURLBytes is the longest URL [Guard.Precheck] accepts.
const MaxURLBytes = 2048

// Reasons the pre-check gives besides the address reasons of [Classify].
const (
	ReasonURLTooLong   = "url too long"
	ReasonUnparseable  = "unparseable url"
	ReasonScheme       = "scheme not allowed"
	ReasonUserinfo     = "userinfo not allowed"
	ReasonEmptyHost    = "empty host"
	ReasonPort         = "port not allowed"
	ReasonZone         = "zoned address"
	ReasonNonCanonical = "non-canonical ip address"
	ReasonDowngrade    = "redirect from https to http"
)

// BlockedError is a URL or an address the guard refused. Its message is
// "blocked: " followed by Reason; it never holds the URL, the host or the
// address. It carries the outcome [batch.OutcomeBlocked].
type BlockedError struct {
	// Reason is one of the Reason constants, such as "private address".
	Reason string
}

// Error returns "blocked: " followed by the reason.
func (e *BlockedError) Error() string { return "blocked: " + e.Reason }

// Outcome is [batch.OutcomeBlocked]; it makes a BlockedError a
// [batch.OutcomeError].
func (e *BlockedError) Outcome() batch.Outcome { return batch.OutcomeBlocked }

func blocked(reason string) error { return &BlockedError{Reason: reason} }

// Guard decides which URLs may be fetched and which addresses may be
// dialled. The zero value and a nil *Guard have an empty allow list.
//
// # Allow list
//
// The allow list holds exact "host:port" strings (an IPv6 host in brackets,
// as [net.JoinHostPort] writes it) that are exempt from the port rule of
// [Guard.Precheck] and from the address rule of [Guard.CheckAddr]; it is for
// local testing, such as "127.0.0.1:8081". At pre-check an entry is matched
// against the URL's host (the literal written in the URL, lower-cased) and
// port (explicit, or 80/443 by scheme); at connect time against the dialled
// IP and port. So to fetch http://svc.test:8081/ from a name that resolves
// to 127.0.0.1, list both "svc.test:8081" and "127.0.0.1:8081". IP literals
// are compared in canonical form ("[0:0::1]:80" matches "[::1]:80"); a
// malformed entry matches nothing.
type Guard struct {
	allow map[string]struct{}
}

// NewGuard returns a Guard with the given allow list.
func NewGuard(allow []string) *Guard {
	g := &Guard{allow: make(map[string]struct{}, len(allow))}
	for _, a := range allow {
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" || port == "" {
			continue // fail closed: a malformed entry allows nothing
		}
		g.allow[hostPortKey(host, port)] = struct{}{}
	}
	return g
}

// hostPortKey is the allow-list form of host and port: IP literals in
// canonical form, names lower-cased.
func hostPortKey(host, port string) string {
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.String()
	}
	return net.JoinHostPort(strings.ToLower(host), port)
}

func (g *Guard) allowed(key string) bool {
	if g == nil {
		return false
	}
	_, ok := g.allow[key]
	return ok
}

// Precheck checks rawURL without any DNS lookup, using no allow list; see
// [Guard.Precheck]. batchhttp.PrecheckURL, the ready pre-check hook of a
// batchhttp handler, calls it; [Guard.PrecheckFunc] is the hook with an
// allow list.
func Precheck(rawURL string) error { return (*Guard)(nil).Precheck(rawURL) }

// PrecheckFunc is [Guard.Precheck] in the shape of the batchhttp pre-check
// hook (batchhttp.PrecheckFunc), so that a handler refuses at submit what
// the guard would refuse: HandlerConfig{Precheck: guard.PrecheckFunc}. ctx
// and caller are not used.
func (g *Guard) PrecheckFunc(_ context.Context, _ batch.Caller, rawURL string) error {
	return g.Precheck(rawURL)
}

// Precheck checks rawURL without any DNS lookup. It allows only http and
// https URLs of at most [MaxURLBytes] bytes, on port 80 or 443 (explicit or
// by default), with a host and without userinfo. A host that is an IP
// literal must pass [Classify]; a host that ends in a number but is not a
// canonical dotted-quad (127.1, 2130706433, 0x7f000001, 0177.0.0.1, 0) is
// refused, since resolvers disagree on what it means; "localhost" and
// names under ".localhost" are refused as loopback. These rules see the
// host mapped to ASCII as net/http maps it before it dials (IDNA's lookup
// mapping: fullwidth, circled and mathematical letters and digits,
// superscripts, ideographic full stops, ignored characters such as the
// soft hyphen), lower-cased and without trailing dots, so "１２７．０．０．１",
// "ⓛⓞⓒⓐⓛⓗⓞⓢⓣ", "127.0.0.①" and "localhost.." are refused too. A host:port on the allow
// list skips the port, address and name rules.
//
// The error is a *[BlockedError] and never contains the URL. Precheck is
// not sufficient on its own: a name can resolve to any address, so the
// fetcher must check every dial again at connect time ([Guard.Control]), as
// a [Client] does.
func (g *Guard) Precheck(rawURL string) error {
	if len(rawURL) > MaxURLBytes {
		return blocked(ReasonURLTooLong)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return blocked(ReasonUnparseable)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return blocked(ReasonScheme)
	}
	if u.Opaque != "" {
		return blocked(ReasonUnparseable)
	}
	if u.User != nil {
		return blocked(ReasonUserinfo)
	}
	host := u.Hostname()
	if host == "" {
		return blocked(ReasonEmptyHost)
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if g.allowed(hostPortKey(host, port)) {
		return nil
	}
	if port != "80" && port != "443" {
		return blocked(ReasonPort)
	}
	return checkHostName(host)
}

// checkHostName applies the no-DNS host rules of Precheck, to host folded
// as a resolver or a browser would read it (see foldHost).
func checkHostName(host string) error {
	if strings.Contains(host, "%") {
		return blocked(ReasonZone)
	}
	h := foldHost(host)
	if ip, err := netip.ParseAddr(h); err == nil {
		if reason, ok := Classify(ip); !ok {
			return blocked(reason)
		}
		return nil
	}
	if NumericHost(h) {
		return blocked(ReasonNonCanonical)
	}
	lower := strings.ToLower(h)
	if lower == "localhost" || strings.HasSuffix(lower, ".localhost") {
		return blocked(ReasonLoopback)
	}
	return nil
}

// foldHost returns host as the address and name rules must see it: each
// character that IDNA's lookup mapping (UTS #46, as net/http applies it to
// a host before it dials) turns into ASCII, or drops, replaced by its
// mapping; the remaining fullwidth forms of ASCII (U+FF01 to U+FF5E) folded
// to ASCII too, as some resolvers do; lower-cased, and without trailing
// dots. So "http://１２７．０．０．１/", "http://ｌｏｃａｌｈｏｓｔ/",
// "http://ⓛⓞⓒⓐⓛⓗⓞⓢⓣ/", "http://𝐥𝐨𝐜𝐚𝐥𝐡𝐨𝐬𝐭/", "http://127.0.0.①/" and
// "http://localhost../" name loopback and are refused as such. The mapping
// comes from a table (idnamap.go, generated from golang.org/x/net/idna,
// since batchnet imports the standard library only); a character it leaves
// non-ASCII makes its label an "xn--" label, which is neither a number nor
// "localhost", and the connect-time check ([Guard.Control]) holds for
// whatever such a name resolves to.
func foldHost(host string) string {
	var b strings.Builder
	b.Grow(len(host))
	for _, r := range host {
		if r >= 0x80 {
			if to, ok := idnaMap(r); ok {
				b.WriteString(to)
				continue
			}
		}
		if r >= 0xFF01 && r <= 0xFF5E {
			r -= 0xFF01 - 0x21
		}
		b.WriteRune(r)
	}
	return strings.TrimRight(strings.ToLower(b.String()), ".")
}

// idnaMap returns the ASCII mapping of r in the idnaASCII table, if any.
func idnaMap(r rune) (string, bool) {
	i, ok := sort.Find(len(idnaASCII), func(i int) int {
		switch e := idnaASCII[i]; {
		case r < e.lo:
			return -1
		case r > e.hi:
			return 1
		}
		return 0
	})
	if !ok {
		return "", false
	}
	e := idnaASCII[i]
	if e.lo == r {
		return e.to, true
	}
	return string(rune(e.to[0]) + r - e.lo), true
}

// NumericHost reports whether the last label of host is a number in the
// WHATWG URL sense (decimal digits, or 0x followed by hex digits): a URL
// parser in a browser, and getaddrinfo, would read such a host as an IPv4
// address in one of its legacy forms (127.1, 2130706433, 0x7f000001), so a
// host that is not a canonical IP literal must not be resolved when it is
// numeric.
func NumericHost(host string) bool {
	last := host[strings.LastIndexByte(host, '.')+1:]
	if last == "" {
		return false
	}
	digits := "0123456789"
	if len(last) >= 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X') {
		last, digits = last[2:], "0123456789abcdefABCDEF"
	}
	for _, c := range []byte(last) {
		if !strings.ContainsRune(digits, rune(c)) {
			return false
		}
	}
	return true
}

// CheckAddr applies the connect-time address rule to ap: it returns nil if
// ap is on the allow list or its address passes [Classify], and a
// *[BlockedError] otherwise.
func (g *Guard) CheckAddr(ap netip.AddrPort) error {
	if !ap.IsValid() {
		return blocked(ReasonInvalid)
	}
	if ap.Addr().Zone() != "" {
		return blocked(ReasonZone)
	}
	// An IPv4-mapped address (a resolver's answer for a v4 name) is the
	// v4 address it maps, as the dial that follows has it.
	if g.allowed(hostPortKey(ap.Addr().Unmap().String(), strconv.Itoa(int(ap.Port())))) {
		return nil
	}
	if reason, ok := Classify(ap.Addr()); !ok {
		return blocked(reason)
	}
	return nil
}

// Control is a [net.Dialer] Control function that applies [Guard.CheckAddr]
// to the address about to be connected, after name resolution. Plugged into
// a dialer, it guards every connection, including those made for redirects
// and those whose name resolved to a different address than at pre-check.
func (g *Guard) Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return blocked(ReasonInvalid)
	}
	return g.CheckAddr(ap)
}
