package batchnet

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
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

func TestClient_SSRF(t *testing.T) {
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
		_, err := b.c.dialer.DialContext(t.Context(), "tcp", victim.Listener.Addr().String())
		var be *BlockedError
		if !errors.As(err, &be) || be.Reason != ReasonLoopback {
			t.Fatalf("dial = %v, want blocked: loopback address", err)
		}
		assertNoLeak(t, CleanError(t.Context(), err), victim.URL, victim.Listener.Addr().String(), "127.0.0.1")
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
			_, err := b.c.dialContext(t.Context(), "tcp", hostport)
			var be *BlockedError
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
			"mixed-a.test": ReasonPrivate, "mixed-b.test": ReasonPrivate,
			"mixed-c.test": ReasonLoopback, "mixed-d.test": ReasonLinkLocal,
		} {
			u := "http://" + host + "/c-mixed?token=c-tok-mixed"
			_, err := b.get(t, u)
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
			{"10.0.0.1", ReasonPrivate},
			{"192.168.1.1", ReasonPrivate},
			{"169.254.169.254", ReasonLinkLocal},
			{"100.64.0.1", ReasonShared},
			{"127.0.0.1", ReasonLoopback},
			{"0.0.0.0", ReasonUnspecified},
			{"::1", ReasonLoopback},
			{"fd00::1", ReasonPrivate},
			{"fe80::1", ReasonLinkLocal},
			{"::ffff:127.0.0.1", ReasonLoopback},
			{"64:ff9b::a00:1", ReasonPrivate},
			{"2002:a00:1::", ReasonPrivate},
			{"ff02::1", ReasonMulticast},
		} {
			host := fmt.Sprintf("c-internal-%d.test", i)
			b.dns.set(host, tc.addr)
			u := "http://" + host + "/c-path?token=c-tok"
			_, err := b.get(t, u)
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
			{"127.1", ReasonNonCanonical},
			{"2130706433", ReasonNonCanonical},
			{"0x7f000001", ReasonNonCanonical},
			{"0177.0.0.1", ReasonNonCanonical},
			{"0", ReasonNonCanonical},
			{"[::ffff:127.0.0.1]", ReasonLoopback},
			{"[::1]", ReasonLoopback},
			{"localhost", ReasonLoopback},
			{"127.0.0.1.", ReasonLoopback},
			{"127.0.0.1:" + b.port + "0", ReasonPort}, // not the allow-listed port
		} {
			u := "http://" + tc.host + "/c-num"
			_, err := b.get(t, u)
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
		_, err := b.get(t, u)
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
		if err := b.c.Precheck(u); err != nil {
			t.Fatalf("Precheck = %v, want nil (it does not resolve)", err)
		}
		// ... but at fetch time the name points at loopback.
		b.dns.set("rebind.test", "127.0.0.1")
		_, err := b.get(t, u)
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
		for to, reason := range map[string]string{"internal": ReasonLoopback, "metadata": ReasonLinkLocal} {
			u := b.base + "/go/" + to
			_, err := b.get(t, u)
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
			"port": ReasonPort, "literal": ReasonLoopback, "mapped": ReasonLoopback,
			"numeric": ReasonNonCanonical, "scheme": ReasonScheme,
		} {
			u := b.base + "/go/" + to
			_, err := b.get(t, u)
			b.wantErr(t, err, u, batch.OutcomeBlocked, "blocked: "+reason)
			assertNoLeak(t, err, victim.URL, targets[to])
		}
		if hits.Load() != 0 {
			t.Errorf("victim got %d requests, want 0", hits.Load())
		}
	})
}

