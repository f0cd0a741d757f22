package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batchstore/pgstore"
)

// The many-nodes model: what a target costs PostgreSQL as the runners
// sharing one database grow, at the same offered load. Each contender is
// R runners in this process, each with a store and a pool of its own and
// its own runner id and heartbeats, as R processes would be, on one
// schema; together they have the same fetch slots (split evenly) and are
// offered the same targets per second: jobs of 1 to 32 targets submitted
// at random (Poisson) times, round robin over the runners, by many
// callers, to a fetch that waits a lognormal time (latencies compressed
// from the network's, so that the store is under real pressure) on many
// hosts. The runners run at their defaults otherwise (heartbeats, polls,
// sweeps, the per-host gate). After a warm-up, a window measures, per
// target finished in it, the costs the PostgreSQL cost phase measures
// (server CPU of the run's backends, statements, round trips, commits)
// and the backends' heavyweight lock waits, sampled.
//
// One more contender separates what the runners cost from what the
// server's connections cost: one runner whose one pool has as many
// connections, all open, as the most runners' pools together. The
// statements are the one runner's; only the backends they spread over
// are the many runners'.

// nodesWork is the many-nodes model's load.
type nodesWork struct {
	Runners []int         // runner counts, the first the reference
	Slots   int           // fetch slots in all, split evenly over the runners
	Rate    float64       // targets offered per second
	Median  time.Duration // the fetch's median latency
	Sigma   float64       // the log of the latency's spread
	Hosts   int           // hosts the targets spread over
	Warm    time.Duration // before the window
	Window  time.Duration
	Rounds  int
}

// meanLatency is the lognormal fetch latency's mean (before its cap).
func (w nodesWork) meanLatency() time.Duration {
	return time.Duration(float64(w.Median) * math.Exp(w.Sigma*w.Sigma/2))
}

// nodesRun is one contender's figures in one round.
type nodesRun struct {
	costRun
	Runners  int
	Offered  int // targets submitted in the window
	Refused  int // submits refused (none is expected)
	Finished int // targets finished in the window
}

// nodesReport is the many-nodes model's outcome.
type nodesReport struct {
	Work    nodesWork
	PGSS    bool
	Runs    map[int][]nodesRun // by runner count, one per round
	Wide    []nodesRun         // one runner over the most runners' connections, one per round
	Elapsed time.Duration
}

