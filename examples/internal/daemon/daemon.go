// Package daemon wires the example programs' batch service from the host
// kit: the store (SQLite, or PostgreSQL for several daemons on one
// database), the guarded web fetcher, the runner, completion webhooks
// signed with each caller's own secret (derived from the deployment's
// master secret) and sent through the fetcher's
// guarded client, and the HTTP handlers (batchhttp's Handler, readiness,
// metrics and server), plus the API's OpenAPI document at
// /v1/openapi.json, /metrics, /healthz and /readyz, and the MCP server
// (batchmcp) at /mcp, for agents, under the same callers' keys. What is
// left here is what only batchd and the demo want: -db's two kinds of database, a
// metrics key of its own and a -allow hint. examples/batchd runs it from
// flags; examples/demo runs it in process.
package daemon

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchobserve"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batchconsole"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/batchhttp/batchserver"
	"github.com/siftfetch/batchkit/batchmcp"
	"github.com/siftfetch/batchkit/batchnet"
	"github.com/siftfetch/batchkit/batchstore"
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
	Keys []batchserver.Key
	// Allow lists exact host:port addresses the guard lets through (for
	// local testing); see batchnet.Guard. Webhooks pass the same guard.
	Allow []string
	// WebhookSecret is the master secret of the webhook deliveries
	// (Standard Webhooks): "whsec_" and the standard base64 of 24 to 64
	// random bytes (see batchhttp.NewWebhookSecret). No delivery is signed
	// with it: each caller's are signed with that caller's own secret,
	// derived from it (batchhttp.CallerWebhookSecret, and
	// [Daemon.CallerWebhookSecret]), which the operator hands the caller.
	// Defaults to one generated at Open, which is logged as generated
	// (never itself) and readable with [Daemon.WebhookSecret]; receivers
	// then cannot verify across a restart, so a deployment sets its own.
	WebhookSecret string
	// WebhookLegacySignature is the transition setting of an upgrade from
	// a build that signed every delivery with the master secret itself
	// (before per-caller secrets): each delivery also carries a signature
	// under WebhookSecret, so that a receiver still holding it verifies
	// every delivery as one holding its caller's secret does (see
	// batchhttp.WebhookLegacySignature and docs/upgrading.md). Turn it off
	// once every receiver verifies with its caller's secret.
	WebhookLegacySignature bool
	// Batch is the runner's configuration; its Store, Fetch and Logger are
	// filled in.
	Batch batch.Config
	// MaxResponseBytes caps one fetched body. Defaults to the fetcher's 2 MiB.
	MaxResponseBytes int64
	// UserAgent is the User-Agent header of target fetches. Defaults to
	// fetcher.DefaultUserAgent.
	UserAgent string
	// MetricsKey, if set, is the bearer key GET /metrics requires.
	MetricsKey string
	// NoMCP turns off the MCP server at /mcp (batchmcp), which otherwise
	// serves the callers of Keys as the same callers as /v1/batch: the
	// same jobs, caps and redaction. Defaults to false: served.
	NoMCP bool
	// NoRobots turns off the robots.txt check (batchrobots): with it on,
	// a target its host's robots.txt disallows ends with outcome robots,
	// unfetched, and a Crawl-delay spaces the fetch starts to its host.
	// Defaults to false: checked.
	NoRobots bool
	// AdminKey, if set, turns on the operator console at /console
	// (batchconsole), which requires it. Callers' keys never open it.
	AdminKey string
	// Logger receives the daemon's logs. Defaults to discarding them.
	Logger *slog.Logger
	// Limits are the HTTP server's; the zero value is the defaults.
	Limits batchserver.Limits
	// BodyTimeout bounds the read of a submit's body. Defaults to
	// batchhttp.DefaultBodyTimeout.
	BodyTimeout time.Duration
	// OpenPostgres opens the store when DB is a PostgreSQL URL (see
	// [IsPostgresURL]); nil refuses one. batchd sets it, so that a program
	// that runs the daemon on SQLite alone (the demo) compiles no
	// PostgreSQL driver.
	OpenPostgres func(ctx context.Context, db, schema string, log *slog.Logger) (Store, error)
	// Observer, if set, traces each job (batchd: batchotel's). Defaults to
	// nil: no traces.
	Observer batchobserve.Observer
	// Middleware, if set, wraps the daemon's whole handler (batchd:
	// batchotel.Extract, so that a request's traceparent reaches the
	// Observer). Defaults to none.
	Middleware func(http.Handler) http.Handler
}

