// Command embed is a host that embeds batchkit as sift does, on exported
// packages only: its own auth middleware and GET /v1/fetch beside the batch
// API, the MCP server at /mcp (batchmcp, for agents, behind the same
// middleware), /readyz and /metrics, from one TOML file (-config, see
// embed.toml).
package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/VictoriaMetrics/metrics"
	"github.com/pelletier/go-toml/v2"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/batchhttp/batchserver"
	"github.com/siftfetch/batchkit/batchmcp"
	"github.com/siftfetch/batchkit/batchnet"
	"github.com/siftfetch/batchkit/batchstore"
)

// config is the host's configuration file; [batch] is batch.Config.
type config struct {
	Server struct{ Addr, DB string }
	Auth   struct {
		KeysFile string `toml:"keys_file"`
	} // NAME=SECRET lines
	Fetch struct{ Allow []string } // HOST:PORT the guard lets through
	Batch batch.Config
}

func main() {
	path := flag.String("config", "embed.toml", "the TOML configuration `file`")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, *path, log); err != nil {
		log.Error("embed stopped", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, path string, log *slog.Logger) error {
	var cfg config
	b, err := os.ReadFile(path)
	if err == nil {
		err = toml.NewDecoder(bytes.NewReader(b)).DisallowUnknownFields().Decode(&cfg)
	}
	if err != nil {
		return err
	}
	keys, err := batchserver.ReadKeyFile(cfg.Auth.KeysFile) // refused if others can read it
	if err != nil {
		return err
	}
	auth, err := batchserver.NewKeyAuth(keys)
	if err != nil {
		return err
	}
	client, err := batchnet.NewClient(batchnet.ClientConfig{Allow: cfg.Fetch.Allow})
	if err != nil {
		return err
	}
	m, err := batchserver.NewMetrics(batchserver.MetricsConfig{Prefix: "embed", Authenticate: auth})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cmp.Or(cfg.Server.Addr, "127.0.0.1:8080"))
	if err != nil {
		return err
	}
	defer ln.Close() // for an error before Serve, which closes it itself
	store, err := batchstore.Open(ctx, cmp.Or(cfg.Server.DB, "embed.db"), batchstore.Config{})
	if err != nil {
		return err
	}
	bc := cfg.Batch
	bc.Store, bc.Fetch, bc.Logger = store, fetcher(client), log
	runner, err := batch.New(bc)
	var api *batchhttp.Handler
	if err == nil {
		api, err = batchhttp.NewHandler(runner, &batchhttp.HandlerConfig{
			Authenticate: callerOf, Precheck: client.Guard().PrecheckFunc, Logger: log, Observe: m.Observe,
		})
	}
	// The MCP server: the same callers, jobs and submit checks as the API,
	// its series beside the runner's.
	var agents *batchmcp.Handler
	mcpMetrics, mcpPrefix := metrics.NewSet(), cmp.Or(bc.MetricsPrefix, batch.DefaultMetricsPrefix)
	if err == nil {
		agents, err = batchmcp.New(batchmcp.Config{
			Runner: runner, Authenticate: callerOf, Precheck: client.Guard().PrecheckFunc,
			Logger: log, Metrics: mcpMetrics, MetricsPrefix: mcpPrefix,
		})
	}
	if err == nil {
		err = runner.Start(ctx) // fails the jobs a previous run left live
	}
	if err != nil {
		return errors.Join(err, store.Close())
	}
	m.Add(runner.Metrics(), runner.MetricsHelp())
	m.Add(mcpMetrics, agents.MetricsHelp())
	v1 := http.NewServeMux() // the routes behind the host's key check
	api.Mount(v1)
	v1.Handle("GET /v1/fetch", batchhttp.Instrument("/v1/fetch", fetchPage(bc.Fetch, fetchesPerCaller), m.Observe, log))
	mux := http.NewServeMux()
	mux.Handle("/v1/", withCaller(auth, v1))
	mux.Handle(batchmcp.Path, batchhttp.Instrument(batchmcp.Path, withCaller(auth, agents), m.Observe, log))
	mux.Handle("GET /metrics", batchhttp.Instrument("/metrics", m, m.Observe, log))
	mux.Handle("GET /readyz", batchhttp.Instrument("/readyz", batchserver.ReadyHandler(runner), m.Observe, log))
	log.Info("embed serving", "addr", ln.Addr().String()) // then, once ctx ends: runner, requests, store
	return batchserver.Serve(ctx, ln, batchserver.ServerConfig{Handler: mux, Runner: runner, Logger: log, AfterShutdown: store.Close})
}

