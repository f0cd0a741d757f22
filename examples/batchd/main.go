// Command batchd is an example batch daemon: the batch API on the embedded
// SQLite store, with a real web fetcher behind an SSRF guard.
//
//	go run ./examples/batchd [flags]
//
// With no -key it generates one key and says how to pass keys (keys come
// from -key, -key-file or $BATCHD_KEYS). Completion webhooks are signed
// with each caller's own secret, derived from the master secret of
// -webhook-secret-file or $BATCHD_WEBHOOK_SECRET (whsec_…); "batchd
// -print-webhook-secret NAME" prints caller NAME's, for the operator to
// hand it, and exits. Without a master secret it generates one for the run
// and logs that it did. A generated key or secret is printed once on a
// terminal, and otherwise (stdout a log) written to a file only its owner
// can read, -generated-file, whose name is printed instead. It serves
// /v1/batch, GET /v1/openapi.json, GET /metrics, GET /healthz and GET
// /readyz, and the MCP server at /mcp (package batchmcp: the batch tools
// for agents, under the same keys as /v1/batch; -mcp=false turns it off),
// logs to stderr (a line per
// request at -log-level debug; never a target URL), and shuts down
// gracefully on SIGINT or SIGTERM. With $OTEL_EXPORTER_OTLP_ENDPOINT (or
// $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) set it exports each job's spans over
// OTLP/HTTP (see Traces in docs/operations.md).
//
// With -admin-key-file or $BATCHD_ADMIN_KEY it also serves the read-only
// operator console (package batchconsole) at /console, which requires that
// key and no caller's.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchobserve"
	"github.com/siftfetch/batchkit/batchcli"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/batchhttp/batchserver"
	"github.com/siftfetch/batchkit/batchmcp"
	"github.com/siftfetch/batchkit/batchotel"
	"github.com/siftfetch/batchkit/batchstore"
	"github.com/siftfetch/batchkit/examples/internal/daemon"
	"github.com/siftfetch/batchkit/examples/internal/pgopen"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes: 0 after a graceful stop (or -h, -version), 1 when the
// daemon could not start or serve (a port in use, a locked database, a
// key file others can read), 2 for a wrong command line.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// usageError is a wrong command line: exit code 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return &usageError{fmt.Errorf(format, args...)} }

// run runs the daemon until ctx ends and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := serve(ctx, args, stdout, stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp), errors.Is(err, errVersion), errors.Is(err, errSecretPrinted):
		return exitOK
	case errors.As(err, new(*usageError)):
		fmt.Fprintf(stderr, "batchd: %v\nRun \"batchd -h\" for the flags.\n", err)
		return exitUsage
	}
	fmt.Fprintf(stderr, "batchd: %v\n", err)
	return exitError
}

// errVersion ends a run that printed the version.
var errVersion = errors.New("version printed")

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// options are batchd's flags.
type options struct {
	addr, db, metricsKey, sync string
	keyFile, logLevel, schema  string
	webhookSecretFile          string
	printWebhookSecret         string
	metricsKeyFile             string
	adminKeyFile               string
	generatedFile              string
	webhookLegacySignature     bool
	mcp                        bool
	robots                     bool
	version                    bool
	keys, allow                listFlag
	maxConns                   int
	batch                      batch.Config
}

// keysEnv holds keys as -key takes them, separated by white space or
// commas: the way to pass them without a command line that every local
// user can read in /proc.
const keysEnv = "BATCHD_KEYS"

// webhookSecretEnv holds the webhook secret, as -webhook-secret-file does.
const webhookSecretEnv = "BATCHD_WEBHOOK_SECRET"

// metricsKeyEnv holds the metrics key, as -metrics-key-file does.
const metricsKeyEnv = "BATCHD_METRICS_KEY"