func nodesPhase(ctx context.Context, w nodesWork, pgURL string) (*nodesReport, error) {
	p, err := newCostProbe(ctx, pgURL)
	if err != nil {
		return nil, err
	}
	defer p.close()
	if v := os.Getenv("BKNODES_RUNNERS"); v != "" { // by hand: e.g. "1,32"
		w.Runners = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return nil, fmt.Errorf("BKNODES_RUNNERS: %q is not a runner count", f)
			}
			w.Runners = append(w.Runners, n)
		}
	}
	if v := os.Getenv("BKNODES_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("BKNODES_ROUNDS: %q is not a count", v)
		}
		w.Rounds = n
	}
	rep := &nodesReport{Work: w, PGSS: p.pgss, Runs: map[int][]nodesRun{}}
	start := time.Now()
	// The contenders: each runner count, and one runner over the most
	// runners' connections (conns > 0) once there are two counts.
	type contender struct{ n, conns int }
	var cs []contender
	for _, n := range w.Runners {
		cs = append(cs, contender{n: n})
	}
	if len(w.Runners) > 1 {
		cs = append(cs, contender{n: 1, conns: w.wideConns()})
	}
	for round := range w.Rounds {
		for k := range cs {
			c := cs[(k+round)%len(cs)]
			rctx, cancel := context.WithTimeout(ctx, roundTimeout)
			r, err := nodesRound(rctx, w, c.n, c.conns, pgURL, p, uint64(round))
			cancel()
			if err != nil {
				return nil, fmt.Errorf("nodes round %d, %d runners (%d connections): %w", round+1, c.n, c.conns, err)
			}
			if c.conns > 0 {
				rep.Wide = append(rep.Wide, r)
			} else {
				rep.Runs[c.n] = append(rep.Runs[c.n], r)
			}
			logf("nodes round %d/%d  %2d runners %2d conns  offered %5.0f/s  finished %5.0f/s  server %5.0f µs  client %5.0f µs  stmts %4.2f  rts %4.2f  commits %4.2f  lock %d of %d  refused %d",
				round+1, w.Rounds, c.n, c.conns, float64(r.Offered)/w.Window.Seconds(), float64(r.Finished)/w.Window.Seconds(),
				r.per(float64(r.CPU.Microseconds())), r.per(float64(r.ClientCPU.Microseconds())), r.per(float64(r.Sent)),
				r.per(float64(r.RoundTrips)), r.per(float64(r.Commits)), r.lockWaits("Lock"), r.Samples, r.Refused)
			logf("nodes waits %s", topWaits([]costRun{r.costRun}, 6))
		}
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// most is the most runners the model runs.
func (w nodesWork) most() int { return w.Runners[len(w.Runners)-1] }

// workers is each runner's share of the fetch slots when there are n.
func (w nodesWork) workers(n int) int { return max(w.Slots/n, 1) }

// poolConns is the connections of each runner's pool when there are n:
// a worker's calls and the runner's own (heartbeats, polls, sweeps); the
// feed's LISTEN connection is outside the pool. 32 runners stay within
// the server's default 100 connections.
func (w nodesWork) poolConns(n int) int { return min(w.workers(n), 4) + 1 }

// wideConns is the connections of the most runners' pools together.
func (w nodesWork) wideConns() int { return w.most() * w.poolConns(w.most()) }

// nodesRound runs n runners on a schema of their own through the warm-up
// and the window, each over a pool of conns connections, all open, or of
// poolConns when conns is 0.
func nodesRound(ctx context.Context, w nodesWork, n, conns int, pgURL string, p *costProbe, seed uint64) (nodesRun, error) {
	schema, drop, err := newPGSchema(ctx, pgURL)
	if err != nil {
		return nodesRun{}, err
	}
	defer drop()
	x := &measure{p: p, m: newCostMeter()}
	workers := w.workers(n)
	var (
		stores  []*pgstore.Store
		pools   []*pgxpool.Pool
		runners []*batch.Runner
	)
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		for _, r := range runners {
			r.Close(cctx)
		}
		for _, s := range stores {
			s.Close()
		}
		for _, pl := range pools {
			pl.Close()
		}
	}()
	rng := rand.New(rand.NewPCG(seed, 32))
	var rmu sync.Mutex
	latency := func() time.Duration {
		rmu.Lock()
		z := rng.NormFloat64()
		rmu.Unlock()
		return time.Duration(float64(w.Median) * math.Min(math.Exp(w.Sigma*z), 15))
	}
	content := strings.Repeat("word ", 400)
	fetch := func(ctx context.Context, _ batch.Caller, _ batch.Target) (batch.Result, error) {
		t := time.NewTimer(latency())
		defer t.Stop()
		select {
		case <-t.C:
			return batch.Result{Content: content}, nil
		case <-ctx.Done():
			return batch.Result{}, ctx.Err()
		}
	}
	for i := range n {
		cfg, err := pgxpool.ParseConfig(pgURL)
		if err != nil {
			return nodesRun{}, err
		}
		cfg.MaxConns = int32(w.poolConns(n))
		if conns > 0 {
			cfg.MaxConns, cfg.MinConns = int32(conns), int32(conns)
		}
		x.m.configure(cfg)
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nodesRun{}, err
		}
		pools = append(pools, pool)
		s, err := pgstore.New(ctx, pool, pgstore.Config{Schema: schema})
		if err != nil {
			return nodesRun{}, err
		}
		stores = append(stores, s)
		r, err := batch.New(batch.Config{
			Store: s, Fetch: fetch, Options: batchsift.Options, Workers: workers, RunnerID: fmt.Sprintf("node-%02d", i),
			JobsPerCaller: 1 << 16, JobsTotal: 1 << 16, MaxBytes: 1 << 40, Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			return nodesRun{}, err
		}
		if err := r.Start(ctx); err != nil {
			return nodesRun{}, err
		}
		runners = append(runners, r)
	}
	finished := func() uint64 {
		var t uint64
		for _, r := range runners {
			for _, o := range batchdriver.Outcomes {
				t += r.Metrics().GetOrCreateCounter(`batch_targets_total{outcome="` + string(o) + `"}`).Get()
			}
		}
		return t
	}

	// The load: Poisson arrivals of jobs of 1 to 32 targets (16.5 on
	// average), until the window ends.
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var (
		lmu              sync.Mutex
		offered, refused int
		counting         bool
		loadErr          error
		wg               sync.WaitGroup
	)
	jobRate := w.Rate / 16.5
	wg.Go(func() {
		lr := rand.New(rand.NewPCG(seed, 33))
		next := time.Now()
		for j := 0; ; j++ {
			next = next.Add(time.Duration(lr.ExpFloat64() / jobRate * float64(time.Second)))
			if d := time.Until(next); d > 0 {
				select {
				case <-time.After(d):
				case <-lctx.Done():
					return
				}
			} else if lctx.Err() != nil {
				return
			}
			k := 1 + lr.IntN(32)
			ts := make([]batch.Target, k)
			for i := range ts {
				ts[i].URL = fmt.Sprintf("https://h%d.example.test/j%d/%d", lr.IntN(w.Hosts), j, i)
			}
			caller := batch.Caller{Name: fmt.Sprintf("agent-%d", j%64)}
			r := runners[j%len(runners)]
			wg.Go(func() {
				_, _, err := r.Submit(lctx, caller, ts)
				lmu.Lock()
				defer lmu.Unlock()
				switch {
				case err == nil:
					if counting {
						offered += k
					}
				case lctx.Err() != nil:
				case errors.Is(err, batch.ErrBusy), errors.Is(err, batch.ErrCallerBusy):
					refused++
				default:
					if loadErr == nil {
						loadErr = err
					}
				}
			})
		}
	})
	pause(ctx, w.Warm)
	stop, err := x.start(ctx)
	if err != nil {
		return nodesRun{}, err
	}
	before := finished()
	lmu.Lock()
	counting = true
	lmu.Unlock()
	pause(ctx, w.Window)
	lmu.Lock()
	counting = false
	lmu.Unlock()
	after := finished()
	stop()
	stopLoad()
	wg.Wait()
	if x.err != nil {
		return nodesRun{}, x.err
	}
	if loadErr != nil {
		return nodesRun{}, fmt.Errorf("submit: %w", loadErr)
	}
	if err := ctx.Err(); err != nil {
		return nodesRun{}, err
	}
	run := nodesRun{costRun: x.run, Runners: n, Offered: offered, Refused: refused, Finished: int(after - before)}
	run.Elapsed, run.Targets = w.Window, max(run.Finished, 1)
	return run, nil
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
