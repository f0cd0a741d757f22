package batchnet

import "net/netip"

// Reasons [Classify] gives for a refused address. Each one is what follows
// "blocked: " in the error the guard returns.
const (
	ReasonInvalid       = "invalid address"
	ReasonUnspecified   = "unspecified address"
	ReasonThisNetwork   = "this-network address"
	ReasonLoopback      = "loopback address"
	ReasonPrivate       = "private address"
	ReasonLinkLocal     = "link-local address"
	ReasonShared        = "shared (cgnat) address"
	ReasonMulticast     = "multicast address"
	ReasonBroadcast     = "broadcast address"
	ReasonDocumentation = "documentation address"
	ReasonBenchmarking  = "benchmarking address"
	ReasonReserved      = "reserved address"
	// ReasonTranslated: a NAT64 or 6to4 address that embeds a public IPv4
	// address; the gateway it goes through is not ours to trust.
	ReasonTranslated = "translated address"
)

type deniedPrefix struct {
	prefix netip.Prefix
	reason string
}

// deniedV4 lists the IPv4 ranges of the IANA IPv4 Special-Purpose Address
// Registry that are not globally reachable, plus multicast and the reserved
// class E space. Order matters only where ranges nest: the first match wins.
var deniedV4 = []deniedPrefix{
	{netip.MustParsePrefix("0.0.0.0/32"), ReasonUnspecified},
	{netip.MustParsePrefix("0.0.0.0/8"), ReasonThisNetwork},
	{netip.MustParsePrefix("10.0.0.0/8"), ReasonPrivate},
	{netip.MustParsePrefix("100.64.0.0/10"), ReasonShared},
	{netip.MustParsePrefix("127.0.0.0/8"), ReasonLoopback},
	{netip.MustParsePrefix("169.254.0.0/16"), ReasonLinkLocal},
	{netip.MustParsePrefix("172.16.0.0/12"), ReasonPrivate},
	{netip.MustParsePrefix("192.0.0.0/24"), ReasonReserved}, // IETF protocol assignments
	{netip.MustParsePrefix("192.0.2.0/24"), ReasonDocumentation},
	{netip.MustParsePrefix("192.88.99.0/24"), ReasonReserved}, // deprecated 6to4 relay anycast
	{netip.MustParsePrefix("192.168.0.0/16"), ReasonPrivate},
	{netip.MustParsePrefix("198.18.0.0/15"), ReasonBenchmarking},
	{netip.MustParsePrefix("198.51.100.0/24"), ReasonDocumentation},
	{netip.MustParsePrefix("203.0.113.0/24"), ReasonDocumentation},
	{netip.MustParsePrefix("224.0.0.0/4"), ReasonMulticast},
	{netip.MustParsePrefix("255.255.255.255/32"), ReasonBroadcast},
	{netip.MustParsePrefix("240.0.0.0/4"), ReasonReserved},
}

// IPv6 prefixes that embed an IPv4 address, and the other IPv6 ranges.
var (
	prefixMapped   = netip.MustParsePrefix("::ffff:0:0/96")
	prefixNAT64    = netip.MustParsePrefix("64:ff9b::/96")
	prefix6to4     = netip.MustParsePrefix("2002::/16")
	prefixGlobalV6 = netip.MustParsePrefix("2000::/3")
)

// deniedV6 lists the IPv6 ranges of the IANA IPv6 Special-Purpose Address
// Registry that are not globally reachable. Anything outside 2000::/3 (the
// only global unicast space) is refused as well; see [Classify].
var deniedV6 = []deniedPrefix{
	{netip.MustParsePrefix("::/128"), ReasonUnspecified},
	{netip.MustParsePrefix("::1/128"), ReasonLoopback},
	{netip.MustParsePrefix("fc00::/7"), ReasonPrivate},
	{netip.MustParsePrefix("fe80::/10"), ReasonLinkLocal},
	{netip.MustParsePrefix("fec0::/10"), ReasonReserved}, // deprecated site-local
	{netip.MustParsePrefix("ff00::/8"), ReasonMulticast},
	{netip.MustParsePrefix("2001::/23"), ReasonReserved}, // IETF protocol assignments, Teredo
	{netip.MustParsePrefix("2001:db8::/32"), ReasonDocumentation},
	{netip.MustParsePrefix("3fff::/20"), ReasonDocumentation},
}

// Classify reports whether ip may be dialled. ok is true for a globally
// reachable unicast address; otherwise reason says which special range ip is
// in (one of the Reason constants).
//
// The ranges are those the IANA special-purpose registries mark as not
// globally reachable: among them loopback (127/8, ::1), private (10/8,
// 172.16/12, 192.168/16, fc00::/7), link-local (169.254/16, fe80::/10),
// shared/CGNAT (100.64/10), this-network (0/8), unspecified, multicast,
// broadcast, documentation and benchmarking ranges, and reserved space
// (240/4, IPv6 outside 2000::/3). Addresses that embed an IPv4 address —
// IPv4-mapped (::ffff:0:0/96), NAT64 (64:ff9b::/96) and 6to4 (2002::/16) —
// are refused for the embedded address's reason if it is special; a NAT64
// or 6to4 form of a public address is refused as translated, and an
// IPv4-mapped one is allowed (it is how an IPv4 address looks on an IPv6
// socket). A zone is ignored here; [Guard] refuses zoned addresses.
func Classify(ip netip.Addr) (reason string, ok bool) {
	if !ip.IsValid() {
		return ReasonInvalid, false
	}
	ip = ip.WithZone("")
	if ip.Is4() {
		return classify4(ip)
	}
	if v4, embedded := embeddedV4(ip); embedded {
		if reason, ok := classify4(v4); !ok || prefixMapped.Contains(ip) {
			return reason, ok
		}
		return ReasonTranslated, false
	}
	for _, d := range deniedV6 {
		if d.prefix.Contains(ip) {
			return d.reason, false
		}
	}
	if !prefixGlobalV6.Contains(ip) {
		return ReasonReserved, false
	}
	return "", true
}

func classify4(ip netip.Addr) (string, bool) {
	for _, d := range deniedV4 {
		if d.prefix.Contains(ip) {
			return d.reason, false
		}
	}
	return "", true
}

// embeddedV4 returns the IPv4 address an IPv4-mapped, NAT64 or 6to4
// address carries.
func embeddedV4(ip netip.Addr) (netip.Addr, bool) {
	b := ip.As16()
	switch {
	case prefixMapped.Contains(ip), prefixNAT64.Contains(ip):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case prefix6to4.Contains(ip):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	}
	return netip.Addr{}, false
}