// Store is a store the daemon opened, and closes.
type Store interface {
	batchdriver.Store
	Close() error
}

// openStore opens the store cfg.DB names.
func openStore(ctx context.Context, cfg Config) (Store, error) {
	if IsPostgresURL(cfg.DB) {
		if cfg.OpenPostgres == nil {
			return nil, errors.New("daemon: a PostgreSQL database needs Config.OpenPostgres")
		}
		return cfg.OpenPostgres(ctx, cfg.DB, cfg.Schema, cfg.Logger)
	}
	if cfg.DB == "" {
		return nil, errors.New("daemon: no database")
	}
	return batchstore.Open(ctx, cfg.DB, batchstore.Config{Synchronous: cfg.Synchronous})
}

// IsPostgresURL reports whether db names a PostgreSQL database rather than
// an SQLite file.
func IsPostgresURL(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// DescribeDB returns db fit for a log line: a PostgreSQL URL without its
// user information and parameters (a password may be among them), and a
// libpq keyword/value string not at all. The user information ends at the
// last '@', so a password with an unescaped '@', '/', '?' or '#' is cut off
// whole.
func DescribeDB(db string) string {
	if IsKeywordDSN(db) {
		return "a PostgreSQL keyword/value connection string (not shown)"
	}
	if !IsPostgresURL(db) {
		return db
	}
	scheme, rest, _ := strings.Cut(db, "://")
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		rest = rest[i+1:]
	}
	rest, _, _ = strings.Cut(rest, "?")
	rest, _, _ = strings.Cut(rest, "#")
	u, err := url.Parse(scheme + "://" + rest)
	if err != nil {
		return "a PostgreSQL database (unparsable URL)"
	}
	return u.Scheme + "://" + u.Host + u.Path
}

// DBHasPassword reports whether a PostgreSQL URL holds a password: in its
// user information (up to the last '@') or as a password parameter.
func DBHasPassword(db string) bool {
	if !IsPostgresURL(db) {
		return false
	}
	_, rest, _ := strings.Cut(db, "://")
	if i := strings.LastIndexByte(rest, '@'); i >= 0 && strings.Contains(rest[:i], ":") {
		return true
	}
	_, query, _ := strings.Cut(rest, "?")
	return strings.HasPrefix(query, "password=") || strings.Contains(query, "&password=")
}

// keywordDSN matches the start of a libpq keyword/value connection string
// ("host=… password=…").
var keywordDSN = regexp.MustCompile(`^\s*[A-Za-z_]+\s*=`)

// IsKeywordDSN reports whether db looks like a libpq keyword/value
// connection string, which the daemon does not take (it would become an
// SQLite file name): a caller refuses it without repeating it.
func IsKeywordDSN(db string) bool { return keywordDSN.MatchString(db) }

