package batchnet

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/siftfetch/batchkit/batch"
)

// precheckFunc is batchhttp.PrecheckFunc, declared identically (batchnet
// may not import batchhttp): a guard's PrecheckFunc must be assignable to it.
type precheckFunc func(ctx context.Context, caller batch.Caller, rawURL string) error

// batchhttp.PrecheckURL calls Precheck.
var _ func(rawURL string) error = Precheck

func TestGuard_PrecheckFunc(t *testing.T) {
	t.Parallel()

	var hook precheckFunc = NewGuard([]string{"127.0.0.1:8081"}).PrecheckFunc
	caller := batch.Caller{Name: "c", Class: "k", Restricted: true}
	if err := hook(t.Context(), caller, "http://127.0.0.1:8081/x"); err != nil {
		t.Errorf("hook(allow-listed) = %v, want nil", err)
	}
	if err := hook(t.Context(), caller, "https://example.com/"); err != nil {
		t.Errorf("hook(public) = %v, want nil", err)
	}
	var be *BlockedError
	if err := hook(t.Context(), caller, "http://127.0.0.1:8082/x"); !errors.As(err, &be) || be.Reason != ReasonPort {
		t.Errorf("hook(another port) = %v, want blocked: %s", err, ReasonPort)
	}
	// A nil guard has an empty allow list, as for Precheck.
	hook = (*Guard)(nil).PrecheckFunc
	if err := hook(t.Context(), caller, "http://127.0.0.1:8081/x"); !errors.As(err, &be) || be.Reason != ReasonPort {
		t.Errorf("nil guard hook = %v, want blocked: %s", err, ReasonPort)
	}
}