type callerKey struct{}

// withCaller is the host's auth middleware: the caller goes in the context.
// Serve wraps the mux in batchhttp.CloseRefused, so that a request this
// refuses cannot hold its connection with a body it never sends; a host
// that runs its own http.Server wraps its mux in CloseRefused itself.
func withCaller(auth batchhttp.CallerFunc, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := auth(w, r); ok {
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
		}
	})
}

// callerOf is the batch API's Authenticate: the caller withCaller found.
func callerOf(w http.ResponseWriter, r *http.Request) (batch.Caller, bool) {
	c, ok := r.Context().Value(callerKey{}).(batch.Caller)
	if !ok {
		batchhttp.WriteError(w, http.StatusUnauthorized, batchhttp.CodeUnauthorized, "unauthorized", "")
	}
	return c, ok
}

// fetcher fetches one page, at most 1 MiB, through the guarded client.
func fetcher(client *batchnet.Client) batch.FetchFunc {
	return func(ctx context.Context, _ batch.Caller, t batch.Target) (batch.Result, error) {
		resp, err := client.Get(ctx, t.URL) // its errors hold no URL and carry an outcome
		if err != nil {
			return batch.Result{}, err
		}
		defer resp.Body.Close()
		if err := batchnet.ResponseError(resp); err != nil { // a 429 or 503 may ask the runner to wait
			return batch.Result{}, err
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		meta := map[string]any{"status": resp.StatusCode, "content_type": resp.Header.Get("Content-Type")}
		return batch.Result{Content: string(body), Meta: meta}, err
	}
}

// fetchesPerCaller caps one caller's /v1/fetch requests in flight, so
// that one caller's slow pages cannot hold every connection and fetch.
const fetchesPerCaller = 2

// fetchPage serves GET /v1/fetch?url=…: one page at once, through fetch,
// at most perCaller at a time for one caller (429 fetch_busy beyond).
func fetchPage(fetch batch.FetchFunc, perCaller int) http.Handler {
	var (
		mu       sync.Mutex
		inFlight = map[string]int{}
	)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		caller := r.Context().Value(callerKey{}).(batch.Caller)
		mu.Lock()
		if inFlight[caller.Name] >= perCaller {
			mu.Unlock()
			w.Header().Set("Retry-After", "1")
			batchhttp.WriteError(w, http.StatusTooManyRequests, "fetch_busy", "too many fetches of yours in flight", "wait for one to finish")
			return
		}
		inFlight[caller.Name]++
		mu.Unlock()
		defer func() {
			mu.Lock()
			if inFlight[caller.Name]--; inFlight[caller.Name] == 0 {
				delete(inFlight, caller.Name)
			}
			mu.Unlock()
		}()
		res, err := fetch(r.Context(), caller, batch.Target{URL: r.URL.Query().Get("url")})
		if _, blocked := errors.AsType[*batchnet.BlockedError](err); blocked {
			batchhttp.WriteError(w, http.StatusUnprocessableEntity, batchhttp.CodeBlocked, err.Error(), "")
		} else if err != nil {
			batchhttp.WriteError(w, http.StatusBadGateway, "fetch_failed", err.Error(), "")
		} else {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			io.WriteString(w, res.Content)
		}
	})
}