// Daemon is a running batch service. Create one with [Open].
type Daemon struct {
	store   Store
	limits  batchserver.Limits
	runner  *batch.Runner
	fetcher *fetcher.Fetcher
	secret  string
	sender  *batchhttp.WebhookSender
	handler http.Handler
	log     *slog.Logger
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
	auth, err := batchserver.NewKeyAuth(cfg.Keys)
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	var metricsAuth batchhttp.CallerFunc
	if cfg.MetricsKey != "" {
		if metricsAuth, err = batchserver.NewKeyAuth([]batchserver.Key{{Name: "metrics", Secret: cfg.MetricsKey}}); err != nil {
			return nil, fmt.Errorf("daemon: %w", err)
		}
	}
	m, err := batchserver.NewMetrics(batchserver.MetricsConfig{Prefix: "batchd", Authenticate: metricsAuth})
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
	f := fetcher.New(fetcher.Options{Allow: cfg.Allow, MaxBytes: cfg.MaxResponseBytes, Timeout: time.Duration(cfg.Batch.TargetTimeout), UserAgent: cfg.UserAgent})
	// Webhooks go out through the fetcher's guarded client: loopback and
	// private addresses are refused at connect time, as for targets.
	var hookOpts []batchhttp.WebhookOption
	if cfg.WebhookLegacySignature {
		hookOpts = append(hookOpts, batchhttp.WebhookLegacySignature(secret))
		cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "webhook deliveries also carry a signature under the master secret, "+
			"for receivers of the previous build; turn it off once every receiver verifies with its caller's secret")
	}
	sender, err := batchhttp.NewWebhookSender(f.Client(), secret, hookOpts...)
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	store, err := openStore(ctx, cfg)
	if err != nil {
		return nil, err
	}
	bc := cfg.Batch
	bc.Store, bc.Fetch, bc.Logger, bc.Deliver = store, f.Fetch, cfg.Logger, sender.Deliver
	bc.Options = batchsift.Options // sift's /v1/fetch fields, flat beside "url"
	bc.Observer = cfg.Observer
	if !cfg.NoRobots {
		robots, err := f.Robots(cfg.Logger)
		if err != nil {
			store.Close()
			return nil, fmt.Errorf("daemon: %w", err)
		}
		bc.Robots = robots.Check
	}
	runner, err := batch.New(bc)
	if err != nil {
		store.Close()
		return nil, err
	}
	if err := runner.Start(ctx); err != nil {
		store.Close()
		return nil, err
	}
	m.Add(runner.Metrics(), runner.MetricsHelp())
	d := &Daemon{store: store, limits: cfg.Limits, runner: runner, fetcher: f, secret: secret, sender: sender, log: cfg.Logger}
	precheck := func(_ context.Context, _ batch.Caller, rawURL string) error {
		return allowHint(f.Precheck(rawURL))
	}
	bh, err := batchhttp.NewHandler(runner, &batchhttp.HandlerConfig{
		Authenticate:  auth,
		Precheck:      precheck,
		CheckTarget:   f.CheckTarget, // a grep pattern over the fetcher's limits: 422 invalid_option
		Logger:        cfg.Logger,
		Observe:       m.Observe,
		BodyTimeout:   cfg.BodyTimeout,
		WebhookSecret: sender.CallerSecret, // GET /v1/batch/webhook-secret: the caller's own
	})
	if err != nil {
		d.Close(ctx)
		return nil, err
	}
	mux := http.NewServeMux()
	bh.Mount(mux)
	route := func(label string, h http.Handler) http.Handler {
		return batchhttp.Instrument(label, h, m.Observe, cfg.Logger)
	}
	// The API's contract, for client generators: without a key, like
	// /healthz, since it holds no caller's data and a generator needs it
	// before anyone has a key. Mounted for every method, so that the
	// handler's own 405 (with Allow: GET, HEAD) answers the others.
	mux.Handle(batchhttp.OpenAPIPath, route(batchhttp.OpenAPIPath, batchhttp.OpenAPIHandler(runner.Options())))
	if err := mountConsole(mux, cfg, store, route); err != nil {
		d.Close(ctx)
		return nil, err
	}
	if !cfg.NoMCP {
		if err := mountMCP(mux, cfg, runner, auth, precheck, f.CheckTarget, m, route); err != nil {
			d.Close(ctx)
			return nil, err
		}
	}
	mux.Handle("GET /metrics", route("/metrics", m))
	mux.Handle("GET /healthz", route("/healthz", batchserver.HealthHandler()))
	mux.Handle("GET /readyz", route("/readyz", batchserver.ReadyHandler(runner)))
	mux.Handle("/", route("other", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		batchhttp.WriteError(w, http.StatusNotFound, batchhttp.CodeNotFound, "not found", "")
	})))
	d.handler = mux
	if cfg.Middleware != nil {
		d.handler = cfg.Middleware(mux)
	}
	return d, nil
}

// localReasons are the pre-check's refusals of a URL that a person trying
// the daemon out on their own machine runs into: a local test server.
var localReasons = []string{batchnet.ReasonPort, batchnet.ReasonLoopback, batchnet.ReasonPrivate, batchnet.ReasonLinkLocal}

// allowHint gives a pre-check refusal of a local address the hint of
// batchd's -allow, which exempts exactly one such address.
func allowHint(err error) error {
	be, ok := errors.AsType[*batchnet.BlockedError](err)
	if !ok || !slices.Contains(localReasons, be.Reason) {
		return err
	}
	return batch.NewFetchError(batch.OutcomeBlocked,
		"the server refuses local and private addresses and ports other than 80 and 443; "+
			"to fetch a local test server, start batchd with -allow HOST:PORT", err)
}

