package main

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"time"

	"github.com/siftfetch/batchkit/internal/ablation"
)

// The agent day: what an agent sees, and what the fetch slots do, while
// many callers keep the runner busy with jobs of 1 to 32 targets against
// an upstream of realistic latency.
//
// Each case runs the nodes (a runner, its store and batchhttp's handler
// per node) in a child process, and the upstream and the clients in this
// one. After a warm-up, a window is measured: the upstream's busy time
// (the utilization), the clients' latencies, the nodes' own observations
// (through the runner's Observer), and the CPU, disk and memory each side
// used. The stores are the in-memory one (batchtest, the zero-cost
// reference), SQLite at FULL and NORMAL, and PostgreSQL with 1 node and
// with 3 (each a pool, a runner and a listener of its own, on one schema);
// the 3 nodes are set beside the in-memory store shared by 3 runners.

// The latency model at scale 1: a lognormal with this median and 0.99
// quantile, and a target timeout. Each scale multiplies all three.
const (
	adMedian  = 300 * time.Millisecond
	adP99     = 3 * time.Second
	adTimeout = 5 * time.Second
)

// The upstream's answers besides 200: the shares that time out, answer
// 404 and answer 500.
const (
	adTimeoutShare = 0.01
	adShare4xx     = 0.03
	adShare5xx     = 0.02
)

const (
	adSlots     = 64              // fetch slots (runner workers) in all, over the nodes
	adDrainsPct = 150             // each node's Drains, in % of its Workers
	adJobsTotal = 256             // live jobs cap: above what the callers keep live
	adBodyBytes = 4 << 10         // a 200 answer's body
	adHosts     = 128             // virtual hosts the targets spread over
	adPoolOne   = 16              // PostgreSQL pool of a single node
	adPoolEach  = 8               // of each of 3 nodes
	adBackOff   = 2 * time.Second // an agent's mean wait after a submit the caps refused
)

// adScale is one latency scale.
type adScale struct {
	Factor float64
}

func (s adScale) median() time.Duration  { return scaled(adMedian, s.Factor) }
func (s adScale) p99() time.Duration     { return scaled(adP99, s.Factor) }
func (s adScale) timeout() time.Duration { return scaled(adTimeout, s.Factor) }
func (s adScale) key() string            { return fmt.Sprintf("%dms", s.median().Milliseconds()) }

func scaled(d time.Duration, f float64) time.Duration { return time.Duration(float64(d) * f) }

// warmup is the time before a case's window: several job lifetimes.
func (s adScale) warmup(short bool) time.Duration {
	if short {
		return time.Second
	}
	return max(5*time.Second, 75*s.median())
}

// adCase is one store configuration.
type adCase struct {
	Key, Name string
	Store     string // storeMemory, storeSQLite, storePostgres
	Sync      string
	Nodes     int
	Ref       string // the key of its in-memory reference; "" for a reference
	// NoDrains runs the nodes with Drains = Workers, at the 20 ms scale
	// only: what the drains beyond the fetch slots buy, where they buy it.
	NoDrains bool
}

var adCases = []adCase{
	{Key: "memory", Name: "in-memory", Store: storeMemory, Nodes: 1},
	{Key: "sqlite-normal", Name: "SQLite NORMAL", Store: storeSQLite, Sync: "NORMAL", Nodes: 1, Ref: "memory"},
	{Key: "sqlite-full", Name: "SQLite FULL", Store: storeSQLite, Sync: "FULL", Nodes: 1, Ref: "memory"},
	{Key: "pg-1", Name: "PostgreSQL, 1 node", Store: storePostgres, Nodes: 1, Ref: "memory"},
	{Key: "memory-3", Name: "in-memory, 3 nodes", Store: storeMemory, Nodes: 3},
	{Key: "pg-3", Name: "PostgreSQL, 3 nodes", Store: storePostgres, Nodes: 3, Ref: "memory-3"},
	{Key: "sqlite-full-w", Name: "SQLite FULL, drains = workers", Store: storeSQLite, Sync: "FULL", Nodes: 1, Ref: "memory", NoDrains: true},
	{Key: "pg-1-w", Name: "PostgreSQL, 1 node, drains = workers", Store: storePostgres, Nodes: 1, Ref: "memory", NoDrains: true},
}

