// Package daemon wires the whole batch service of the example programs: the
// store (SQLite, or PostgreSQL for several daemons on one database), the
// guarded web fetcher, the runner, completion webhooks signed with the
// deployment's secret and sent through the fetcher's guarded client, and
// the HTTP handlers, plus the API's OpenAPI document at /v1/openapi.json,
// /metrics, /healthz and /readyz. examples/batchd runs it from flags;
// examples/demo runs it in process.
package daemon

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/batchstore"
	"github.com/siftfetch/batchkit/batchstore/pgstore"
	"github.com/siftfetch/batchkit/examples/internal/fetcher"
)

// Config configures a [Daemon].
type Config struct {
	// DB is the database: an SQLite file, or a postgres:// (or
	// postgresql://) URL, which selects the PostgreSQL store that several
	// daemons can share. Required.
	DB string
	// Synchronous is the SQLite store's durability setting. Defaults to FULL.
	Synchronous batchstore.Synchronous
	// Schema is the PostgreSQL store's schema. Defaults to pgstore's.
	Schema string
	// Keys are the bearer keys callers use. At least one is required.
	Keys []batchhttp.Key
	// Allow lists exact host:port addresses the guard lets through (for
	// local testing); see fetcher.Guard. Webhooks pass the same guard.
	Allow []string
	// WebhookSecret signs the webhook deliveries (Standard Webhooks):
	// "whsec_" and the standard base64 of 24 to 64 random bytes (see
	// batchhttp.NewWebhookSecret). Defaults to one generated at Open, which
	// is logged as generated (never itself) and readable with
	// [Daemon.WebhookSecret]; receivers then cannot verify across a
	// restart, so a deployment sets its own.
	WebhookSecret string
	// Batch is the runner's configuration; its Store, Fetch and Logger are
	// filled in.
	Batch batch.Config
	// MaxResponseBytes caps one fetched body. Defaults to the fetcher's 2 MiB.
	MaxResponseBytes int64
	// MetricsKey, if set, is the bearer key GET /metrics requires.
	MetricsKey string
	// Logger receives the daemon's logs. Defaults to discarding them.
	Logger *slog.Logger
	// Limits are the HTTP server's; the zero value is the defaults.
	Limits Limits
}

// Limits bound what one client can hold of the HTTP server.
type Limits struct {
	// MaxConns caps the connections served at once; more wait to be
	// accepted. Defaults to 256, well below a default limit of 1024 open
	// files, which the store and the fetcher's own connections share.
	MaxConns int
	// HeaderTimeout bounds the read of a request's headers. Defaults to 5s.
	HeaderTimeout time.Duration
	// MaxHeaderBytes caps a request's headers: the API needs a few hundred
	// bytes. Defaults to 8 KiB.
	MaxHeaderBytes int
	// ReadTimeout bounds the read of a whole request. Defaults to 30s.
	ReadTimeout time.Duration
	// BodyTimeout bounds the read of a submit's body (the batch handler's
	// HandlerOpts.BodyTimeout, which replaces ReadTimeout for the body).
	// Defaults to 10s.
	BodyTimeout time.Duration
	// WriteTimeout bounds the writing of an answer; it must outlast the
	// longest long-poll (batch.MaxWait). Defaults to 90s.
	WriteTimeout time.Duration
	// IdleTimeout closes a kept-alive connection that sends nothing.
	// Defaults to 60s.
	IdleTimeout time.Duration
}

func (l Limits) withDefaults() Limits {
	l.MaxConns = cmp.Or(l.MaxConns, 256)
	l.HeaderTimeout = cmp.Or(l.HeaderTimeout, 5*time.Second)
	l.MaxHeaderBytes = cmp.Or(l.MaxHeaderBytes, 8<<10)
	l.ReadTimeout = cmp.Or(l.ReadTimeout, 30*time.Second)
	l.BodyTimeout = cmp.Or(l.BodyTimeout, batchhttp.DefaultBodyTimeout)
	l.WriteTimeout = cmp.Or(l.WriteTimeout, batch.MaxWait+30*time.Second)
	l.IdleTimeout = cmp.Or(l.IdleTimeout, 60*time.Second)
	return l
}

// closingStore is a store the daemon opened, and closes.
type closingStore interface {
	batch.Store
	Close() error
}

// openStore opens the store cfg.DB names.
func openStore(ctx context.Context, cfg Config) (closingStore, error) {
	if IsPostgresURL(cfg.DB) {
		return pgstore.Open(ctx, cfg.DB, pgstore.Options{Schema: cfg.Schema, Logger: cfg.Logger})
	}
	if cfg.DB == "" {
		return nil, errors.New("daemon: no database")
	}
	return batchstore.Open(ctx, cfg.DB, batchstore.Options{Synchronous: cfg.Synchronous})
}

