package batchrobots_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchnet"
	"github.com/siftfetch/batchkit/batchrobots"
)

// site is a test server whose robots.txt answer the test sets, and which
// counts the robots.txt requests.
type site struct {
	srv     *httptest.Server
	fetches atomic.Int64
	agents  chan string

	mu     sync.Mutex
	status int
	body   string
	hold   chan struct{} // if set, robots.txt answers once it is closed
}

func newSite(t *testing.T, status int, body string) *site {
	t.Helper()
	s := &site{status: status, body: body, agents: make(chan string, 100)}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/robots.txt" {
			t.Errorf("request to %s: a check must fetch nothing but robots.txt", r.URL.Path)
		}
		s.fetches.Add(1)
		select {
		case s.agents <- r.UserAgent():
		default:
		}
		s.mu.Lock()
		status, body, hold := s.status, s.body, s.hold
		s.mu.Unlock()
		if hold != nil {
			<-hold
		}
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *site) set(status int, body string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.body = status, body
}

// holdUntil makes robots.txt answer once ch is closed (nil: at once).
func (s *site) holdUntil(ch chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold = ch
}

type testBundle struct {
	checker *batchrobots.Checker
	clock   *batchtest.Clock
	logs    *batchtest.Buffer
}

// setup returns a checker for the sites, with a test clock, whose
// logs (at Debug) go to the bundle. cfg's Client, Now and Logger are
// set.
func setup(t *testing.T, cfg batchrobots.Config, sites ...*site) *testBundle {
	t.Helper()
	var allow []string
	for _, s := range sites {
		allow = append(allow, s.srv.Listener.Addr().String())
	}
	client, err := batchnet.NewClient(batchnet.ClientConfig{Allow: allow})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.CloseIdleConnections)
	b := &testBundle{clock: batchtest.NewClock(), logs: &batchtest.Buffer{}}
	cfg.Client = client
	cfg.Now = b.clock.Now
	cfg.UserAgent = cmpOr(cfg.UserAgent, "batchkit")
	cfg.Logger = slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if b.checker, err = batchrobots.New(cfg); err != nil {
		t.Fatal(err)
	}
	return b
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// check checks rawURL and fails t on an error.
func (b *testBundle) check(t *testing.T, rawURL string) batch.Robots {
	t.Helper()
	got, err := b.checker.Check(t.Context(), batch.Target{URL: rawURL})
	if err != nil {
		t.Fatalf("Check(%s): %v", rawURL, err)
	}
	return got
}