// adSizes are the phase's sizes.
type adSizes struct {
	Scales   []adScale
	Window   time.Duration
	Agents   int
	JobsEach int // live jobs each agent keeps
	Probes   int
	Pace     time.Duration
	Warmup   time.Duration  // if set, instead of each scale's
	only     *regexp.Regexp // "<scale>/<case>" keys to run, by hand
}

func adSizesOf(o options) adSizes {
	s := adSizes{Scales: []adScale{{2.0 / 3}, {1.0 / 15}}, Window: 60 * time.Second, Agents: 50, JobsEach: 3, Probes: 2, Pace: 20 * time.Millisecond}
	if o.short {
		s = adSizes{Scales: []adScale{{1.0 / 15}}, Window: time.Second, Agents: 10, JobsEach: 3, Probes: 1, Pace: 20 * time.Millisecond}
	}
	if o.adWindow > 0 {
		s.Window = o.adWindow
	}
	s.only = o.adOnly
	return s
}

// adCaps are a case's fetch slots and live-job caps.
type adCaps struct {
	Slots         int // fetch slots in all, split over the nodes
	PerNode       int // instead: each node's Workers
	DrainsPct     int // each node's Drains, in % of its Workers; 0: as many
	JobsPerCaller int
	JobsTotal     int
}

// raisedCaps are the agent day's own: slots for a full machine, drains
// beyond them, and caps above what the callers keep live.
func raisedCaps(sz adSizes) adCaps {
	return adCaps{Slots: adSlots, DrainsPct: adDrainsPct, JobsPerCaller: sz.JobsEach + 1, JobsTotal: adJobsTotal}
}

// drains is each node's Drains, for its workers.
func (c adCaps) drains(workers []int) []int {
	d := make([]int, len(workers))
	for i, w := range workers {
		d[i] = max(w, w*c.DrainsPct/100)
	}
	return d
}

// workers is each of n nodes' Workers.
func (c adCaps) workers(n int) []int {
	if c.PerNode > 0 {
		w := make([]int, n)
		for i := range w {
			w[i] = c.PerNode
		}
		return w
	}
	return workersOf(c.Slots, n)
}

// workersOf splits slots over n nodes.
func workersOf(slots, n int) []int {
	w := make([]int, n)
	for i := range w {
		w[i] = slots / n
		if i < slots%n {
			w[i]++
		}
	}
	return w
}

// adRun is one case at one scale.
type adRun struct {
	Case   adCase
	Scale  adScale
	Slots  int // fetch slots over the nodes
	Drains int // drains over the nodes
	Busy   busyFigures
	Node   nodeResult
	Submit []time.Duration // sorted
	Status []time.Duration
	Result []time.Duration
	// Wakes are the long-polls' wakes after their job ended, on the node
	// that finished it and on the others.
	WakeSame, WakeOther []time.Duration
	Refused             int           // submits the caps refused in the window
	LoadCPU             time.Duration // this process: the upstream and the clients
	Cost                adCost
	Warmup              time.Duration
}

// agentDayReport is the phase's outcome.
type agentDayReport struct {
	Sizes     adSizes
	Cores     int // the machine's
	Runs      []*adRun
	PGMissing string
	Elapsed   time.Duration
}

func (r *agentDayReport) find(scale adScale, key string) *adRun {
	for _, run := range r.Runs {
		if run.Scale == scale && run.Case.Key == key {
			return run
		}
	}
	return nil
}