func TestPrecheck(t *testing.T) {
	t.Parallel()

	f := func(rawURL, wantReason string) {
		t.Helper()
		err := Precheck(rawURL)
		if wantReason == "" {
			if err != nil {
				t.Errorf("Precheck(%q) = %v, want nil", rawURL, err)
			}
			return
		}
		var be *BlockedError
		if !errors.As(err, &be) || be.Reason != wantReason {
			t.Errorf("Precheck(%q) = %v, want blocked: %s", rawURL, err, wantReason)
			return
		}
		if got, want := err.Error(), "blocked: "+wantReason; got != want {
			t.Errorf("Precheck(%q) message = %q, want %q", rawURL, got, want)
		}
		if o := outcomeOf(err); o != batch.OutcomeBlocked {
			t.Errorf("Precheck(%q) outcome = %q, want blocked", rawURL, o)
		}
	}

	f("http://example.com/", "")
	f("https://example.com/a?b=c#d", "")
	f("HTTPS://Example.COM:443/", "")
	f("http://example.com:443/", "")
	f("https://example.com:80/", "")
	f("http://example.com:/", "") // empty port: the default
	f("http://93.184.215.14/", "")
	f("http://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]/", "")
	f("http://1example.com/", "")
	f("http://example.com1/", "")
	f("http://x.0a/", "")

	f("http://example.com/"+strings.Repeat("a", MaxURLBytes), ReasonURLTooLong)
	f("http://exa mple.com/", ReasonUnparseable)
	f("http://%zz/", ReasonUnparseable)
	f("http://[::1/", ReasonUnparseable)
	f("http:example.com", ReasonUnparseable)
	f("ftp://example.com/", ReasonScheme)
	f("file:///etc/passwd", ReasonScheme)
	f("gopher://example.com/", ReasonScheme)
	f("data:text/plain,hi", ReasonScheme)
	f("javascript:alert(1)", ReasonScheme)
	f("//example.com/", ReasonScheme)
	f("example.com", ReasonScheme)
	f("", ReasonScheme)
	f("http://user:pw@example.com/", ReasonUserinfo)
	f("http://user@example.com/", ReasonUserinfo)
	f("http://127.0.0.1:80@example.com/", ReasonUserinfo)
	f("http:///path", ReasonEmptyHost)
	f("http://:80/", ReasonEmptyHost)
	f("http://example.com:8080/", ReasonPort)
	f("http://example.com:22/", ReasonPort)
	f("http://example.com:0080/", ReasonPort)
	f("http://example.com:65536/", ReasonPort)

	// Numeric host forms and literals in refused ranges.
	f("http://127.0.0.1/", ReasonLoopback)
	f("http://127.0.0.1./", ReasonLoopback)
	f("http://127.1/", ReasonNonCanonical)
	f("http://2130706433/", ReasonNonCanonical)
	f("http://0x7f000001/", ReasonNonCanonical)
	f("http://0x7F.1/", ReasonNonCanonical)
	f("http://0177.0.0.1/", ReasonNonCanonical)
	f("http://0/", ReasonNonCanonical)
	f("http://0x/", ReasonNonCanonical)
	f("http://example.0x10/", ReasonNonCanonical)
	f("http://[::ffff:127.0.0.1]/", ReasonLoopback)
	f("http://[::ffff:7f00:1]/", ReasonLoopback)
	f("http://[::1]/", ReasonLoopback)
	f("http://[0:0:0:0:0:0:0:1]/", ReasonLoopback)
	f("http://[::]/", ReasonUnspecified)
	f("http://[fe80::1%25eth0]/", ReasonZone)
	f("http://[fc00::1]/", ReasonPrivate)
	f("http://[64:ff9b::a00:1]/", ReasonPrivate)
	f("http://[2002:a9fe:a9fe::]/", ReasonLinkLocal)
	f("http://localhost/", ReasonLoopback)
	// Folded as IDNA and resolvers would read them.
	f("http://１２７．０．０．１/", ReasonLoopback)
	f("http://127。0。0。1/", ReasonLoopback)
	f("http://127｡0｡0｡1/", ReasonLoopback)
	f("http://%EF%BC%91%EF%BC%92%EF%BC%97.0.0.1/", ReasonLoopback)
	f("http://１０．０．０．１/", ReasonPrivate)
	f("http://１２７．１/", ReasonNonCanonical)
	f("http://ｌｏｃａｌｈｏｓｔ/", ReasonLoopback)
	f("http://ＬＯＣＡＬＨＯＳＴ/", ReasonLoopback)
	f("http://app．ｌｏｃａｌｈｏｓｔ/", ReasonLoopback)
	f("http://localhost../", ReasonLoopback)
	f("http://127.0.0.1../", ReasonLoopback)
	f("http://ｅｘａｍｐｌｅ．ｃｏｍ/", "")
	// Mapped to ASCII as net/http maps a host before it dials (IDNA's
	// lookup profile): compatibility forms, and characters it drops.
	f("http://ⓛⓞⓒⓐⓛⓗⓞⓢⓣ/", ReasonLoopback)
	f("http://𝐥𝐨𝐜𝐚𝐥𝐡𝐨𝐬𝐭/", ReasonLoopback)
	f("http://127.0.0.①/", ReasonLoopback)
	f("http://127.0.0.¹/", ReasonLoopback)
	f("http://①⓪.0.0.1/", ReasonPrivate)
	f("http://local\u00adhost/", ReasonLoopback)
	f("http://app.𝓵𝓸𝓬𝓪𝓵𝓱𝓸𝓼𝓽/", ReasonLoopback)
	f("http://127.0.0.𝟏/", ReasonLoopback)
	f("http://ⓔⓧⓐⓜⓟⓛⓔ.com/", "")
	f("http://bücher.example/", "")
	f("http://LOCALHOST./", ReasonLoopback)
	f("http://app.localhost/", ReasonLoopback)
	f("http://0.0.0.0/", ReasonUnspecified)
	f("http://10.1.2.3/", ReasonPrivate)
	f("http://172.16.0.1/", ReasonPrivate)
	f("http://192.168.0.1/", ReasonPrivate)
	f("http://169.254.169.254/latest/meta-data/", ReasonLinkLocal)
	f("http://100.64.0.1/", ReasonShared)
	f("http://224.0.0.1/", ReasonMulticast)
	f("http://255.255.255.255/", ReasonBroadcast)
}