// parseFlags parses batchd's command line. -h prints the flags on stdout
// and returns flag.ErrHelp; a wrong command line is a *usageError, with
// the flags on stderr.
func parseFlags(args []string, stdout, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("batchd", flag.ContinueOnError)
	var usage bytes.Buffer
	fs.SetOutput(&usage)
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "listen `address`")
	fs.StringVar(&o.db, "db", "batchkit.db", "SQLite database `file`, or a postgres:// URL: the PostgreSQL store, which several batchd can share (give its password in $PGPASSWORD or ~/.pgpass, not in the URL)")
	fs.StringVar(&o.schema, "pg-schema", "", "PostgreSQL `schema` of the store (default batchkit)")
	fs.Var(&o.keys, "key", "bearer key `NAME=SECRET` (repeatable; NAME=SECRET:restricted marks a restricted caller); visible to local users in the process list: prefer -key-file or $"+keysEnv)
	fs.StringVar(&o.keyFile, "key-file", "", "read bearer keys from `file`, one NAME=SECRET[:restricted] per line (# comments)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log `level`: debug (a line per request), info, warn or error")
	fs.IntVar(&o.maxConns, "max-conns", 256, "connections served at once")
	fs.Var(&o.allow, "allow", "exempt exactly this `HOST:PORT` from the SSRF guard, for local testing (repeatable)")
	fs.StringVar(&o.metricsKey, "metrics-key", "", "bearer `key` GET /metrics requires (default: none); visible to local users in the process list: prefer -metrics-key-file or $"+metricsKeyEnv)
	fs.StringVar(&o.metricsKeyFile, "metrics-key-file", "", "read the bearer key GET /metrics requires from `file` (one line, chmod 600)")
	fs.StringVar(&o.adminKeyFile, "admin-key-file", "", "turn on the operator console at /console, which requires the key in `file` (one line, chmod 600); or set $"+adminKeyEnv)
	fs.StringVar(&o.generatedFile, "generated-file", "", "when stdout is not a terminal, write a generated key or webhook secret to `file` (mode 0600) rather than print it (default: batchd-generated.env beside the SQLite database, or in the working directory)")
	fs.BoolVar(&o.robots, "robots", true, "honour each host's robots.txt: a target it disallows ends with outcome robots, unfetched, and its Crawl-delay spaces the fetch starts to that host; -robots=false turns it off")
	fs.BoolVar(&o.mcp, "mcp", true, "serve the MCP server (the batch tools for agents, over streamable HTTP) at /mcp, under the callers' keys; -mcp=false turns it off")
	fs.StringVar(&o.sync, "synchronous", "FULL", "SQLite synchronous: FULL (survives power loss) or NORMAL")
	b := &o.batch
	// durationVar is fs.DurationVar for a batch.Duration.
	durationVar := func(p *batch.Duration, name string, value time.Duration, usage string) {
		*p = batch.Duration(value)
		fs.Var(p, name, usage)
	}
	fs.IntVar(&b.Workers, "workers", batch.DefaultWorkers, "fetches at once (and jobs draining at once, unless -drains says more)")
	fs.IntVar(&b.Drains, "drains", 0, "jobs draining at once: -workers of them fetch while the others store a target or claim a job (0: -workers)")
	fs.IntVar(&b.TargetsPerJob, "targets-per-job", batch.DefaultTargetsPerJob, "targets in one job")
	fs.IntVar(&b.JobsPerCaller, "jobs-per-caller", batch.DefaultJobsPerCaller, "live jobs per caller")
	fs.IntVar(&b.JobsTotal, "jobs-total", batch.DefaultJobsTotal, "live jobs in all")
	durationVar(&b.TTL, "ttl", batch.DefaultTTL, "how long a finished job is kept after its last use")
	fs.Int64Var(&b.MaxBytes, "max-bytes", batch.DefaultMaxBytes, "byte budget of stored results")
	durationVar(&b.TargetTimeout, "target-timeout", batch.DefaultTargetTimeout, "deadline of one fetch")
	durationVar(&b.MaxDeadline, "max-deadline", 0, "cap on how far from its submit a job's \"deadline\" may be (over it: 422 deadline_too_far), and the deadline of a submit that gives none; 0 for no cap and no default deadline")
	fs.IntVar(&b.MaxResultBytes, "max-result-bytes", batch.DefaultMaxResultBytes, "largest stored result")
	durationVar(&b.BusyWait, "busy-wait", batch.DefaultBusyWait, "longest wait for a busy fetcher, or for a host that keeps answering 429/503 with Retry-After")
	fs.IntVar(&b.FetchesPerHost, "fetches-per-host", batch.DefaultFetchesPerHost, "fetches to one host (name and port) at once, on every node sharing the database; -1 for no cap")
	durationVar(&b.HostInterval, "host-interval", 0, "least time between two fetch starts to one host, on every node (a robots.txt Crawl-delay raises it for its host)")
	durationVar(&b.MaxRetryAfter, "max-retry-after", batch.DefaultMaxRetryAfter, "cap on how long an upstream's 429/503 Retry-After holds its host back")
	durationVar(&b.StoreWait, "store-wait", batch.DefaultStoreWait, "longest retry of a result the store cannot take before its target fails")
	fs.StringVar(&b.MetricsPrefix, "metrics-prefix", batch.DefaultMetricsPrefix, "metric name prefix")
	fs.StringVar(&b.RunnerID, "runner-id", "", "stable runner `id` of this node (default: random per start)")
	durationVar(&b.HeartbeatInterval, "heartbeat-interval", batch.DefaultHeartbeatInterval, "how often the runner records that it is alive")
	durationVar(&b.StaleAfter, "stale-after", batch.DefaultStaleAfter, "how long without a heartbeat before a runner's jobs fail as restart (with -resume: are handed on)")
	fs.BoolVar(&b.Resume, "resume", false, "hand jobs on instead of failing them as restart when a node stops, restarts or dies: they continue under the same id on any node; a target in flight ends interrupted")
	fs.BoolVar(&b.RepeatInterrupted, "repeat-interrupted", false, "with -resume: fetch a target in flight when its node stopped again, instead of ending it interrupted (only if the upstreams' fetches are safe to repeat)")
	durationVar(&b.CloseGrace, "close-grace", batch.DefaultCloseGrace, "with -resume: how long a shutdown lets the fetches in flight finish")
	durationVar(&b.SweepInterval, "sweep-interval", batch.DefaultSweepInterval, "how often expired jobs are swept and the byte budget enforced")
	durationVar(&b.PollInterval, "poll-interval", batch.DefaultPollInterval, "how often idle workers look for jobs other nodes accepted, and long-polls re-read the store")
	fs.StringVar(&o.webhookSecretFile, "webhook-secret-file", "", "read the webhook signing secret (whsec_…) from `file`; or set $"+webhookSecretEnv+" (default: one generated per start)")
	fs.BoolVar(&o.webhookLegacySignature, "webhook-legacy-signature", false, "during an upgrade from a build before per-caller webhook secrets: sign each delivery with the master secret too, so that receivers still holding it verify (turn off once every receiver has its caller's secret; see docs/upgrading.md)")
	durationVar(&b.WebhookTimeout, "webhook-timeout", batch.DefaultWebhookTimeout, "deadline of one webhook delivery attempt")
	durationVar(&b.WebhookBackoff, "webhook-backoff", batch.DefaultWebhookBackoff, "wait after a webhook's first failed attempt (doubling, up to an hour)")
	durationVar(&b.WebhookRetryFor, "webhook-retry-for", batch.DefaultWebhookRetryFor, "how long after a job's end its webhook is retried before it is dropped")
	fs.IntVar(&b.WebhookWorkers, "webhook-workers", batch.DefaultWebhookWorkers, "webhook deliveries at once")
	fs.IntVar(&b.WebhookInFlightPerCaller, "webhook-in-flight-per-caller", batch.DefaultWebhookInFlightPerCaller, "one caller's webhook deliveries in flight, on all nodes")
	fs.IntVar(&b.WebhookPendingPerCaller, "webhook-pending-per-caller", batch.DefaultWebhookPendingPerCaller, "one caller's pending webhook events; a submit with a webhook beyond it gets 429 webhooks_busy")
	fs.StringVar(&o.printWebhookSecret, "print-webhook-secret", "", "print the webhook secret of caller `NAME` (derived from the master secret of -webhook-secret-file or $"+webhookSecretEnv+") and exit")
	fs.Usage = func() {
		fmt.Fprintf(&usage, "usage: batchd [flags]\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			stdout.Write(usage.Bytes())
			return o, err
		}
		stderr.Write(usage.Bytes())
		return o, &usageError{err}
	}
	if daemon.IsKeywordDSN(o.db) {
		// Not repeated: it may hold a password.
		return o, usagef("-db looks like a PostgreSQL keyword/value connection string (host=… password=…), " +
			"which batchd does not take: give a postgres:// URL, and the password in $PGPASSWORD or ~/.pgpass")
	}
	if fs.NArg() > 0 {
		if strings.Contains(fs.Arg(0), "=") {
			// Perhaps the rest of a secret the shell split: not repeated.
			return o, usagef("unexpected argument %d, with a '=' (not shown)", len(args)-fs.NArg()+1)
		}
		return o, usagef("unexpected argument %q", fs.Arg(0))
	}
	return o, nil
}

