package batchrobots

import (
	"cmp"
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/temoto/robotstxt"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchnet"
)

// Defaults for [Config].
const (
	DefaultMaxEntries = 1024
	// DefaultTTL: RFC 9309 keeps a robots.txt for 24 hours at most; an
	// hour lets a site's change reach us soon.
	DefaultTTL = time.Hour
	// DefaultFailureTTL: an unreachable robots.txt refuses its host's
	// targets for a minute, then it is fetched again.
	DefaultFailureTTL    = time.Minute
	DefaultMaxCrawlDelay = 30 * time.Second
	DefaultFetchTimeout  = 10 * time.Second
	// DefaultMaxBytes is the least RFC 9309 asks a crawler to read.
	DefaultMaxBytes = 500 << 10
)

// Hint is the hint of the error a check returns when the robots.txt could
// not be read.
const Hint = "robots.txt"

// Config configures a [Checker]. The zero value of every field but Client
// and UserAgent means its default.
type Config struct {
	// Client fetches the robots.txt files, behind its guard. Required.
	Client *batchnet.Client
	// UserAgent is the product token matched against the groups of a
	// robots.txt, case-insensitively, such as "batchkit": letters, '_'
	// and '-' only (RFC 9309). It is also the User-Agent header of the
	// robots.txt requests. Required.
	UserAgent string
	// MaxEntries bounds the cache, in hosts; the least recently used goes
	// first. Defaults to 1024.
	MaxEntries int
	// TTL is how long a host's rules are kept. Defaults to 1h.
	TTL time.Duration
	// FailureTTL is how long a robots.txt that could not be read keeps
	// refusing its host's targets before it is fetched again. Defaults to
	// 1m.
	FailureTTL time.Duration
	// MaxCrawlDelay caps the Crawl-delay a host gets. Defaults to 30s.
	MaxCrawlDelay time.Duration
	// FetchTimeout bounds one robots.txt fetch. Defaults to 10s.
	FetchTimeout time.Duration
	// MaxBytes is how much of a robots.txt is read; the rest is ignored.
	// Defaults to 500 KiB.
	MaxBytes int64
	// Logger receives a line per robots.txt fetch, at Debug, without the
	// host. Defaults to discarding them.
	Logger *slog.Logger
	// Now is a test clock. Defaults to time.Now.
	Now func() time.Time
}

func (cfg Config) withDefaults() Config {
	cfg.MaxEntries = cmp.Or(cfg.MaxEntries, DefaultMaxEntries)
	cfg.TTL = cmp.Or(cfg.TTL, DefaultTTL)
	cfg.FailureTTL = cmp.Or(cfg.FailureTTL, DefaultFailureTTL)
	cfg.MaxCrawlDelay = cmp.Or(cfg.MaxCrawlDelay, DefaultMaxCrawlDelay)
	cfg.FetchTimeout = cmp.Or(cfg.FetchTimeout, DefaultFetchTimeout)
	cfg.MaxBytes = cmp.Or(cfg.MaxBytes, DefaultMaxBytes)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return cfg
}

func (cfg Config) validate() error {
	var errs []error
	if cfg.Client == nil {
		errs = append(errs, errors.New("a Client is required"))
	}
	if cfg.UserAgent == "" || strings.IndexFunc(cfg.UserAgent, func(r rune) bool { return !isTokenRune(r) }) >= 0 {
		errs = append(errs, fmt.Errorf("UserAgent must be a product token (letters, '_' and '-'), got %q", cfg.UserAgent))
	}
	for name, v := range map[string]int64{
		"MaxEntries": int64(cfg.MaxEntries), "TTL": int64(cfg.TTL), "FailureTTL": int64(cfg.FailureTTL),
		"MaxCrawlDelay": int64(cfg.MaxCrawlDelay), "FetchTimeout": int64(cfg.FetchTimeout), "MaxBytes": cfg.MaxBytes,
	} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative", name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("batchrobots: invalid config: %w", err)
	}
	return nil
}