func TestChecker_Check(t *testing.T) {
	t.Parallel()

	t.Run("AllowAndDisallowByPath", func(t *testing.T) {
		t.Parallel()
		s := newSite(t, 200, "User-agent: *\nDisallow: /private\nAllow: /private/open\nDisallow: /*.pdf$\n")
		b := setup(t, batchrobots.Config{}, s)
		f := func(path string, disallowed bool) {
			t.Helper()
			if got := b.check(t, s.srv.URL+path); got.Disallowed != disallowed {
				t.Errorf("Check(%s).Disallowed = %v, want %v", path, got.Disallowed, disallowed)
			}
		}
		f("/", false)
		f("/public/page", false)
		f("/private", true)
		f("/private/page?q=1", true)
		f("/private/open/page", false)
		f("/doc.pdf", true)
		f("/doc.pdf?x", false)
		f("/robots.txt", false)
		if n := s.fetches.Load(); n != 1 {
			t.Errorf("robots.txt fetched %d times, want 1", n)
		}
		if ua := <-s.agents; ua != "batchkit" {
			t.Errorf("robots.txt requested as %q, want batchkit", ua)
		}
	})

	t.Run("BadLinesAreDropped", func(t *testing.T) {
		t.Parallel()
		// robotstxt alone refuses this whole file for its first and third
		// lines.
		s := newSite(t, 200, "Disallow: /early\nUser-agent: *\nCrawl-delay: soon\nDisallow: /private\n")
		b := setup(t, batchrobots.Config{}, s)
		if got := b.check(t, s.srv.URL+"/private"); !got.Disallowed {
			t.Errorf("Check(/private) = %+v, want disallowed", got)
		}
		if got := b.check(t, s.srv.URL+"/early"); got.Disallowed {
			t.Errorf("Check(/early) = %+v, want allowed (the rule precedes any user-agent)", got)
		}

		// Keys without a colon, as robotstxt's scanner reads them.
		s2 := newSite(t, 200, "User-agent *\nDisallow /nocolon # a comment\n")
		b2 := setup(t, batchrobots.Config{}, s2)
		if got := b2.check(t, s2.srv.URL+"/nocolon/x"); !got.Disallowed {
			t.Errorf("Check(/nocolon/x) = %+v, want disallowed", got)
		}
	})

	t.Run("BodyCap", func(t *testing.T) {
		t.Parallel()
		body := "User-agent: *\nDisallow: /a\n" + strings.Repeat("# padding\n", 10) + "Disallow: /private\n"
		s := newSite(t, 200, body)
		b := setup(t, batchrobots.Config{MaxBytes: int64(strings.Index(body, "/private") + 4)}, s)
		if got := b.check(t, s.srv.URL+"/a"); !got.Disallowed {
			t.Errorf("Check(/a) = %+v, want disallowed", got)
		}
		// The cut line is dropped, not read as "Disallow: /pr".
		if got := b.check(t, s.srv.URL+"/pr"); got.Disallowed {
			t.Errorf("Check(/pr) = %+v, want allowed", got)
		}
	})

	t.Run("CrawlDelay", func(t *testing.T) {
		t.Parallel()
		f := func(delay string, max, want time.Duration) {
			t.Helper()
			s := newSite(t, 200, "User-agent: *\nCrawl-delay: "+delay+"\n")
			b := setup(t, batchrobots.Config{MaxCrawlDelay: max}, s)
			if got := b.check(t, s.srv.URL+"/"); got.CrawlDelay != want {
				t.Errorf("Crawl-delay %s (max %s): CrawlDelay = %s, want %s", delay, max, got.CrawlDelay, want)
			}
		}
		f("2", 0, 2*time.Second)
		f("0.5", 0, 500*time.Millisecond)
		f("120", 0, batchrobots.DefaultMaxCrawlDelay)
		f("1e300", 0, batchrobots.DefaultMaxCrawlDelay)
		f("10", 5*time.Second, 5*time.Second)
		f("-1", 0, 0)
	})

	t.Run("NotFoundAllowsAll", func(t *testing.T) {
		t.Parallel()
		for _, code := range []int{401, 403, 404, 410} {
			s := newSite(t, code, "User-agent: *\nDisallow: /\n")
			b := setup(t, batchrobots.Config{}, s)
			if got := b.check(t, s.srv.URL+"/page"); got.Disallowed {
				t.Errorf("robots.txt %d: Check = %+v, want allowed", code, got)
			}
		}
	})

	t.Run("Unparseable", func(t *testing.T) {
		t.Parallel()
		b := setup(t, batchrobots.Config{})
		f := func(rawURL string, reason string) {
			t.Helper()
			_, err := b.checker.Check(t.Context(), batch.Target{URL: rawURL})
			var be *batchnet.BlockedError
			if !errors.As(err, &be) || be.Reason != reason {
				t.Errorf("Check(%q) = %v, want blocked: %s", rawURL, err, reason)
			}
		}
		f("http://[::1", batchnet.ReasonUnparseable)
		f("/relative", batchnet.ReasonUnparseable)
		f("ftp://example.com/file", batchnet.ReasonScheme)
	})

	t.Run("UserAgentGroup", func(t *testing.T) {
		t.Parallel()
		s := newSite(t, 200, strings.Join([]string{
			"User-agent: *", "Disallow: /",
			"", "User-agent: BatchKit/2.0", "Disallow: /private", "Crawl-delay: 3",
			"", "User-agent: batch", "Disallow: /batch-prefix", // a prefix of our token: not ours
			"", "User-agent: otherbot", "Allow: /",
		}, "\n"))
		b := setup(t, batchrobots.Config{}, s)
		f := func(path string, disallowed bool) {
			t.Helper()
			got := b.check(t, s.srv.URL+path)
			if got.Disallowed != disallowed || got.CrawlDelay != 3*time.Second {
				t.Errorf("Check(%s) = %+v, want disallowed %v, crawl delay 3s", path, got, disallowed)
			}
		}
		f("/page", false)
		f("/private/x", true)
		f("/batch-prefix", false)

		other := setup(t, batchrobots.Config{UserAgent: "otherbot"}, s)
		if got := other.check(t, s.srv.URL+"/private/x"); got.Disallowed || got.CrawlDelay != 0 {
			t.Errorf("otherbot: Check(/private/x) = %+v, want allowed, no delay", got)
		}
		star := setup(t, batchrobots.Config{UserAgent: "nobody"}, s)
		if got := star.check(t, s.srv.URL+"/page"); !got.Disallowed {
			t.Errorf("nobody: Check(/page) = %+v, want disallowed by the * group", got)
		}
	})
}