// warnCommandLine warns, on stderr, about secrets given on the command
// line, which every local user can read in /proc/PID/cmdline; it never
// repeats them.
func warnCommandLine(o options, stderr io.Writer) {
	if len(o.keys) > 0 {
		fmt.Fprintf(stderr, "batchd: warning: -key puts a secret in the process list, where local users can read it; use -key-file or $%s\n", keysEnv)
	}
	if o.metricsKey != "" {
		fmt.Fprintf(stderr, "batchd: warning: -metrics-key puts a secret in the process list, where local users can read it; use -metrics-key-file or $%s\n", metricsKeyEnv)
	}
	if daemon.DBHasPassword(o.db) {
		fmt.Fprintf(stderr, "batchd: warning: -db holds a password, which puts it in the process list, where local users can read it; give it in $PGPASSWORD or ~/.pgpass\n")
	}
}

// loadKeys gathers the keys of -key, $BATCHD_KEYS and -key-file (which
// must be readable by its owner only).
func loadKeys(o options) ([]batchserver.Key, error) {
	specs := []string(o.keys)
	if env := os.Getenv(keysEnv); env != "" {
		specs = append(specs, strings.FieldsFunc(env, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })...)
	}
	var keys []batchserver.Key
	for _, s := range specs {
		k, err := batchserver.ParseKey(s)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	if o.keyFile != "" {
		fromFile, err := batchserver.ReadKeyFile(o.keyFile)
		if err != nil {
			return nil, fmt.Errorf("-key-file: %w", err)
		}
		keys = append(keys, fromFile...)
	}
	return keys, nil
}

