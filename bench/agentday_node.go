package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/batchhttp/batchserver"
	"github.com/siftfetch/batchkit/batchstore"
	"github.com/siftfetch/batchkit/batchstore/pgstore"
	"github.com/siftfetch/batchkit/internal/ablation"
)

// The agent day's nodes run in a child process of their own (this binary,
// re-run with -child agentday), so that their CPU time and resident memory
// are theirs alone: the upstream and the agents run in the parent. Each
// node is a runner, its store (or a share of one) and batchhttp's handler
// on a loopback listener, wired as the example daemon wires them.
//
// The child talks to the parent over its standard streams, one line each
// way: it prints its nodes' base URLs when they serve; then "start" and
// "end" mark the measured window (each answered "ok"), "report" prints
// what the window measured, and the end of its input closes everything.

// nodeConfig is the child's configuration, passed as one JSON argument.
type nodeConfig struct {
	Store    string   // storeMemory, storeSQLite or storePostgres
	Sync     string   // batchstore.Synchronous, for SQLite
	Workers  []int    // per node: len(Workers) nodes
	Drains   []int    // per node, as many as Workers
	Dir      string   // where the SQLite file goes
	PGURL    string   // for PostgreSQL
	Schema   string   // the run's schema
	App      string   // application_name of the nodes' connections
	MaxConns int32    // per node's pool
	Upstream []string // the upstream's listeners, "127.0.0.x:port"
	Hosts    int      // virtual hosts, spread over Upstream

	TargetTimeout time.Duration
	JobsPerCaller int
	JobsTotal     int
	Agents        int          // callers, each with a key (agentKey)
	Profile       string       // a CPU profile of the window goes here, if set
	Trace         string       // an execution trace of the window's first traceFor goes here, if set
	Ablate        ablation.Off // the stores' mechanisms switched off
}

// traceFor bounds an execution trace: a few seconds make tens of MB.
const traceFor = 3 * time.Second

const (
	storeMemory   = "memory"
	storeSQLite   = "sqlite"
	storePostgres = "postgres"
)

// agentName and agentKey are agent a's caller name and bearer key.
func agentName(a int) string { return fmt.Sprintf("agent-%d", a) }
func agentKey(a int) string  { return fmt.Sprintf("agentday-key-%04d-0123456789", a) }

// nodeReady is the child's first line.
type nodeReady struct {
	URLs []string // each node's base URL
	PID  int
}

// nodeResult is what the child measured over the window (its "report").
type nodeResult struct {
	Window    time.Duration
	CPU       time.Duration // the child's user and system time
	DiskBytes int64         // written to storage (/proc/self/io write_bytes)
	RSSIdle   int64         // after start, before any load
	RSSMean   int64         // sampled over the window
	RSSMax    int64
	LiveMean  float64 // jobs submitted and not finished
	QueueMean float64 // of those, not claimed
	// Of the claimed ones, draining (claimed and not ended), and their
	// fetches in flight, each sampled every 100 ms.
	RunningMean, FetchingMean float64
	Targets                   int // targets stored
	// The nodes' PostgreSQL round trips, and the batches they sent (the
	// drain writes' groups of several) with the statements in them,
	// counted by a pgx tracer on their pools; 0 for other stores.
	PGRoundTrips, PGBatches, PGBatchStatements int64
	Slots                                      slotTimes
	Readable                                   durSummary // fetch end → result stored, on the node that fetched
	Write                                      durSummary // the store write of one target
	Claim                                      durSummary // the claim of one job
	// JobEnds maps every job finished since the start to the node that
	// finished it and when (Unix ns), for the long-polls' wake times.
	JobEnds map[string]jobEnd
}

type jobEnd struct {
	Node int
	At   int64
}

// slotTimes splits the drains' time over the window.
type slotTimes struct {
	Fetch       time.Duration // in the FetchFunc
	BeforeFetch time.Duration // between a claim or a write and the next fetch
	AfterFetch  time.Duration // between a fetch's return and its write
	Write       time.Duration // the store write of a target
	Claim       time.Duration // the claims that found a job
}

// durSummary summarises durations.
type durSummary struct {
	N                   int
	P50, P90, P99, Max  time.Duration
	Mean                time.Duration
	Over20ms, Over100ms int
}

func summarize(d []time.Duration) durSummary {
	if len(d) == 0 {
		return durSummary{}
	}
	slices.Sort(d)
	var sum time.Duration
	s := durSummary{N: len(d), P50: quantile(d, 0.5), P90: quantile(d, 0.9), P99: quantile(d, 0.99), Max: d[len(d)-1]}
	for _, x := range d {
		sum += x
		if x > 20*time.Millisecond {
			s.Over20ms++
		}
		if x > 100*time.Millisecond {
			s.Over100ms++
		}
	}
	s.Mean = sum / time.Duration(len(d))
	return s
}

// node is one runner behind its listener.
type node struct {
	runner *batch.Runner
	srv    *http.Server
	url    string
}

// childAgentDay is the child's main.
func childAgentDay(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "agentday child: want one JSON argument")
		return 2
	}
	var cfg nodeConfig
	if err := json.Unmarshal([]byte(args[0]), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "agentday child:", err)
		return 2
	}
	if err := runNodes(cfg, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "agentday child:", err)
		return 1
	}
	return 0
}

