package fetcher

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchnet"
)

// cgoAnswers are what getaddrinfo (GODEBUG=netdns=cgo) answers for the
// legacy numeric host forms, measured on this project's machine; the pure
// Go resolver fails them as lookups. The stub resolver answers them the
// cgo way, so a form that slipped past the numeric-host rule would still
// have to pass the address rule.
var cgoAnswers = map[string][]string{
	"127.1":      {"127.0.0.1"},
	"2130706433": {"127.0.0.1"},
	"0x7f000001": {"127.0.0.1"},
	"0177.0.0.1": {"127.0.0.1"},
	"0":          {"0.0.0.0"},
	"localhost":  {"127.0.0.1", "::1"},
}

func TestFetcher_SSRF(t *testing.T) {
	t.Parallel()

	// newVictim starts a loopback server that is not on the allow list and
	// counts the requests that reach it: there must be none.
	newVictim := func(t *testing.T) (*httptest.Server, *atomic.Int64) {
		var hits atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			fmt.Fprint(w, "internal secret")
		}))
		t.Cleanup(srv.Close)
		return srv, &hits
	}

	t.Run("ControlRefusesAtConnect", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		victim, hits := newVictim(t)
		// Straight to the dialer, past the pre-dial check: Control refuses.
		_, err := b.f.dialer.DialContext(t.Context(), "tcp", victim.Listener.Addr().String())
		var be *batchnet.BlockedError
		if !errors.As(err, &be) || be.Reason != batchnet.ReasonLoopback {
			t.Fatalf("dial = %v, want blocked: loopback address", err)
		}
		assertNoLeak(t, cleanError(t.Context(), err), victim.URL, victim.Listener.Addr().String(), "127.0.0.1")
		if hits.Load() != 0 || b.rec.count() != 0 {
			t.Errorf("victim hits = %d, recorded dials = %d, want 0, 0", hits.Load(), b.rec.count())
		}
	})

	t.Run("DialGuardNumericForms", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		for host, addrs := range cgoAnswers {
			b.dns.set(host, addrs...)
		}
		for _, hostport := range []string{
			"127.1:80", "2130706433:80", "0x7f000001:80", "0177.0.0.1:80", "0:80", "localhost:80",
			"[::ffff:127.0.0.1]:80", "[::1]:80", "127.0.0.1.:80", "[fe80::1%lo]:80", "0.0.0.0:80",
		} {
			_, err := b.f.dialContext(t.Context(), "tcp", hostport)
			var be *batchnet.BlockedError
			if !errors.As(err, &be) {
				t.Errorf("dial %s = %v, want blocked", hostport, err)
			}
		}
		if n := b.rec.count(); n != 0 {
			t.Errorf("%d connections attempted, want 0", n)
		}
		for _, h := range []string{"127.1", "2130706433", "0x7f000001", "0177.0.0.1", "0"} {
			if n := b.dns.callsFor(h); n != 0 {
				t.Errorf("%q was looked up %d times, want never", h, n)
			}
		}
	})

	t.Run("MixedAnswers", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.dns.set("mixed-a.test", publicIP, "10.0.0.1")
		b.dns.set("mixed-b.test", "10.0.0.1", publicIP)
		b.dns.set("mixed-c.test", publicIP, "::1")
		b.dns.set("mixed-d.test", publicIP, "64:ff9b::a9fe:a9fe")
		for host, reason := range map[string]string{
			"mixed-a.test": batchnet.ReasonPrivate, "mixed-b.test": batchnet.ReasonPrivate,
			"mixed-c.test": batchnet.ReasonLoopback, "mixed-d.test": batchnet.ReasonLinkLocal,
		} {
			u := "http://" + host + "/c-mixed?token=c-tok-mixed"
			_, err := b.fetch(t, u, batch.Options{})
			b.wantErr(t, err, u, batch.OutcomeBlocked, "blocked: "+reason)
			assertNoLeak(t, err, publicIP)
		}
		// One refused answer refuses the name: not even the public address is dialled.
		if n := b.rec.count(); n != 0 {
			t.Errorf("%d connections attempted, want 0", n)
		}
	})

	t.Run("NameToRefusedAddress", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		for i, tc := range []struct{ addr, reason string }{
			{"10.0.0.1", batchnet.ReasonPrivate},
			{"192.168.1.1", batchnet.ReasonPrivate},
			{"169.254.169.254", batchnet.ReasonLinkLocal},
			{"100.64.0.1", batchnet.ReasonShared},
			{"127.0.0.1", batchnet.ReasonLoopback},
			{"0.0.0.0", batchnet.ReasonUnspecified},
			{"::1", batchnet.ReasonLoopback},
			{"fd00::1", batchnet.ReasonPrivate},
			{"fe80::1", batchnet.ReasonLinkLocal},
			{"::ffff:127.0.0.1", batchnet.ReasonLoopback},
			{"64:ff9b::a00:1", batchnet.ReasonPrivate},
			{"2002:a00:1::", batchnet.ReasonPrivate},
			{"ff02::1", batchnet.ReasonMulticast},
		} {
			host := fmt.Sprintf("c-internal-%d.test", i)
			b.dns.set(host, tc.addr)
			u := "http://" + host + "/c-path?token=c-tok"
			_, err := b.fetch(t, u, batch.Options{})
			b.wantErr(t, err, u, batch.OutcomeBlocked, "blocked: "+tc.reason)
			assertNoLeak(t, err, tc.addr)
		}
		if n := b.rec.count(); n != 0 {
			t.Errorf("%d connections attempted, want 0", n)
		}
	})

	t.Run("NumericForms", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		for host, addrs := range cgoAnswers {
			b.dns.set(host, addrs...)
		}
		for _, tc := range []struct{ host, reason string }{
			{"127.1", batchnet.ReasonNonCanonical},
			{"2130706433", batchnet.ReasonNonCanonical},
			{"0x7f000001", batchnet.ReasonNonCanonical},
			{"0177.0.0.1", batchnet.ReasonNonCanonical},
			{"0", batchnet.ReasonNonCanonical},
			{"[::ffff:127.0.0.1]", batchnet.ReasonLoopback},
			{"[::1]", batchnet.ReasonLoopback},
			{"localhost", batchnet.ReasonLoopback},
			{"127.0.0.1.", batchnet.ReasonLoopback},
			{"127.0.0.1:" + b.port + "0", batchnet.ReasonPort}, // not the allow-listed port
		} {
			u := "http://" + tc.host + "/c-num"
			_, err := b.fetch(t, u, batch.Options{})
			b.wantErr(t, err, u, batch.OutcomeBlocked, "blocked: "+tc.reason)
		}
		if n := b.rec.count(); n != 0 {
			t.Errorf("%d connections attempted, want 0", n)
		}
	})

	t.Run("PublicAnswerReachesOnlyTheRecorder", func(t *testing.T) {
		t.Parallel()
		// Shows the recorder is the last line: a public answer passes the
		// guard and is refused by the recorder in Control, before connect.
		b := setup(t, nil)
		b.dns.set("public.test", publicIP)
		u := "http://public.test/c-pub"
		_, err := b.fetch(t, u, batch.Options{})
		b.wantErr(t, err, u, batch.OutcomeOther, "fetch: request failed")
		assertNoLeak(t, err, publicIP)
		want := netip.MustParseAddrPort(publicIP + ":80")
		if off := b.rec.takeOffLoopback(); len(off) == 0 || off[0] != want {
			t.Errorf("refused attempts = %v, want [%s]", off, want)
		}
	})

	t.Run("Rebinding", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		// A check at submit time may have seen a public answer ...
		b.dns.queue("rebind.test", publicIP)
		if ips, _ := b.dns.lookup(t.Context(), "rebind.test"); len(ips) != 1 || ips[0].String() != publicIP {
			t.Fatalf("first answer = %v", ips)
		}
		u := "http://rebind.test/c-rebind"
		if err := b.f.Precheck(u); err != nil {
			t.Fatalf("Precheck = %v, want nil (it does not resolve)", err)
		}
		// ... but at fetch time the name points at loopback.
		b.dns.set("rebind.test", "127.0.0.1")
		_, err := b.fetch(t, u, batch.Options{})
		b.wantErr(t, err, u, batch.OutcomeBlocked, "blocked: loopback address")
		if n := b.rec.count(); n != 0 {
			t.Errorf("%d connections attempted, want 0", n)
		}
	})

	t.Run("RedirectRefusedAtDial", func(t *testing.T) {
		t.Parallel()
		victim, hits := newVictim(t)
		_, vport, _ := net.SplitHostPort(victim.Listener.Addr().String())
		// The name passes the pre-check (allow-listed host:port), but the
		// address it resolves to is not allow-listed: refused at dial.
		b := setup(t, nil, "internal.test:"+vport)
		b.dns.set("internal.test", "127.0.0.1")
		b.dns.set("metadata.test", "169.254.169.254")
		b.mux.HandleFunc("/go/{to}", func(w http.ResponseWriter, r *http.Request) {
			to := map[string]string{
				"internal": "http://internal.test:" + vport + "/c-internal",
				"metadata": "http://metadata.test/latest/meta-data/",
			}[r.PathValue("to")]
			http.Redirect(w, r, to, http.StatusFound)
		})
		for to, reason := range map[string]string{"internal": batchnet.ReasonLoopback, "metadata": batchnet.ReasonLinkLocal} {
			u := b.base + "/go/" + to
			_, err := b.fetch(t, u, batch.Options{})
			b.wantErr(t, err, u, batch.OutcomeBlocked, "blocked: "+reason)
			assertNoLeak(t, err, victim.URL, "internal.test", "metadata.test", vport, "169.254.169.254")
		}
		if hits.Load() != 0 {
			t.Errorf("victim got %d requests, want 0", hits.Load())
		}
		b.rec.mu.Lock()
		defer b.rec.mu.Unlock()
		for _, d := range b.rec.dials {
			if d.String() != b.addr {
				t.Errorf("connection attempted to %s, want only %s", d, b.addr)
			}
		}
	})

	t.Run("RedirectRefusedAtPrecheck", func(t *testing.T) {
		t.Parallel()
		victim, hits := newVictim(t)
		b := setup(t, nil)
		targets := map[string]string{
			"port":    victim.URL + "/c-internal", // loopback on a port not allowed
			"literal": "http://127.0.0.1/c-internal",
			"mapped":  "http://[::ffff:127.0.0.1]/",
			"numeric": "http://2130706433/",
			"scheme":  "file:///etc/passwd",
		}
		b.mux.HandleFunc("/go/{to}", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, targets[r.PathValue("to")], http.StatusFound)
		})
		for to, reason := range map[string]string{
			"port": batchnet.ReasonPort, "literal": batchnet.ReasonLoopback, "mapped": batchnet.ReasonLoopback,
			"numeric": batchnet.ReasonNonCanonical, "scheme": batchnet.ReasonScheme,
		} {
			u := b.base + "/go/" + to
			_, err := b.fetch(t, u, batch.Options{})
			b.wantErr(t, err, u, batch.OutcomeBlocked, "blocked: "+reason)
			assertNoLeak(t, err, victim.URL, targets[to])
		}
		if hits.Load() != 0 {
			t.Errorf("victim got %d requests, want 0", hits.Load())
		}
	})
}