// Handler returns the daemon's HTTP handler.
func (d *Daemon) Handler() http.Handler { return d.handler }

// Runner returns the daemon's runner.
func (d *Daemon) Runner() *batch.Runner { return d.runner }

// WebhookSecret returns the master secret of the daemon's webhook
// deliveries: Config.WebhookSecret, or the one Open generated.
func (d *Daemon) WebhookSecret() string { return d.secret }

// CallerWebhookSecret returns the secret that signs the webhook deliveries
// of caller's jobs, the one its receiver verifies with.
func (d *Daemon) CallerWebhookSecret(caller string) string { return d.sender.CallerSecret(caller) }

// Close stops the runner (in-flight fetches are cut short; their jobs fail
// as "restart" at once, or with Batch.Resume are handed on after the
// fetches' grace, Batch.CloseGrace) and closes the store.
func (d *Daemon) Close(ctx context.Context) error {
	err := d.runner.Close(ctx)
	d.fetcher.CloseIdleConnections()
	return errors.Join(err, d.store.Close())
}

// Serve serves the daemon on ln until ctx is done, then shuts down as
// batchserver.Serve does: the runner first, then the requests still in
// flight (for at most grace), then the store.
func (d *Daemon) Serve(ctx context.Context, ln net.Listener, grace time.Duration) error {
	return batchserver.Serve(ctx, ln, batchserver.ServerConfig{
		Handler: d.handler,
		Runner:  d.runner,
		Limits:  d.limits,
		Logger:  d.log,
		Grace:   grace,
		AfterShutdown: func() error {
			d.fetcher.CloseIdleConnections()
			return d.store.Close()
		},
	})
}

// NewSecret returns a random bearer secret.
func NewSecret() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// mountConsole mounts the operator console when cfg has an admin key.
func mountConsole(mux *http.ServeMux, cfg Config, store batchdriver.Store, route func(string, http.Handler) http.Handler) error {
	if cfg.AdminKey == "" {
		return nil
	}
	for _, k := range cfg.Keys {
		if k.Secret == cfg.AdminKey {
			return fmt.Errorf("daemon: the admin key is caller %q's key: the console needs a key of its own", k.Name)
		}
	}
	in, ok := store.(batchdriver.Inspector)
	if !ok {
		return errors.New("daemon: the store has no batch.Inspector: no console")
	}
	c, err := batchconsole.New(batchconsole.Config{
		Store: in, Keys: []string{cfg.AdminKey}, Logger: cfg.Logger,
		TTL: time.Duration(cfg.Batch.TTL), StaleAfter: time.Duration(cfg.Batch.StaleAfter), MaxBytes: cfg.Batch.MaxBytes,
	})
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	h := route(c.Prefix(), c)
	mux.Handle(c.Prefix(), h)
	mux.Handle(c.Prefix()+"/", h)
	return nil
}

// mountMCP mounts the MCP server at /mcp: the callers of /v1/batch, by
// the same keys, with the same submit checks, so that a job is the same
// job on either side. Its series go beside the runner's, under the
// runner's prefix.
func mountMCP(mux *http.ServeMux, cfg Config, runner *batch.Runner, auth batchhttp.CallerFunc,
	precheck batchhttp.PrecheckFunc, check batchhttp.CheckTargetFunc, m *batchserver.Metrics,
	route func(string, http.Handler) http.Handler) error {
	set := metrics.NewSet()
	prefix := cmp.Or(cfg.Batch.MetricsPrefix, batch.DefaultMetricsPrefix)
	h, err := batchmcp.New(batchmcp.Config{
		Runner: runner, Authenticate: auth, Precheck: precheck, CheckTarget: check,
		Logger: cfg.Logger, Metrics: set, MetricsPrefix: prefix,
	})
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	m.Add(set, h.MetricsHelp())
	// For every method: the MCP handler answers GET and DELETE itself
	// (405, as a stateless server does).
	mux.Handle(batchmcp.Path, route(batchmcp.Path, h))
	return nil
}