// IsPostgresURL reports whether db names a PostgreSQL database rather than
// an SQLite file.
func IsPostgresURL(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// DescribeDB returns db fit for a log line: a PostgreSQL URL without its
// user information and parameters (a password may be among them).
func DescribeDB(db string) string {
	if !IsPostgresURL(db) {
		return db
	}
	u, err := url.Parse(db)
	if err != nil {
		return "a PostgreSQL database (unparsable URL)"
	}
	return u.Scheme + "://" + u.Host + u.Path
}

// Daemon is a running batch service. Create one with [Open].
type Daemon struct {
	store   closingStore
	limits  Limits
	runner  *batch.Runner
	fetcher *fetcher.Fetcher
	secret  string
	handler http.Handler
	httpSet *metrics.Set
	// httpSeries caches the series of each route and status (routeStatus →
	// httpSeries), so that a request does not format their names.
	httpSeries sync.Map
	log        *slog.Logger
}

// Open opens the store (failing the jobs a previous run left live), starts
// the runner and builds the HTTP handler.
func Open(ctx context.Context, cfg Config) (*Daemon, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if len(cfg.Keys) == 0 {
		return nil, errors.New("daemon: at least one key is required")
	}
	auth, err := batchhttp.NewKeyAuth(cfg.Keys)
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	secret := cfg.WebhookSecret
	if secret == "" {
		if secret, err = batchhttp.NewWebhookSecret(); err != nil {
			return nil, fmt.Errorf("daemon: %w", err)
		}
		cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "no webhook secret configured: generated one for this run; "+
			"receivers cannot verify deliveries after a restart")
	}
	f := fetcher.New(fetcher.Options{Allow: cfg.Allow, MaxBytes: cfg.MaxResponseBytes, Timeout: time.Duration(cfg.Batch.TargetTimeout)})
	// Webhooks go out through the fetcher's guarded client: loopback and
	// private addresses are refused at connect time, as for targets.
	sender, err := batchhttp.NewWebhookSender(f.Client(), secret)
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	store, err := openStore(ctx, cfg)
	if err != nil {
		return nil, err
	}
	bc := cfg.Batch
	bc.Store, bc.Fetch, bc.Logger, bc.Deliver = store, f.Fetch, cfg.Logger, sender.Deliver
	runner, err := batch.New(bc)
	if err != nil {
		store.Close()
		return nil, err
	}
	if err := runner.Start(ctx); err != nil {
		store.Close()
		return nil, err
	}
	d := &Daemon{store: store, limits: cfg.Limits.withDefaults(), runner: runner, fetcher: f, secret: secret, httpSet: metrics.NewSet(), log: cfg.Logger}
	bh, err := batchhttp.NewHandler(runner, &batchhttp.HandlerOpts{
		Authenticate: auth,
		Precheck: func(_ context.Context, _ batch.Caller, rawURL string) error {
			return f.Precheck(rawURL)
		},
		Logger:      cfg.Logger,
		Observe:     d.observe,
		BodyTimeout: d.limits.BodyTimeout,
	})
	if err != nil {
		d.Close(ctx)
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/batch", bh)
	mux.Handle("/v1/batch/", bh)
	// The API's contract, for client generators: without a key, like
	// /healthz, since it holds no caller's data and a generator needs it
	// before anyone has a key. Mounted for every method, so that the
	// handler's own 405 (with Allow: GET, HEAD) answers the others.
	mux.Handle(batchhttp.OpenAPIPath, d.logged(batchhttp.OpenAPIPath, batchhttp.OpenAPIHandler()))
	mux.Handle("GET /metrics", d.logged("/metrics", d.metricsHandler(cfg.MetricsKey)))
	mux.Handle("GET /healthz", d.logged("/healthz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, `{"ok":true}`)
	})))
	mux.Handle("GET /readyz", d.logged("/readyz", http.HandlerFunc(d.readyz)))
	mux.Handle("/", d.logged("other", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		batchhttp.WriteError(w, http.StatusNotFound, batchhttp.CodeNotFound, "not found", "")
	})))
	d.handler = batchhttp.WithRequestID(mux)
	return d, nil
}

// readyTimeout bounds the store read behind /readyz.
const readyTimeout = time.Second

// readyz answers 200 while the runner and its store can serve, and 503
// with Retry-After while they cannot (a store that is closed, locked or
// unreachable), so that a load balancer sends agents elsewhere. /healthz,
// by contrast, only says that the process answers.
func (d *Daemon) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	if err := d.runner.Ready(ctx); err != nil {
		w.Header().Set("Retry-After", "5")
		batchhttp.WriteError(w, http.StatusServiceUnavailable, batchhttp.CodeUnavailable, "not ready", "")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintln(w, `{"ok":true}`)
}