func TestChecker_Failure(t *testing.T) {
	t.Parallel()

	t.Run("ServerErrorRefusesThenRefetches", func(t *testing.T) {
		t.Parallel()
		s := newSite(t, 500, "")
		b := setup(t, batchrobots.Config{}, s)
		f := func(wantOutcome batch.Outcome) {
			t.Helper()
			_, err := b.checker.Check(t.Context(), batch.Target{URL: s.srv.URL + "/page"})
			var oe batch.OutcomeError
			var he batch.HintError
			if !errors.As(err, &oe) || oe.Outcome() != wantOutcome || !errors.As(err, &he) || he.Hint() != batchrobots.Hint {
				t.Fatalf("Check = %v, want an error with outcome %s and hint %s", err, wantOutcome, batchrobots.Hint)
			}
			if want := "robots.txt unavailable: upstream: status "; !strings.HasPrefix(err.Error(), want) {
				t.Errorf("Check = %q, want it to start %q", err, want)
			}
		}
		f(batch.OutcomeUpstream5xx)
		s.set(429, "")
		b.clock.Advance(batchrobots.DefaultFailureTTL - time.Second)
		f(batch.OutcomeUpstream5xx) // still the cached failure
		if n := s.fetches.Load(); n != 1 {
			t.Errorf("robots.txt fetched %d times within the failure TTL, want 1", n)
		}
		b.clock.Advance(time.Second)
		f(batch.OutcomeUpstream4xx) // the 429, fetched again
		s.set(200, "User-agent: *\nDisallow: /private\n")
		b.clock.Advance(batchrobots.DefaultFailureTTL)
		if got := b.check(t, s.srv.URL+"/page"); got.Disallowed {
			t.Errorf("Check(/page) = %+v, want allowed once robots.txt answers", got)
		}
		if n := s.fetches.Load(); n != 3 {
			t.Errorf("robots.txt fetched %d times, want 3", n)
		}
	})

	t.Run("Unreachable", func(t *testing.T) {
		t.Parallel()
		s := newSite(t, 200, "")
		b := setup(t, batchrobots.Config{}, s)
		s.srv.Close()
		_, err := b.checker.Check(t.Context(), batch.Target{URL: s.srv.URL + "/page"})
		var oe batch.OutcomeError
		if !errors.As(err, &oe) || !oe.Outcome().Retryable() {
			t.Errorf("Check on a closed server = %v, want a retryable error", err)
		}
	})

	t.Run("CallerGivesUp", func(t *testing.T) {
		t.Parallel()
		s := newSite(t, 200, "User-agent: *\nDisallow: /private\n")
		hold := make(chan struct{})
		s.holdUntil(hold)
		b := setup(t, batchrobots.Config{}, s)
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		_, err := b.checker.Check(ctx, batch.Target{URL: s.srv.URL + "/private"})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Check past its deadline = %v, want DeadlineExceeded", err)
		}
		s.holdUntil(nil)
		close(hold)
		// The abandoned fetch is not cached: the next check fetches again.
		if got := b.check(t, s.srv.URL+"/private"); !got.Disallowed {
			t.Errorf("Check(/private) = %+v, want disallowed", got)
		}
	})
}

