package batchnet

import (
	"errors"
	"net/netip"
	"testing"
)

// specialHosts is the one table of special hosts that both halves of the
// guard run: the pre-check sees each as the host of a URL, and the
// connect-time check (for IP literals) as the address about to be dialled.
// Both must refuse it for the same reason.
var specialHosts = []struct{ host, reason string }{
	{"127.0.0.1", ReasonLoopback},
	{"127.255.255.254", ReasonLoopback},
	{"[::1]", ReasonLoopback},
	{"10.0.0.5", ReasonPrivate},
	{"172.16.0.1", ReasonPrivate},
	{"192.168.1.1", ReasonPrivate},
	{"[fc00::1]", ReasonPrivate},
	{"169.254.169.254", ReasonLinkLocal},
	{"[fe80::1]", ReasonLinkLocal},
	{"100.64.0.1", ReasonShared},
	{"0.0.0.0", ReasonUnspecified},
	{"[::]", ReasonUnspecified},
	{"0.1.2.3", ReasonThisNetwork},
	{"255.255.255.255", ReasonBroadcast},
	{"224.0.0.1", ReasonMulticast},
	{"[ff02::1]", ReasonMulticast},
	{"192.0.2.1", ReasonDocumentation},
	{"[2001:db8::1]", ReasonDocumentation},
	{"198.18.0.1", ReasonBenchmarking},
	{"240.0.0.1", ReasonReserved},
	{"[fec0::1]", ReasonReserved},     // deprecated site-local
	{"[4000::1]", ReasonReserved},     // outside 2000::/3
	{"[::127.0.0.1]", ReasonReserved}, // deprecated IPv4-compatible
	{"[100::1]", ReasonReserved},      // discard-only
	{"[64:ff9b:1::1]", ReasonReserved},
	{"[::ffff:127.0.0.1]", ReasonLoopback}, // IPv4-mapped
	{"[64:ff9b::a00:1]", ReasonPrivate},    // NAT64 of 10.0.0.1
	{"[2002:7f00:1::]", ReasonLoopback},    // 6to4 of 127.0.0.1
	{"[64:ff9b::5db8:d70e]", ReasonTranslated},
	{"[2002:5db8:d70e::1]", ReasonTranslated},
}

func TestSpecialHostsBothHalves(t *testing.T) {
	t.Parallel()
	g := NewGuard(nil)
	for _, c := range specialHosts {
		var be *BlockedError
		if err := g.Precheck("http://" + c.host + "/"); !errors.As(err, &be) || be.Reason != c.reason {
			t.Errorf("Precheck of %s = %v, want blocked: %s", c.host, err, c.reason)
		}
		ap, err := netip.ParseAddrPort(c.host + ":80")
		if err != nil {
			t.Fatalf("%s: %v", c.host, err)
		}
		if err := g.CheckAddr(ap); !errors.As(err, &be) || be.Reason != c.reason {
			t.Errorf("CheckAddr(%s) = %v, want blocked: %s", ap, err, c.reason)
		}
	}
	// Hosts only the pre-check can judge: names and zoned literals.
	for host, reason := range map[string]string{
		"localhost": ReasonLoopback, "a.localhost": ReasonLoopback, "[fe80::1%25eth0]": ReasonZone,
		"127.1": ReasonNonCanonical, "2130706433": ReasonNonCanonical, "0x7f000001": ReasonNonCanonical,
		"example.123": ReasonNonCanonical,
	} {
		var be *BlockedError
		if err := g.Precheck("http://" + host + "/"); !errors.As(err, &be) || be.Reason != reason {
			t.Errorf("Precheck of %s = %v, want blocked: %s", host, err, reason)
		}
	}
	if err := g.CheckAddr(netip.MustParseAddrPort("[fe80::1%eth0]:80")); err == nil {
		t.Error("CheckAddr let a zoned address through")
	}
}