// Checker answers for the robots.txt rules of each target's host. It is
// safe for concurrent use.
type Checker struct {
	cfg   Config
	agent string // UserAgent, lower case

	mu      sync.Mutex
	entries map[string]*list.Element // of *entry, by origin
	lru     *list.List               // front: the most recently used
	flights map[string]*flight       // robots.txt fetches in flight, by origin
}

// entry is what a host's robots.txt said, until expires.
type entry struct {
	origin     string
	group      *robotstxt.Group // nil: everything allowed
	crawlDelay time.Duration
	err        error // the robots.txt could not be read
	expires    time.Time
}

// flight is one robots.txt fetch, shared by the checks that wait for it.
// Its context ends when the last of them gives up.
type flight struct {
	done    chan struct{}
	ent     *entry // set before done is closed
	waiters int
	cancel  context.CancelFunc
}

// New returns a Checker configured by cfg. It fails for a missing Client,
// a UserAgent that is not a product token, or a negative field.
func New(cfg Config) (*Checker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Checker{
		cfg: cfg, agent: strings.ToLower(cfg.UserAgent),
		entries: make(map[string]*list.Element), lru: list.New(), flights: make(map[string]*flight),
	}, nil
}

// Check reports whether the robots.txt of t's host lets t be fetched, and
// the host's crawl delay; c.Check is a [batch.RobotsFunc].
//
// A robots.txt answered with a 4xx (but 429) allows everything. One that
// cannot be read (a 429, a 5xx, a network error) refuses the host's
// targets with an error for Config.FailureTTL: it carries the fetch's
// outcome (upstream_5xx, timeout, …), so the caller may retry, and the
// hint [Hint]. Concurrent checks of one host share one fetch. No error
// holds the URL or the host.
func (c *Checker) Check(ctx context.Context, t batch.Target) (batch.Robots, error) {
	u, err := url.Parse(t.URL)
	if err != nil || u.Host == "" {
		return batch.Robots{}, &batchnet.BlockedError{Reason: batchnet.ReasonUnparseable}
	}
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	switch {
	case scheme != "http" && scheme != "https":
		return batch.Robots{}, &batchnet.BlockedError{Reason: batchnet.ReasonScheme}
	case port == "" && scheme == "http":
		port = "80"
	case port == "":
		port = "443"
	}
	origin := scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
	e, err := c.rules(ctx, origin, scheme+"://"+strings.ToLower(u.Host)+"/robots.txt")
	switch {
	case err != nil:
		return batch.Robots{}, err
	case e.err != nil:
		return batch.Robots{}, e.err
	}
	robots := batch.Robots{CrawlDelay: min(e.crawlDelay, c.cfg.MaxCrawlDelay)}
	if e.group != nil && u.EscapedPath() != "/robots.txt" { // always allowed
		robots.Disallowed = !e.group.Test(u.RequestURI())
	}
	return robots, nil
}

// rules returns origin's entry: the cached one, or a fresh one from
// robotsURL, fetched once for all the checks that ask meanwhile.
func (c *Checker) rules(ctx context.Context, origin, robotsURL string) (*entry, error) {
	c.mu.Lock()
	if el, ok := c.entries[origin]; ok {
		if e := el.Value.(*entry); c.cfg.Now().Before(e.expires) {
			c.lru.MoveToFront(el)
			c.mu.Unlock()
			return e, nil
		}
	}
	f := c.flights[origin]
	if f == nil {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.FetchTimeout)
		f = &flight{done: make(chan struct{}), cancel: cancel}
		c.flights[origin] = f
		go c.fly(fctx, origin, robotsURL, f)
	}
	f.waiters++
	c.mu.Unlock()

	select {
	case <-f.done:
		return f.ent, nil
	case <-ctx.Done():
		c.mu.Lock()
		f.waiters--
		if f.waiters == 0 && c.flights[origin] == f { // nobody waits: the fetch stops
			delete(c.flights, origin)
			f.cancel()
		}
		c.mu.Unlock()
		return nil, batchnet.CleanError(ctx, context.Cause(ctx))
	}
}