func TestGuard_Allow(t *testing.T) {
	t.Parallel()

	g := NewGuard([]string{"127.0.0.1:8081", "[0:0::1]:8082", "Svc.Test:8083", "no-port", ":80", "[::1]"})

	f := func(rawURL, wantReason string) {
		t.Helper()
		err := g.Precheck(rawURL)
		var be *BlockedError
		switch {
		case wantReason == "" && err != nil:
			t.Errorf("Precheck(%q) = %v, want nil", rawURL, err)
		case wantReason != "" && (!errors.As(err, &be) || be.Reason != wantReason):
			t.Errorf("Precheck(%q) = %v, want blocked: %s", rawURL, err, wantReason)
		}
	}

	f("http://127.0.0.1:8081/", "")
	f("https://127.0.0.1:8081/", "")
	f("http://[::1]:8082/", "")
	f("http://svc.test:8083/", "")
	f("http://SVC.TEST:8083/", "")
	f("http://127.0.0.1:8082/", ReasonPort)       // another port
	f("http://127.1:8081/", ReasonPort)           // exact strings: 127.1 is not 127.0.0.1
	f("http://127.0.0.1./", ReasonLoopback)       // the default port is not listed
	f("http://u@127.0.0.1:8081/", ReasonUserinfo) // structure rules still apply
	f("ftp://127.0.0.1:8081/", ReasonScheme)
	f("http://[::1]/", ReasonLoopback) // "[::1]" without a port allows nothing

	c := func(addr, wantReason string) {
		t.Helper()
		err := g.CheckAddr(netip.MustParseAddrPort(addr))
		var be *BlockedError
		switch {
		case wantReason == "" && err != nil:
			t.Errorf("CheckAddr(%s) = %v, want nil", addr, err)
		case wantReason != "" && (!errors.As(err, &be) || be.Reason != wantReason):
			t.Errorf("CheckAddr(%s) = %v, want blocked: %s", addr, err, wantReason)
		}
	}

	c("127.0.0.1:8081", "")
	c("[::1]:8082", "")
	c("93.184.215.14:443", "")
	c("127.0.0.1:8082", ReasonLoopback)
	c("127.0.0.2:8081", ReasonLoopback)
	c("[::1]:8081", ReasonLoopback)
	c("[::ffff:127.0.0.1]:8081", "")             // a resolver's v4-mapped answer for an allowed v4 address
	c("[::ffff:127.0.0.1]:8082", ReasonLoopback) // …and for one that is not
	c("[fe80::1%eth0]:80", ReasonZone)
	if err := g.Control("tcp4", "127.0.0.1:8081", nil); err != nil {
		t.Errorf("Control(allowed) = %v", err)
	}
	if err := g.Control("tcp4", "10.0.0.1:80", nil); err == nil || err.Error() != "blocked: private address" {
		t.Errorf("Control(10.0.0.1:80) = %v, want blocked: private address", err)
	}
	if err := g.Control("tcp4", "not an address", nil); err == nil {
		t.Error("Control(garbage) = nil, want an error")
	}
	if err := (*Guard)(nil).CheckAddr(netip.AddrPort{}); err == nil {
		t.Error("CheckAddr(zero) = nil, want an error")
	}
}

func FuzzPrecheck(f *testing.F) {
	for _, s := range []string{
		"http://example.com/", "http://127.1/", "http://[::ffff:127.0.0.1]/", "http://0x7f000001/",
		"http://u@h/", "https://h:443/", "http://h:8080/", "http://[fe80::1%25eth0]/", "http://localhost./",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rawURL string) {
		err := Precheck(rawURL)
		if err == nil {
			return
		}
		var be *BlockedError
		if !errors.As(err, &be) {
			t.Fatalf("Precheck(%q) = %T, want *BlockedError", rawURL, err)
		}
		if !knownReasons[be.Reason] {
			t.Fatalf("Precheck(%q) reason %q is not a fixed reason", rawURL, be.Reason)
		}
	})
}

var knownReasons = map[string]bool{
	ReasonInvalid: true, ReasonUnspecified: true, ReasonThisNetwork: true, ReasonLoopback: true,
	ReasonPrivate: true, ReasonLinkLocal: true, ReasonShared: true, ReasonMulticast: true,
	ReasonBroadcast: true, ReasonDocumentation: true, ReasonBenchmarking: true, ReasonReserved: true,
	ReasonURLTooLong: true, ReasonUnparseable: true, ReasonScheme: true, ReasonUserinfo: true,
	ReasonEmptyHost: true, ReasonPort: true, ReasonZone: true, ReasonNonCanonical: true,
}

func outcomeOf(err error) batch.Outcome {
	var oe batch.OutcomeError
	if errors.As(err, &oe) {
		return oe.Outcome()
	}
	return ""
}
