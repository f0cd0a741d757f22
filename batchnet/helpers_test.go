package batchnet

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/siftfetch/batchkit/batch"
)

// publicIP stands for any public address in stub DNS answers. Tests never
// connect to it: every client under test has a dialRecorder that refuses
// any non-loopback connection in the dialer's Control, before connect.
const publicIP = "93.184.215.14"

// dialRecorder is the BeforeConnect hook of every test client. It records
// each connection about to be made; one that is not to a loopback address
// is refused (so no test sends a packet off the machine) and fails the test
// unless the test said it expects one.
type dialRecorder struct {
	mu          sync.Mutex
	dials       []netip.AddrPort
	offLoopback []netip.AddrPort
}

var errRefusedByTest = errors.New("test: refused a non-loopback connection")

func (r *dialRecorder) beforeConnect(_ string, ap netip.AddrPort) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dials = append(r.dials, ap)
	if !ap.Addr().Unmap().IsLoopback() {
		r.offLoopback = append(r.offLoopback, ap)
		return errRefusedByTest
	}
	return nil
}

func (r *dialRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.dials)
}

// takeOffLoopback returns the refused non-loopback attempts and forgets
// them, for a test that expects them.
func (r *dialRecorder) takeOffLoopback() []netip.AddrPort {
	r.mu.Lock()
	defer r.mu.Unlock()
	off := r.offLoopback
	r.offLoopback = nil
	return off
}

// stubDNS is the resolver of every test client: it answers from a table
// and never sends a query. An unknown name is "not found".
type stubDNS struct {
	mu      sync.Mutex
	answers map[string][]netip.Addr
	calls   map[string]int
	next    map[string][][]netip.Addr // queued answers, used before answers
}

func newStubDNS() *stubDNS {
	return &stubDNS{answers: map[string][]netip.Addr{}, calls: map[string]int{}, next: map[string][][]netip.Addr{}}
}

func (d *stubDNS) set(host string, addrs ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.answers[host] = parseAddrs(addrs)
}

// queue makes the next lookup of host answer addrs, once.
func (d *stubDNS) queue(host string, addrs ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.next[host] = append(d.next[host], parseAddrs(addrs))
}

func parseAddrs(addrs []string) []netip.Addr {
	ips := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		ips[i] = netip.MustParseAddr(a)
	}
	return ips
}

func (d *stubDNS) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls[host]++
	if q := d.next[host]; len(q) > 0 {
		d.next[host] = q[1:]
		return q[0], nil
	}
	if ips, ok := d.answers[host]; ok {
		return ips, nil
	}
	// The real resolver's error names the host; the client must not pass it on.
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (d *stubDNS) callsFor(host string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[host]
}

type testBundle struct {
	c    *Client
	rec  *dialRecorder
	dns  *stubDNS
	mux  *http.ServeMux
	srv  *httptest.Server
	addr string // the test server's "127.0.0.1:port", on the allow list
	port string
	base string // "http://127.0.0.1:port"
}

// setup starts a loopback test server, allow-lists its address, and returns
// a client with a stub resolver and a dial recorder. extraAllow is added to
// the allow list; the client's options may be adjusted with tweak.
func setup(t *testing.T, tweak func(*ClientConfig), extraAllow ...string) *testBundle {
	t.Helper()
	b := &testBundle{rec: &dialRecorder{}, dns: newStubDNS(), mux: http.NewServeMux()}
	b.srv = httptest.NewServer(b.mux)
	t.Cleanup(b.srv.Close)
	b.addr = b.srv.Listener.Addr().String()
	_, b.port, _ = net.SplitHostPort(b.addr)
	b.base = b.srv.URL
	opts := ClientConfig{
		Allow:         append([]string{b.addr}, extraAllow...),
		Lookup:        b.dns.lookup,
		BeforeConnect: b.rec.beforeConnect,
	}
	if tweak != nil {
		tweak(&opts)
	}
	b.c = newTestClient(t, opts)
	t.Cleanup(func() {
		if off := b.rec.takeOffLoopback(); len(off) > 0 {
			t.Errorf("connections to non-loopback addresses were attempted (and refused): %v", off)
		}
	})
	return b
}

// newTestClient returns a client for opts whose idle connections are
// closed when the test ends.
func newTestClient(t *testing.T, opts ClientConfig) *Client {
	t.Helper()
	c, err := NewClient(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// get fetches u with the test's context; see getCtx.
func (b *testBundle) get(t *testing.T, u string) (string, error) {
	t.Helper()
	return b.getCtx(t.Context(), t, u)
}

// getCtx fetches u through the client under ctx, as a fetcher would, and
// returns the body, or the error of Do, of reading the body, or of
// StatusError.
func (b *testBundle) getCtx(ctx context.Context, t *testing.T, u string) (string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Fatalf("NewRequest(%q): %v", u, err)
	}
	resp, err := b.c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if err := StatusError(resp.StatusCode); err != nil {
		return "", err
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	return string(body), nil
}

// secrets are the strings no error may contain for a fetch of u: the URL,
// its host and host:port, its path and query, and the server's address.
func (b *testBundle) secrets(u string) []string {
	s := []string{u, b.addr, b.base}
	if pu, err := url.Parse(u); err == nil {
		s = append(s, pu.Host, pu.Hostname(), pu.RawQuery)
		if len(pu.Path) > 1 {
			s = append(s, pu.Path)
		}
	}
	return s
}

// assertNoLeak fails the test if err, or any error in its chain, contains
// one of secrets, or if a Go error type that embeds a URL or an address is
// reachable from it.
func assertNoLeak(t testing.TB, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		return
	}
	var (
		ue *url.Error
		oe *net.OpError
		de *net.DNSError
	)
	if errors.As(err, &ue) || errors.As(err, &oe) || errors.As(err, &de) {
		t.Errorf("error %q wraps a %T, %T or %T", err, ue, oe, de)
	}
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		msg := e.Error()
		for _, s := range secrets {
			if s != "" && strings.Contains(msg, s) {
				t.Errorf("error message %q contains %q", msg, s)
			}
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
}

// wantErr checks that err has the outcome and message wanted and leaks
// nothing of u.
func (b *testBundle) wantErr(t *testing.T, err error, u string, outcome batch.Outcome, msg string) {
	t.Helper()
	if err == nil {
		t.Fatalf("get succeeded, want %s error %q", outcome, msg)
	}
	if got := outcomeOf(err); got != outcome {
		t.Errorf("outcome = %q, want %q (error %q)", got, outcome, err)
	}
	if got := err.Error(); got != msg {
		t.Errorf("error = %q, want %q", got, msg)
	}
	assertNoLeak(t, err, b.secrets(u)...)
}

// rawServer listens on loopback and answers every connection by reading
// what the client sends first, writing reply (nothing if nil) and closing.
// It returns its address.
func rawServer(t *testing.T, reply []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Read(make([]byte, 4096))
			if reply != nil {
				_, _ = c.Write(reply)
			}
			c.Close()
		}
	}()
	return ln.Addr().String()
}