// Handler returns the daemon's HTTP handler.
func (d *Daemon) Handler() http.Handler { return d.handler }

// Runner returns the daemon's runner.
func (d *Daemon) Runner() *batch.Runner { return d.runner }

// WebhookSecret returns the secret that signs the daemon's webhook
// deliveries: Config.WebhookSecret, or the one Open generated.
func (d *Daemon) WebhookSecret() string { return d.secret }

// Close stops the runner (in-flight fetches are cut short; their jobs fail
// as "restart" at the next start) and closes the store.
func (d *Daemon) Close(ctx context.Context) error {
	err := d.runner.Close(ctx)
	d.fetcher.CloseIdleConnections()
	return errors.Join(err, d.store.Close())
}

// closeTimeout bounds how long shutdown waits for the runner's workers.
const closeTimeout = 10 * time.Second

// Serve serves the daemon on ln until ctx is done, then shuts down
// gracefully: it stops accepting, lets in-flight requests finish (for at
// most grace), and closes the runner and the store.
func (d *Daemon) Serve(ctx context.Context, ln net.Listener, grace time.Duration) error {
	l := d.limits
	srv := &http.Server{
		Handler:           d.handler,
		ReadHeaderTimeout: l.HeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(d.log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(limitListener(ln, l.MaxConns)) }()
	var serveErr error
	select {
	case serveErr = <-errc:
	case <-ctx.Done():
	}
	d.log.Info("shutting down")
	// The runner first: that ends long-polls at once (they answer with the
	// job as it is) and cuts in-flight fetches short, so the server's
	// shutdown is not held up by them. Requests still in flight are served
	// from the store, which closes last.
	rctx, rcancel := context.WithTimeout(context.Background(), closeTimeout)
	defer rcancel()
	runErr := d.runner.Close(rctx)
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	shutErr := srv.Shutdown(sctx)
	d.fetcher.CloseIdleConnections()
	closeErr := errors.Join(runErr, d.store.Close())
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return errors.Join(serveErr, shutErr, closeErr)
}

// observe counts requests by fixed route label and status.
func (d *Daemon) observe(route string, status int, dur time.Duration) {
	m, ok := d.httpSeries.Load(routeStatus{route, status})
	if !ok { // the first request of its route and status: name the series once
		m, _ = d.httpSeries.LoadOrStore(routeStatus{route, status}, httpSeries{
			requests: d.httpSet.GetOrCreateCounter(fmt.Sprintf(`batchd_http_requests_total{route=%q,status="%d"}`, route, status)),
			seconds:  d.httpSet.GetOrCreatePrometheusHistogram(fmt.Sprintf(`batchd_http_request_seconds{route=%q}`, route)),
		})
	}
	s := m.(httpSeries)
	s.requests.Inc()
	s.seconds.Update(dur.Seconds())
}

// routeStatus keys the HTTP series of a route and an answer's status.
type routeStatus struct {
	route  string
	status int
}

// httpSeries are the series one request of a route and status updates.
type httpSeries struct {
	requests *metrics.Counter
	seconds  *metrics.PrometheusHistogram
}

// logged logs one line per request of the non-batch routes (the batch
// handler logs its own) and observes it.
func (d *Daemon) logged(route string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		d.observe(route, sw.status, time.Since(start))
		d.log.LogAttrs(r.Context(), slog.LevelDebug, "request",
			slog.String("method", r.Method), slog.String("route", route), slog.Int("status", sw.status),
			slog.String("request_id", w.Header().Get(batchhttp.RequestIDHeader)), slog.Duration("duration", time.Since(start)))
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// metricsHandler writes the runner's set, the HTTP set and the Go process
// metrics as Prometheus text, with # HELP and # TYPE lines.
func (d *Daemon) metricsHandler(key string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if key != "" {
			got, ok := bearer(r)
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(key)) != 1 {
				w.Header().Set("WWW-Authenticate", "Bearer")
				batchhttp.WriteError(w, http.StatusUnauthorized, batchhttp.CodeUnauthorized, "unauthorized", "")
				return
			}
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		if err := writeMetrics(w, d.runner.Metrics(), d.httpSet); err != nil {
			d.log.Warn("write metrics", slog.String("err", err.Error()))
		}
	})
}

func bearer(r *http.Request) (string, bool) {
	const prefix = "Bearer "
	h := r.Header.Get("Authorization")
	if len(h) <= len(prefix) || h[:len(prefix)] != prefix {
		return "", false
	}
	return h[len(prefix):], true
}

// NewSecret returns a random bearer secret.
func NewSecret() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