// fly fetches f's robots.txt and caches what it says, unless every check
// gave up on it.
func (c *Checker) fly(ctx context.Context, origin, robotsURL string, f *flight) {
	defer f.cancel()
	e := c.fetch(ctx, robotsURL)
	e.origin = origin
	c.mu.Lock()
	if c.flights[origin] == f {
		delete(c.flights, origin)
		c.store(e)
	}
	f.ent = e
	c.mu.Unlock()
	close(f.done)
}

// store caches e, and evicts the least recently used entries beyond
// MaxEntries. Called with c.mu held.
func (c *Checker) store(e *entry) {
	if el, ok := c.entries[e.origin]; ok {
		el.Value = e
		c.lru.MoveToFront(el)
	} else {
		c.entries[e.origin] = c.lru.PushFront(e)
	}
	for c.lru.Len() > c.cfg.MaxEntries {
		el := c.lru.Back()
		c.lru.Remove(el)
		delete(c.entries, el.Value.(*entry).origin)
	}
}

// fetch reads robotsURL and returns what it says. Its log line holds
// counts and outcomes only.
func (c *Checker) fetch(ctx context.Context, robotsURL string) *entry {
	began := c.cfg.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, robotsURL, nil)
	if err != nil {
		return c.failed(ctx, began, 0, &batchnet.BlockedError{Reason: batchnet.ReasonUnparseable})
	}
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	resp, err := c.cfg.Client.Do(req) // a clean error
	if err != nil {
		return c.failed(ctx, began, 0, err)
	}
	defer resp.Body.Close()
	code := resp.StatusCode
	switch {
	case code == http.StatusTooManyRequests || code >= 500:
		return c.failed(ctx, began, code, batchnet.StatusError(code))
	case code < 200 || code > 299:
		// No robots.txt (4xx), or one the client could not follow (3xx):
		// RFC 9309 allows everything.
		c.log(ctx, "allow_all", code, 0, 0)
		return &entry{expires: began.Add(c.cfg.TTL)}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, c.cfg.MaxBytes+1))
	if err != nil {
		return c.failed(ctx, began, code, err)
	}
	body = truncate(body, c.cfg.MaxBytes)
	group, delay, err := parse(body, c.agent)
	if err != nil {
		// lenient leaves robotstxt nothing to refuse; should it still,
		// the file reads as empty.
		c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "batchrobots: robots.txt unparseable; allowing everything")
		group, delay = nil, 0
	}
	c.log(ctx, "rules", code, len(body), delay)
	return &entry{group: group, crawlDelay: delay, expires: began.Add(c.cfg.TTL)}
}

// failed returns the entry of a robots.txt that could not be read: err,
// which is clean, with its outcome and the robots hint.
func (c *Checker) failed(ctx context.Context, began time.Time, code int, err error) *entry {
	outcome := batch.OutcomeOther
	var oe batch.OutcomeError
	if errors.As(err, &oe) {
		outcome = oe.Outcome()
	}
	c.log(ctx, "unavailable", code, 0, 0, slog.String("outcome", string(outcome)))
	return &entry{
		err:     batch.NewFetchError(outcome, Hint, fmt.Errorf("robots.txt unavailable: %w", err)),
		expires: began.Add(c.cfg.FailureTTL),
	}
}

func (c *Checker) log(ctx context.Context, result string, status, bytes int, delay time.Duration, more ...slog.Attr) {
	c.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "batchrobots: robots.txt fetched", append([]slog.Attr{
		slog.String("result", result), slog.Int("status", status), slog.Int("bytes", bytes), slog.Duration("crawl_delay", delay),
	}, more...)...)
}