func agentDayPhase(ctx context.Context, o options, tmp, pgURL, pgMissing string) (*agentDayReport, error) {
	sz := adSizesOf(o)
	rep := &agentDayReport{Sizes: sz, Cores: runtime.NumCPU(), PGMissing: pgMissing}
	start := time.Now()
	for _, sc := range sz.Scales {
		for _, c := range adCases {
			if c.Store == storePostgres && pgURL == "" {
				continue
			}
			if sz.only != nil && !sz.only.MatchString(sc.key()+"/"+c.Key) {
				continue
			}
			caps := raisedCaps(sz)
			if c.NoDrains {
				if !sc.fast() {
					continue
				}
				caps.DrainsPct = 0
			}
			run, err := runAgentDay(ctx, sz, sc, c, caps, ablation.Off{}, tmp, pgURL, o.short, startNodes)
			if err != nil {
				return nil, fmt.Errorf("agent day %s, %s: %w", sc.key(), c.Key, err)
			}
			rep.Runs = append(rep.Runs, run)
			logf("agentday %-5s %-14s util %.3f (%4.0f targets/s, mean %s, peak %d)  submit p99 %s  status p99 %s  result p99 %s  readable p99 %s  wake p99 %s / %s",
				sc.key(), c.Key, run.util(), run.Busy.rate(), fmtDur(run.Busy.meanLatency()), run.Busy.Peak,
				fmtDur(quantile(run.Submit, 0.99)), fmtDur(quantile(run.Status, 0.99)), fmtDur(quantile(run.Result, 0.99)),
				fmtDur(run.Node.Readable.P99), fmtDur(quantile(run.WakeSame, 0.99)), fmtDur(quantile(run.WakeOther, 0.99)))
			logf("agentday %-5s %-14s drains: fetch %.1f%%, before fetch %.2f%%, after fetch %.2f%%, write %.2f%% (p50 %s, p99 %s), claim %.2f%% (p99 %s); live %.0f, queued %.0f, draining %.1f, fetching %.1f; node CPU %s/target; pg round trips/target %.2f, batches %d of %.1f",
				sc.key(), c.Key, run.drainShare(run.Node.Slots.Fetch), run.drainShare(run.Node.Slots.BeforeFetch), run.drainShare(run.Node.Slots.AfterFetch),
				run.drainShare(run.Node.Slots.Write), fmtDur(run.Node.Write.P50), fmtDur(run.Node.Write.P99), run.drainShare(run.Node.Slots.Claim),
				fmtDur(run.Node.Claim.P99), run.Node.LiveMean, run.Node.QueueMean, run.Node.RunningMean, run.Node.FetchingMean, fmtDur(run.perTarget(run.Node.CPU)),
				float64(run.Node.PGRoundTrips)/float64(max(run.Node.Targets, 1)), run.Node.PGBatches,
				float64(run.Node.PGBatchStatements)/float64(max(run.Node.PGBatches, 1)))
		}
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// drainShare is d as a percentage of the drains' time over the window.
func (r *adRun) drainShare(d time.Duration) float64 {
	return 100 * d.Seconds() / (float64(r.Drains) * r.Node.Window.Seconds())
}

// perTarget divides d by the targets the nodes stored in the window.
func (r *adRun) perTarget(d time.Duration) time.Duration {
	if r.Node.Targets == 0 {
		return 0
	}
	return d / time.Duration(r.Node.Targets)
}

// startFunc starts a case's nodes.
type startFunc func(ctx context.Context, cfg nodeConfig) (*nodeChild, error)

func runAgentDay(ctx context.Context, sz adSizes, sc adScale, c adCase, caps adCaps, off ablation.Off, tmp, pgURL string, short bool, start startFunc) (_ *adRun, err error) {
	run := &adRun{Case: c, Scale: sc, Warmup: cmp.Or(sz.Warmup, sc.warmup(short))}
	workers := caps.workers(c.Nodes)
	drains := caps.drains(workers)
	for i, w := range workers {
		run.Slots += w
		run.Drains += drains[i]
	}
	up, err := startUpstream(upstreamModel{
		Latency: lognormalOf(sc.median(), sc.p99()), Hang: 4 * sc.timeout(),
		TimeoutShare: adTimeoutShare, Share4xx: adShare4xx, Share5xx: adShare5xx,
		Body: []byte(pageText(adBodyBytes)),
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		up.close(cctx)
	}()
	dir, err := os.MkdirTemp(tmp, "agentday-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cfg := nodeConfig{
		Store: c.Store, Sync: c.Sync, Workers: workers, Drains: drains, Dir: dir, Upstream: up.addrs, Hosts: adHosts,
		TargetTimeout: sc.timeout(), JobsPerCaller: caps.JobsPerCaller, JobsTotal: caps.JobsTotal, Agents: sz.Agents,
		Ablate: off,
	}
	if dir := os.Getenv("BKAGENT_PPROF"); dir != "" { // profiling by hand
		cfg.Profile = filepath.Join(dir, fmt.Sprintf("agentday-%s-%s.pprof", sc.key(), c.Key))
	}
	if dir := os.Getenv("BKAGENT_TRACE"); dir != "" { // tracing by hand
		cfg.Trace = filepath.Join(dir, fmt.Sprintf("agentday-%s-%s.trace", sc.key(), c.Key))
	}
	var probe *costProbe
	if c.Store == storePostgres {
		schema, drop, err := newPGSchema(ctx, pgURL)
		if err != nil {
			return nil, err
		}
		defer drop()
		var b [4]byte
		crand.Read(b[:])
		cfg.PGURL, cfg.Schema, cfg.App = pgURL, schema, "bkagent_"+hex.EncodeToString(b[:])
		cfg.MaxConns = adPoolOne
		if c.Nodes > 1 {
			cfg.MaxConns = adPoolEach
		}
		if probe, err = newCostProbe(ctx, pgURL); err != nil {
			return nil, err
		}
		defer probe.close()
	}
	child, err := start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer child.stop()

	load := &adLoad{nodes: child.ready.URLs, agents: sz.Agents, jobsEach: sz.JobsEach, hosts: adHosts,
		probes: sz.Probes, pace: sz.Pace, backOff: adBackOff, rec: newClientRecorder()}
	if v := os.Getenv("BKAGENT_POLL"); v != "" { // an ablation by hand: status polls, not long-polls
		if load.statusPoll, err = time.ParseDuration(v); err != nil {
			return nil, fmt.Errorf("BKAGENT_POLL: %w", err)
		}
	}
	lctx, stopLoad := context.WithCancel(ctx)
	var loadErr error
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		loadErr = load.run(lctx)
	}()
	defer func() { stopLoad(); <-loadDone }()
	wait := func(d time.Duration) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-loadDone:
			return cmp.Or(loadErr, errors.New("the load stopped"))
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		}
	}
	if err := wait(run.Warmup); err != nil {
		return nil, err
	}

	meter := newCostMeterFor(c.Store, probe, cfg.App, child.ready.PID)
	if err := meter.begin(ctx); err != nil {
		return nil, err
	}
	defer meter.stopPerf() // on a failure before the window's end
	cpu0 := selfCPU()
	now := time.Now()
	up.meter.open(now)
	load.rec.w0.Store(now.UnixNano())
	if err := child.command("start", nil); err != nil {
		return nil, err
	}
	if err := wait(sz.Window); err != nil {
		return nil, err
	}
	if err := child.command("end", nil); err != nil {
		return nil, err
	}
	now = time.Now()
	run.Busy = up.meter.close(now)
	load.rec.w1.Store(now.UnixNano())
	run.LoadCPU = selfCPU() - cpu0
	if run.Cost, err = meter.end(ctx); err != nil {
		return nil, err
	}
	// A tail, so that the long-polls of the jobs that ended in the window
	// have answered.
	if err := wait(500 * time.Millisecond); err != nil {
		return nil, err
	}
	stopLoad()
	<-loadDone
	if loadErr != nil {
		return nil, loadErr
	}
	if err := child.command("report", &run.Node); err != nil {
		return nil, err
	}
	if err := child.stop(); err != nil {
		return nil, err
	}
	run.collect(load.rec, now)
	return run, nil
}

// collect sorts the clients' latencies and matches the long-polls with
// the ends of their jobs inside the window.
func (r *adRun) collect(rec *clientRecorder, w1 time.Time) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	r.Submit, r.Status, r.Result = slices.Sorted(slices.Values(rec.submit)), slices.Sorted(slices.Values(rec.status)), slices.Sorted(slices.Values(rec.result))
	r.Refused = rec.refused
	w0 := rec.w0.Load()
	for _, p := range rec.polls {
		end, ok := r.Node.JobEnds[p.Job]
		if !ok || end.At < w0 || end.At >= w1.UnixNano() || p.Sent > end.At {
			continue // outside the window, or asked after the job ended
		}
		d := time.Duration(p.Recv - end.At)
		if p.Node == end.Node {
			r.WakeSame = append(r.WakeSame, d)
		} else {
			r.WakeOther = append(r.WakeOther, d)
		}
	}
	slices.Sort(r.WakeSame)
	slices.Sort(r.WakeOther)
	r.Node.JobEnds = nil // not kept in the report
}