// TestFetcher_IgnoresProxyEnv is not parallel: it sets the environment.
func TestFetcher_IgnoresProxyEnv(t *testing.T) {
	var proxyHits atomic.Int64
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxyHits.Add(1)
		fmt.Fprint(w, "via proxy")
	}))
	t.Cleanup(proxy.Close)
	for _, k := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"} {
		t.Setenv(k, proxy.URL)
	}
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")

	b := setup(t, nil)
	// A name, not a loopback literal: net/http never proxies loopback literals.
	b.f = New(Options{
		Allow:         []string{"proxied.test:" + b.port, b.addr},
		Lookup:        b.dns.lookup,
		BeforeConnect: b.rec.beforeConnect,
	})
	t.Cleanup(b.f.CloseIdleConnections)
	b.dns.set("proxied.test", "127.0.0.1")
	b.mux.HandleFunc("/x", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "direct") })

	u := "http://proxied.test:" + b.port + "/x"
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	if p, _ := http.ProxyFromEnvironment(req); p != nil {
		t.Logf("the default transport would use proxy %s", p.Host)
	}
	res, err := b.fetch(t, u, batch.Options{})
	if err != nil || res.Content != "direct" {
		t.Fatalf("fetch = %q, %v; want direct", res.Content, err)
	}
	if proxyHits.Load() != 0 {
		t.Errorf("proxy got %d requests, want 0", proxyHits.Load())
	}
	b.rec.mu.Lock()
	defer b.rec.mu.Unlock()
	for _, d := range b.rec.dials {
		if d.String() != b.addr {
			t.Errorf("connection to %s, want only %s", d, b.addr)
		}
	}
}