// TestClient_IgnoresProxyEnv is not parallel: it sets the environment.
func TestClient_IgnoresProxyEnv(t *testing.T) {
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
	b.c = newTestClient(t, ClientConfig{
		Allow:         []string{"proxied.test:" + b.port, b.addr},
		Lookup:        b.dns.lookup,
		BeforeConnect: b.rec.beforeConnect,
	})
	b.dns.set("proxied.test", "127.0.0.1")
	b.mux.HandleFunc("/x", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "direct") })

	u := "http://proxied.test:" + b.port + "/x"
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	if p, _ := http.ProxyFromEnvironment(req); p != nil {
		t.Logf("the default transport would use proxy %s", p.Host)
	}
	body, err := b.get(t, u)
	if err != nil || body != "direct" {
		t.Fatalf("get = %q, %v; want direct", body, err)
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

func TestNewClient(t *testing.T) {
	t.Parallel()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		c := newTestClient(t, ClientConfig{})
		if c.timeout != DefaultTimeout || c.headerTimeout != DefaultHeaderTimeout || c.maxRedirects != DefaultMaxRedirects {
			t.Errorf("defaults = %s, %s, %d", c.timeout, c.headerTimeout, c.maxRedirects)
		}
		if c.transport.Proxy != nil {
			t.Error("transport has a Proxy func, want none")
		}
		if c.transport.ResponseHeaderTimeout != 0 {
			t.Errorf("ResponseHeaderTimeout = %s, want 0: it is not shorter than Timeout", c.transport.ResponseHeaderTimeout)
		}
		hc := c.HTTPClient()
		if hc.Jar != nil || hc.CheckRedirect == nil || hc.Transport != c.transport || hc.Timeout != 0 {
			t.Error("HTTPClient has a cookie jar, no redirect check, another transport or a timeout")
		}
		if c.Guard() == nil {
			t.Error("Guard() = nil")
		}
	})

	t.Run("HeaderTimeout", func(t *testing.T) {
		t.Parallel()
		c := newTestClient(t, ClientConfig{Timeout: time.Minute, HeaderTimeout: time.Second})
		if got := c.transport.ResponseHeaderTimeout; got != time.Second {
			t.Errorf("ResponseHeaderTimeout = %s, want 1s", got)
		}
	})

	t.Run("Negative", func(t *testing.T) {
		t.Parallel()
		for name, opts := range map[string]ClientConfig{
			"Timeout":       {Timeout: -time.Second},
			"HeaderTimeout": {HeaderTimeout: -time.Second},
			"MaxRedirects":  {MaxRedirects: -1},
		} {
			c, err := NewClient(opts)
			if err == nil || c != nil || !strings.Contains(err.Error(), name) {
				t.Errorf("NewClient(negative %s) = %v, %v; want an error naming it", name, c, err)
			}
		}
	})
}

func TestClient_Precheck(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, ClientConfig{Allow: []string{"127.0.0.1:8081"}})
	if err := c.Precheck("http://127.0.0.1:8081/"); err != nil {
		t.Errorf("Precheck(allow-listed) = %v, want nil", err)
	}
	if err := c.Precheck("http://127.0.0.1:8082/"); err == nil || err.Error() != "blocked: port not allowed" {
		t.Errorf("Precheck(another port) = %v, want blocked: port not allowed", err)
	}
	var hook precheckFunc = c.Guard().PrecheckFunc
	if err := hook(t.Context(), batch.Caller{}, "http://127.0.0.1:8081/"); err != nil {
		t.Errorf("Guard().PrecheckFunc(allow-listed) = %v, want nil", err)
	}
}

// Get is Do of a GET: the page of an allowed server, the guard's refusal
// of another, and a URL that does not parse refused without repeating it.
func TestClient_Get(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Method+" page")
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient(ClientConfig{Allow: []string{srv.Listener.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	resp, err := c.Get(t.Context(), srv.URL+"/p")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "GET page" {
		t.Errorf("body %q", body)
	}
	if _, err := c.Get(t.Context(), "http://127.0.0.2:1/secret-token"); !errors.As(err, new(*BlockedError)) || strings.Contains(err.Error(), "secret") {
		t.Errorf("Get of a refused address: %v, want a BlockedError without the URL", err)
	}
	if _, err := c.Get(t.Context(), "http://exa mple.com/%zz-secret"); !errors.As(err, new(*BlockedError)) || strings.Contains(err.Error(), "secret") {
		t.Errorf("Get of an unparsable URL: %v, want a BlockedError without the URL", err)
	}
}