func TestChecker_Cache(t *testing.T) {
	t.Parallel()

	t.Run("ConcurrentChecksShareOneFetch", func(t *testing.T) {
		t.Parallel()
		s := newSite(t, 200, "User-agent: *\nDisallow: /private\n")
		hold := make(chan struct{})
		s.holdUntil(hold)
		b := setup(t, batchrobots.Config{}, s)
		const n = 20
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() {
				got, err := b.checker.Check(t.Context(), batch.Target{URL: fmt.Sprintf("%s/private/%d", s.srv.URL, i)})
				if err == nil && !got.Disallowed {
					err = errors.New("allowed")
				}
				errs <- err
			})
		}
		time.Sleep(50 * time.Millisecond) // most checks join the flight; late ones find the cache
		close(hold)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("Check: %v, want disallowed", err)
			}
		}
		if got := s.fetches.Load(); got != 1 {
			t.Errorf("robots.txt fetched %d times for %d checks, want 1", got, n)
		}
	})

	t.Run("EvictsLeastRecentlyUsed", func(t *testing.T) {
		t.Parallel()
		a, c, d := newSite(t, 404, ""), newSite(t, 404, ""), newSite(t, 404, "")
		b := setup(t, batchrobots.Config{MaxEntries: 2}, a, c, d)
		b.check(t, a.srv.URL+"/")
		b.check(t, c.srv.URL+"/")
		b.check(t, a.srv.URL+"/") // a is the most recently used
		b.check(t, d.srv.URL+"/") // evicts c
		b.check(t, a.srv.URL+"/")
		b.check(t, c.srv.URL+"/") // fetched again; evicts d
		b.check(t, a.srv.URL+"/")
		for name, w := range map[string]struct {
			s    *site
			want int64
		}{"a": {a, 1}, "c": {c, 2}, "d": {d, 1}} {
			if got := w.s.fetches.Load(); got != w.want {
				t.Errorf("site %s: robots.txt fetched %d times, want %d", name, got, w.want)
			}
		}
	})

	t.Run("KeyIsSchemeHostAndPort", func(t *testing.T) {
		t.Parallel()
		s := newSite(t, 200, "User-agent: *\nDisallow: /private\n")
		b := setup(t, batchrobots.Config{}, s)
		b.check(t, s.srv.URL+"/a")
		b.check(t, strings.Replace(s.srv.URL, "http://", "HTTP://", 1)+"/b")
		if got := s.fetches.Load(); got != 1 {
			t.Errorf("robots.txt fetched %d times, want 1", got)
		}
	})

	t.Run("TTLExpiryRefetches", func(t *testing.T) {
		t.Parallel()
		s := newSite(t, 200, "User-agent: *\nDisallow: /private\n")
		b := setup(t, batchrobots.Config{TTL: 10 * time.Minute}, s)
		if got := b.check(t, s.srv.URL+"/private"); !got.Disallowed {
			t.Errorf("Check(/private) = %+v, want disallowed", got)
		}
		s.set(200, "User-agent: *\nAllow: /\n")
		b.clock.Advance(10*time.Minute - time.Second)
		if got := b.check(t, s.srv.URL+"/private"); !got.Disallowed {
			t.Errorf("Check(/private) within the TTL = %+v, want the cached rules", got)
		}
		b.clock.Advance(time.Second)
		if got := b.check(t, s.srv.URL+"/private"); got.Disallowed {
			t.Errorf("Check(/private) after the TTL = %+v, want the new rules", got)
		}
		if got := s.fetches.Load(); got != 2 {
			t.Errorf("robots.txt fetched %d times, want 2", got)
		}
	})
}

// TestChecker_NoHostInLogs checks every kind of answer: no log line and no
// error holds the host, its port or a path.
func TestChecker_NoHostInLogs(t *testing.T) {
	t.Parallel()
	ok := newSite(t, 200, "User-agent: *\nDisallow: /secret-path\nCrawl-delay: 1\n")
	missing := newSite(t, 404, "")
	broken := newSite(t, 503, "")
	gone := newSite(t, 200, "")
	b := setup(t, batchrobots.Config{}, ok, missing, broken, gone)
	gone.srv.Close()
	var errs []string
	for _, s := range []*site{ok, missing, broken, gone} {
		if _, err := b.checker.Check(t.Context(), batch.Target{URL: s.srv.URL + "/secret-path?token=abc"}); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) != 2 {
		t.Errorf("errors = %q, want two (the 503 and the closed server)", errs)
	}
	logs := b.logs.String()
	if strings.Count(logs, "robots.txt fetched") != 4 {
		t.Errorf("logs = %s, want a line per fetch", logs)
	}
	for _, s := range []*site{ok, missing, broken, gone} {
		addr := s.srv.Listener.Addr().String()
		_, port, _ := strings.Cut(addr, ":")
		for _, marker := range []string{addr, "127.0.0.1", ":" + port, "secret-path", "token"} {
			if strings.Contains(logs, marker) {
				t.Errorf("logs hold %q:\n%s", marker, logs)
			}
			for _, e := range errs {
				if strings.Contains(e, marker) {
					t.Errorf("error %q holds %q", e, marker)
				}
			}
		}
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	client, err := batchnet.NewClient(batchnet.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	f := func(cfg batchrobots.Config, wantErr string) {
		t.Helper()
		_, err := batchrobots.New(cfg)
		switch {
		case wantErr == "" && err != nil:
			t.Errorf("New(%+v) = %v, want nil", cfg, err)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
			t.Errorf("New(%+v) = %v, want an error with %q", cfg, err, wantErr)
		}
	}
	f(batchrobots.Config{Client: client, UserAgent: "batchkit"}, "")
	f(batchrobots.Config{Client: client, UserAgent: "My_Bot-x"}, "")
	f(batchrobots.Config{UserAgent: "batchkit"}, "a Client is required")
	f(batchrobots.Config{Client: client}, "UserAgent must be a product token")
	f(batchrobots.Config{Client: client, UserAgent: "batchkit/1.0"}, "UserAgent must be a product token")
	f(batchrobots.Config{Client: client, UserAgent: "batchkit", TTL: -time.Second}, "TTL must not be negative")
	f(batchrobots.Config{Client: client, UserAgent: "batchkit", MaxEntries: -1}, "MaxEntries must not be negative")
}
