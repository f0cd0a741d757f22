package batchnet

import (
	"net/netip"
	"testing"
)

func TestClassify(t *testing.T) {
	t.Parallel()

	f := func(addr, wantReason string) {
		t.Helper()
		ip := netip.MustParseAddr(addr)
		reason, ok := Classify(ip)
		if wantOK := wantReason == ""; ok != wantOK || reason != wantReason {
			t.Errorf("Classify(%s) = (%q, %t), want (%q, %t)", addr, reason, ok, wantReason, wantOK)
		}
	}

	// Public unicast: allowed. (Classification only; nothing is dialled.)
	f("93.184.215.14", "")
	f("1.1.1.1", "")
	f("8.8.8.8", "")
	f("100.63.255.255", "") // just below 100.64/10
	f("100.128.0.0", "")    // just above 100.64/10
	f("172.15.255.255", "") // just below 172.16/12
	f("172.32.0.0", "")     // just above 172.16/12
	f("192.0.1.255", "")
	f("2606:2800:21f:cb07:6820:80da:af6b:8b2c", "")
	f("2a00:1450:4001:80b::200e", "")
	f("64:ff9b::5db8:d70e", ReasonTranslated) // NAT64 of a public IPv4
	f("2002:5db8:d70e::1", ReasonTranslated)  // 6to4 of a public IPv4
	f("::ffff:93.184.215.14", "")             // IPv4-mapped public

	// IPv4 special-purpose ranges.
	f("0.0.0.0", ReasonUnspecified)
	f("0.1.2.3", ReasonThisNetwork)
	f("0.255.255.255", ReasonThisNetwork)
	f("10.0.0.1", ReasonPrivate)
	f("10.255.255.255", ReasonPrivate)
	f("100.64.0.1", ReasonShared)
	f("100.127.255.255", ReasonShared)
	f("127.0.0.1", ReasonLoopback)
	f("127.255.255.254", ReasonLoopback)
	f("169.254.169.254", ReasonLinkLocal) // cloud metadata
	f("172.16.0.1", ReasonPrivate)
	f("172.31.255.255", ReasonPrivate)
	f("192.0.0.8", ReasonReserved)
	f("192.0.2.1", ReasonDocumentation)
	f("192.88.99.1", ReasonReserved)
	f("192.168.1.1", ReasonPrivate)
	f("198.18.0.1", ReasonBenchmarking)
	f("198.19.255.255", ReasonBenchmarking)
	f("198.51.100.1", ReasonDocumentation)
	f("203.0.113.1", ReasonDocumentation)
	f("224.0.0.1", ReasonMulticast)
	f("239.255.255.250", ReasonMulticast)
	f("240.0.0.1", ReasonReserved)
	f("255.255.255.254", ReasonReserved)
	f("255.255.255.255", ReasonBroadcast)

	// IPv6 special-purpose ranges.
	f("::", ReasonUnspecified)
	f("::1", ReasonLoopback)
	f("fc00::1", ReasonPrivate)
	f("fd12:3456:789a::1", ReasonPrivate)
	f("fe80::1", ReasonLinkLocal)
	f("fe80::1%eth0", ReasonLinkLocal)
	f("febf::1", ReasonLinkLocal)
	f("fec0::1", ReasonReserved)
	f("ff02::1", ReasonMulticast)
	f("2001::1", ReasonReserved) // Teredo
	f("2001:db8::1", ReasonDocumentation)
	f("3fff::1", ReasonDocumentation)
	f("100::1", ReasonReserved)         // discard-only
	f("64:ff9b:1::1", ReasonReserved)   // local-use NAT64
	f("5f00::1", ReasonReserved)        // SRv6 SIDs
	f("::a00:1", ReasonReserved)        // deprecated IPv4-compatible
	f("::ffff:0:a00:1", ReasonReserved) // IPv4-translated (SIIT)
	f("4000::1", ReasonReserved)        // unallocated, outside 2000::/3

	// IPv4 embedded in IPv6: classified by the IPv4 address.
	f("::ffff:127.0.0.1", ReasonLoopback)
	f("::ffff:10.0.0.1", ReasonPrivate)
	f("::ffff:169.254.169.254", ReasonLinkLocal)
	f("::ffff:0.0.0.0", ReasonUnspecified)
	f("64:ff9b::7f00:1", ReasonLoopback)
	f("64:ff9b::a00:1", ReasonPrivate) // smokescreen's bypass vector
	f("64:ff9b::a9fe:a9fe", ReasonLinkLocal)
	f("64:ff9b::6440:1", ReasonShared)
	f("2002:7f00:1::", ReasonLoopback)
	f("2002:a00:1::1", ReasonPrivate)
	f("2002:c0a8:101::1", ReasonPrivate)
	f("2002:e000:1::1", ReasonMulticast)

	if reason, ok := Classify(netip.Addr{}); ok || reason != ReasonInvalid {
		t.Errorf("Classify(zero) = (%q, %t), want (%q, false)", reason, ok, ReasonInvalid)
	}
}

func TestEmbeddedV4(t *testing.T) {
	t.Parallel()

	f := func(addr, want string) {
		t.Helper()
		got, ok := embeddedV4(netip.MustParseAddr(addr))
		if want == "" {
			if ok {
				t.Errorf("embeddedV4(%s) = %s, want none", addr, got)
			}
			return
		}
		if !ok || got != netip.MustParseAddr(want) {
			t.Errorf("embeddedV4(%s) = %s, %t, want %s", addr, got, ok, want)
		}
	}

	f("::ffff:1.2.3.4", "1.2.3.4")
	f("64:ff9b::102:304", "1.2.3.4")
	f("2002:102:304:5::6", "1.2.3.4")
	f("2001:db8::1", "")
	f("::1", "")
}