func runNodes(cfg nodeConfig, in io.Reader, out io.Writer) (err error) {
	ctx := context.Background()
	rec := newRecorder()
	rec.pg = &costMeter{app: cfg.App}
	var closers []func()
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()
	stores, err := openNodeStores(ctx, cfg, rec.pg, &closers)
	if err != nil {
		return err
	}
	fetch, closeIdle := newUpstreamFetcher(cfg.Upstream, cfg.Hosts)
	closers = append(closers, closeIdle)
	keys := make([]batchserver.Key, cfg.Agents)
	for a := range keys {
		keys[a] = batchserver.Key{Name: agentName(a), Secret: agentKey(a)}
	}
	auth, err := batchserver.NewKeyAuth(keys)
	if err != nil {
		return err
	}
	var nodes []*node
	for i, w := range cfg.Workers {
		n, err := startNode(ctx, cfg, i, w, cfg.Drains[i], stores[i], fetch, auth, rec)
		if err != nil {
			return err
		}
		nodes = append(nodes, n)
		closers = append(closers, n.close)
	}
	time.Sleep(100 * time.Millisecond)
	ready := nodeReady{PID: os.Getpid()}
	for _, n := range nodes {
		ready.URLs = append(ready.URLs, n.url)
	}
	rec.rssIdle = rss()
	enc := json.NewEncoder(out)
	if err := enc.Encode(ready); err != nil {
		return err
	}
	var res nodeResult
	var stopProfile func()
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		switch cmd := sc.Text(); cmd {
		case "start":
			if cfg.Profile != "" {
				if stopProfile, err = startProfile(cfg.Profile); err != nil {
					return err
				}
			}
			if cfg.Trace != "" {
				stop, err := startTrace(cfg.Trace)
				if err != nil {
					return err
				}
				t := time.AfterFunc(traceFor, stop)
				closers = append(closers, func() { t.Stop(); stop() })
			}
			rec.start()
		case "end":
			res = rec.end()
			if stopProfile != nil {
				stopProfile()
			}
		case "report":
			res.JobEnds = rec.jobEnds()
			if err := enc.Encode(res); err != nil {
				return err
			}
			continue
		default:
			return fmt.Errorf("unknown command %q", cmd)
		}
		if err := enc.Encode("ok"); err != nil {
			return err
		}
	}
	return sc.Err()
}

// startTrace starts an execution trace to path; the function it returns
// stops it, once.
func startTrace(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { trace.Stop(); f.Close() }) }, nil
}

func startProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// openNodeStores opens one store per node: a store each on one
// PostgreSQL schema, or one shared in-memory store, or the SQLite file
// (one node).
func openNodeStores(ctx context.Context, cfg nodeConfig, tracer *costMeter, closers *[]func()) ([]batchdriver.Store, error) {
	// The switches are process-wide: the child runs one case, and tests
	// that run nodes in this process leave them all off.
	ablation.Set(cfg.Ablate)
	defer ablation.Set(ablation.Off{})
	n := len(cfg.Workers)
	stores := make([]batchdriver.Store, n)
	switch cfg.Store {
	case storeMemory:
		var s *batchtest.Store
		if n == 1 {
			s = batchtest.NewStore()
		} else {
			s = batchtest.NewSharedStore()
		}
		for i := range stores {
			stores[i] = s
		}
	case storeSQLite:
		if n != 1 {
			return nil, errors.New("the SQLite store serves one node")
		}
		s, err := batchstore.Open(ctx, filepath.Join(cfg.Dir, "agentday.db"), batchstore.Config{Synchronous: batchstore.Synchronous(cfg.Sync)})
		if err != nil {
			return nil, err
		}
		*closers = append(*closers, func() { s.Close() })
		stores[0] = s
	case storePostgres:
		for i := range stores {
			pcfg, err := pgxpool.ParseConfig(cfg.PGURL)
			if err != nil {
				return nil, err
			}
			pcfg.MaxConns = cfg.MaxConns
			tracer.configure(pcfg) // its application_name, for the backends' CPU
			pool, err := pgxpool.NewWithConfig(ctx, pcfg)
			if err != nil {
				return nil, err
			}
			*closers = append(*closers, pool.Close)
			s, err := pgstore.New(ctx, pool, pgstore.Config{Schema: cfg.Schema})
			if err != nil {
				return nil, fmt.Errorf("node %d: %w", i, err)
			}
			*closers = append(*closers, func() { s.Close() })
			stores[i] = s
		}
	default:
		return nil, fmt.Errorf("unknown store %q", cfg.Store)
	}
	return stores, nil
}

func startNode(ctx context.Context, cfg nodeConfig, i, workers, drains int, store batchdriver.Store, fetch batch.FetchFunc,
	auth batchhttp.CallerFunc, rec *recorder) (*node, error) {
	r, err := batch.New(batch.Config{
		Store: store, Fetch: fetch, Options: batchsift.Options, Drains: drains,
		Workers: workers, JobsPerCaller: cfg.JobsPerCaller, JobsTotal: cfg.JobsTotal,
		TargetTimeout: batch.Duration(cfg.TargetTimeout), FetchesPerHost: -1,
		MaxBytes: 1 << 40, RunnerID: fmt.Sprintf("agentday-node-%d", i),
		Observer: &nodeObserver{node: i, rec: rec}, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, err
	}
	if err := r.Start(ctx); err != nil {
		return nil, err
	}
	n := &node{runner: r}
	h, err := batchhttp.NewHandler(r, &batchhttp.HandlerConfig{Authenticate: auth, Precheck: batchhttp.PrecheckURL})
	if err != nil {
		n.close()
		return nil, err
	}
	mux := http.NewServeMux()
	h.Mount(mux)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		n.close()
		return nil, err
	}
	n.srv = &http.Server{Handler: batchhttp.WithRequestID(mux), ReadHeaderTimeout: 5 * time.Second}
	go n.srv.Serve(ln)
	n.url = "http://" + ln.Addr().String()
	return n, nil
}

func (n *node) close() {
	if n.srv != nil {
		n.srv.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n.runner.Close(ctx)
}
