package fetcher

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchsift"
)

// Fetch is a batch.FetchFunc.
var _ batch.FetchFunc = (*Fetcher)(nil).Fetch

// dialRecorder is the BeforeConnect hook of every test fetcher. It records
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

// stubDNS is the resolver of every test fetcher: it answers from a table
// and never sends a query. An unknown name is "not found".
type stubDNS struct {
	mu      sync.Mutex
	answers map[string][]netip.Addr
}

func newStubDNS() *stubDNS {
	return &stubDNS{answers: map[string][]netip.Addr{}}
}

func (d *stubDNS) set(host string, addrs ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.answers[host] = parseAddrs(addrs)
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
	if ips, ok := d.answers[host]; ok {
		return ips, nil
	}
	// The real resolver's error names the host; the fetcher must not pass it on.
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

type testBundle struct {
	f    *Fetcher
	rec  *dialRecorder
	dns  *stubDNS
	mux  *http.ServeMux
	srv  *httptest.Server
	addr string // the test server's "127.0.0.1:port", on the allow list
	port string
	base string // "http://127.0.0.1:port"
}

// setup starts a loopback test server, allow-lists its address, and returns
// a fetcher with a stub resolver and a dial recorder. extraAllow is added to
// the allow list; the bundle's opts may be adjusted with tweak.
func setup(t *testing.T, tweak func(*Options), extraAllow ...string) *testBundle {
	t.Helper()
	b := &testBundle{rec: &dialRecorder{}, dns: newStubDNS(), mux: http.NewServeMux()}
	b.srv = httptest.NewServer(b.mux)
	t.Cleanup(b.srv.Close)
	b.addr = b.srv.Listener.Addr().String()
	_, b.port, _ = net.SplitHostPort(b.addr)
	b.base = b.srv.URL
	opts := Options{
		Allow:         append([]string{b.addr}, extraAllow...),
		Lookup:        b.dns.lookup,
		BeforeConnect: b.rec.beforeConnect,
	}
	if tweak != nil {
		tweak(&opts)
	}
	b.f = New(opts)
	t.Cleanup(b.f.CloseIdleConnections)
	t.Cleanup(func() {
		if off := b.rec.takeOffLoopback(); len(off) > 0 {
			t.Errorf("connections to non-loopback addresses were attempted (and refused): %v", off)
		}
	})
	return b
}

// fetch fetches u with opts under the test's context.
func (b *testBundle) fetch(t *testing.T, u string, opts batchsift.Fields) (batch.Result, error) {
	t.Helper()
	return b.f.Fetch(t.Context(), batch.Caller{Name: "test"}, opts.Target(u))
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

func outcomeOf(err error) batch.Outcome {
	var oe batch.OutcomeError
	if errors.As(err, &oe) {
		return oe.Outcome()
	}
	return ""
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
		t.Fatalf("fetch succeeded, want %s error %q", outcome, msg)
	}
	if got := outcomeOf(err); got != outcome {
		t.Errorf("outcome = %q, want %q (error %q)", got, outcome, err)
	}
	if got := err.Error(); got != msg {
		t.Errorf("error = %q, want %q", got, msg)
	}
	assertNoLeak(t, err, b.secrets(u)...)
}
