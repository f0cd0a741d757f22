package batchhttp

import (
	"context"
	"errors"
	"net/netip"
	"net/url"
	"strings"

	"github.com/siftfetch/batchkit/batch"
)

// MaxURLBytes is the longest target URL that [PrecheckURL] accepts.
const MaxURLBytes = 2048

// PrecheckURL is a ready [PrecheckFunc] made of the checks that need no DNS.
// It refuses, with a "blocked: …" error that never repeats the URL:
//
//   - a URL longer than [MaxURLBytes], or one that does not parse;
//   - a scheme other than http or https, a URL without a host, or one with
//     user info ("user:pass@");
//   - an explicit port other than 80 or 443;
//   - "localhost" and names under ".localhost";
//   - an IP address that is not public unicast: loopback, private,
//     link-local, CGNAT, unspecified, multicast, documentation and the other
//     special-purpose ranges, IPv4-mapped, NAT64 and 6to4 forms included;
//   - a host made only of numeric labels that is not a plain dotted quad
//     (127.1, 2130706433, 0x7f000001, 0177.0.0.1): some resolvers read such
//     names as IPv4 addresses.
//
// It is not enough on its own: a public name may resolve to a private
// address, at submit or later (DNS rebinding), and a redirect may lead
// anywhere. The fetcher must check the address it connects to.
func PrecheckURL(_ context.Context, _ batch.Caller, rawURL string) error {
	if len(rawURL) > MaxURLBytes {
		return errors.New("blocked: url too long")
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return errors.New("blocked: malformed url")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("blocked: scheme must be http or https")
	case u.Opaque != "" || u.Host == "":
		return errors.New("blocked: url has no host")
	case u.User != nil:
		return errors.New("blocked: url has user info")
	}
	if p := u.Port(); p != "" && p != "80" && p != "443" {
		return errors.New("blocked: port must be 80 or 443")
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if host == "" {
		return errors.New("blocked: url has no host")
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return errors.New("blocked: localhost")
	}
	if addr, err := netip.ParseAddr(host); err == nil {
		if !publicAddr(addr) {
			return errors.New("blocked: private or reserved address")
		}
		return nil
	}
	if numericHost(host) {
		return errors.New("blocked: numeric host that is not a dotted-quad address")
	}
	return nil
}

// nonPublic are the special-purpose ranges that netip's predicates do not
// cover (IANA IPv4 and IPv6 special-purpose address registries).
var nonPublic = func() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8", "100.64.0.0/10", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24",
		"198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "240.0.0.0/4",
		"64:ff9b::/96", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32",
		"2002::/16", "3fff::/20", "5f00::/16",
	} {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}()

// publicAddr reports whether a is a public unicast address.
func publicAddr(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsGlobalUnicast() || a.IsPrivate() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// numericHost reports whether every label of host is a decimal, octal or hex
// number, as inet_aton reads them.
func numericHost(host string) bool {
	for label := range strings.SplitSeq(host, ".") {
		l := strings.TrimPrefix(label, "0x")
		if l == "" && label != "0x" {
			return false
		}
		for _, c := range []byte(l) {
			if !('0' <= c && c <= '9' || label != l && 'a' <= c && c <= 'f') {
				return false
			}
		}
	}
	return true
}