// loadWebhookSecret returns the secret of -webhook-secret-file (which
// must be readable by its owner only) or $BATCHD_WEBHOOK_SECRET, or "" for
// none (the daemon then generates one).
func loadWebhookSecret(o options) (string, error) {
	if o.webhookSecretFile == "" {
		return strings.TrimSpace(os.Getenv(webhookSecretEnv)), nil
	}
	s, err := batchserver.ReadSecretFile(o.webhookSecretFile)
	if err != nil {
		return "", fmt.Errorf("-webhook-secret-file: %w", err)
	}
	return s, nil
}

// errSecretPrinted ends a run that printed a caller's webhook secret.
var errSecretPrinted = errors.New("webhook secret printed")

// printCallerSecret prints caller's webhook secret under the master secret
// and returns errSecretPrinted.
func printCallerSecret(stdout io.Writer, master, caller string) error {
	if master == "" {
		return usagef("-print-webhook-secret needs the master secret in -webhook-secret-file or $%s "+
			"(a generated one changes at every start)", webhookSecretEnv)
	}
	s, err := batchhttp.CallerWebhookSecret(master, caller)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, s)
	return errSecretPrinted
}

// serve runs the daemon until ctx ends.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stdout, stderr)
	if err != nil {
		return err
	}
	if o.version {
		fmt.Fprintf(stdout, "batchd %s\n", batchcli.Version())
		return errVersion
	}
	warnCommandLine(o, stderr)
	keys, err := loadKeys(o)
	if err != nil {
		return err
	}
	secret, err := loadWebhookSecret(o)
	if err != nil {
		return err
	}
	if o.printWebhookSecret != "" {
		return printCallerSecret(stdout, secret, o.printWebhookSecret)
	}
	if o.webhookLegacySignature && secret == "" {
		// The second signature is for receivers holding the master secret
		// the previous build signed with: a generated one nobody holds.
		return usagef("-webhook-legacy-signature needs the master secret the previous build signed with, "+
			"in -webhook-secret-file or $%s", webhookSecretEnv)
	}
	metricsKey, err := loadMetricsKey(o)
	if err != nil {
		return err
	}
	adminKey, err := loadAdminKey(o)
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return usagef("-log-level %q: want debug, info, warn or error", o.logLevel)
	}
	generated := ""
	if len(keys) == 0 {
		secret, err := daemon.NewSecret()
		if err != nil {
			return err
		}
		keys = append(keys, batchserver.Key{Name: "local", Secret: secret})
		generated = secret
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	tp, err := tracerProviderFromEnv(ctx, log)
	if err != nil {
		return err
	}
	var ( // none: no traces
		observer   batchobserve.Observer
		middleware func(http.Handler) http.Handler
	)
	if tp != nil {
		observer = batchotel.New(batchotel.Config{TracerProvider: tp})
		middleware = batchotel.Extract // no server spans: a host's HTTP middleware makes those
		defer func() {                 // after the daemon: exports what it buffered
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := tp.Shutdown(sctx); err != nil {
				log.LogAttrs(sctx, slog.LevelWarn, "trace export at shutdown failed", slog.String("err", err.Error()))
			}
		}()
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	d, err := daemon.Open(ctx, daemon.Config{
		DB:            o.db,
		Schema:        o.schema,
		Synchronous:   batchstore.Synchronous(strings.ToUpper(o.sync)),
		Keys:          keys,
		Allow:         o.allow,
		Batch:         o.batch,
		WebhookSecret: secret,
		MetricsKey:    metricsKey,
		AdminKey:      adminKey,
		NoMCP:         !o.mcp,
		NoRobots:      !o.robots,
		Logger:        log,
		Limits:        batchserver.Limits{MaxConns: o.maxConns},
		OpenPostgres:  pgopen.Open,
		Observer:      observer,
		Middleware:    middleware,

		WebhookLegacySignature: o.webhookLegacySignature,
	})
	if err != nil {
		ln.Close()
		return err
	}
	server := "http://" + ln.Addr().String()
	fmt.Fprintf(stdout, "batchd: serving the batch API on %s (database %s)\n", server, daemon.DescribeDB(o.db))
	if err := showGenerated(o, stdout, server, generated, secret == "", d.WebhookSecret()); err != nil {
		d.Close(ctx)
		ln.Close()
		return err
	}
	if adminKey != "" {
		fmt.Fprintf(stdout, "batchd: operator console on %s/console\n", server)
	}
	if o.mcp {
		fmt.Fprintf(stdout, "batchd: MCP server on %s%s (streamable HTTP, with the same bearer keys)\n", server, batchmcp.Path)
	}
	fmt.Fprintf(stdout, "batchd: try: go run ./examples/batch submit examples/targets.json   (or curl -H \"Authorization: Bearer $BATCH_KEY\" %s/v1/batch)\n", server)
	return d.Serve(ctx, ln, 30*time.Second)
}
