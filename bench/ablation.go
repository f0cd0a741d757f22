package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchstore"
	"github.com/siftfetch/batchkit/internal/ablation"
)

// The ablation: what each of the stores' throughput mechanisms buys where
// users feel it. Each mechanism is switched off (internal/ablation) and
// measured against the stores as they are, in the agent day at the 20 ms
// scale, at the seeds' default caps and at ten times them, and, for the
// PostgreSQL ones, in the many-nodes model at its most runners. Every
// variant runs once a pass, in passes of alternating order, so that the
// machine's drift falls on both sides; the spread of the runs with nothing
// switched off, in the same load and store, is the noise a difference must
// exceed there.

// abMechanism is one mechanism the ablation switches off.
type abMechanism struct {
	Key, Name string
	Off       ablation.Off
	Cases     []string // the agent day's case keys it is measured on
	Nodes     bool     // measured in the many-nodes model too
	Drains    []string // the drain's groups it is measured in
	Reads     bool     // measured under the HTTP phase's read load (SQLite FULL)
}

var abMechanisms = []abMechanism{
	{Key: "sqlite-group", Name: "SQLite group commit", Off: ablation.Off{SQLiteGroupCommit: true}, Cases: []string{"sqlite-normal", "sqlite-full"}, Drains: []string{sqliteNormal, sqliteFull}, Reads: true},
	{Key: "sqlite-linger", Name: "SQLite group linger", Off: ablation.Off{SQLiteLinger: true}, Cases: []string{"sqlite-normal", "sqlite-full"}, Drains: []string{sqliteNormal, sqliteFull}, Reads: true},
	{Key: "sqlite-checkpointer", Name: "SQLite off-path checkpointer", Off: ablation.Off{SQLiteCheckpointer: true}, Cases: []string{"sqlite-normal"}, Drains: []string{sqliteNormal}},
	{Key: "sqlite-quick", Name: "SQLite pinned readers", Off: ablation.Off{SQLiteQuickReaders: true}, Cases: []string{"sqlite-normal", "sqlite-full"}, Drains: []string{sqliteNormal, sqliteFull}, Reads: true},
	{Key: "pg-groups", Name: "PostgreSQL write groups", Off: ablation.Off{PGWriteGroups: true}, Cases: []string{"pg-1", "pg-3"}, Nodes: true, Drains: []string{postgres, postgres4}},
	{Key: "pg-shared-creates", Name: "PostgreSQL shared create lock", Off: ablation.Off{PGSharedCreates: true}, Cases: []string{"pg-1", "pg-3"}, Nodes: true},
	{Key: "pg-notify", Name: "PostgreSQL NOTIFY window", Off: ablation.Off{PGNotifyWindow: true}, Cases: []string{"pg-3"}, Nodes: true},
}

// abLoad is one load of the ablation: a case's caps.
type abLoad struct {
	Key, Name string
	Caps      adCaps
}

// abLoads are the seeds' defaults and ten times them, per node.
var abLoads = []abLoad{
	{Key: "defaults", Name: "default caps", Caps: adCaps{PerNode: batch.DefaultWorkers, JobsPerCaller: batch.DefaultJobsPerCaller, JobsTotal: batch.DefaultJobsTotal}},
	{Key: "10x", Name: "10× the caps", Caps: adCaps{PerNode: 10 * batch.DefaultWorkers, JobsPerCaller: 10 * batch.DefaultJobsPerCaller, JobsTotal: 10 * batch.DefaultJobsTotal}},
}

// abPasses is how many times each variant runs.
const abPasses = 3

// ablationReport is the phase's outcome.
type ablationReport struct {
	Sizes   adSizes
	Scale   adScale
	Nodes   nodesWork // at its most runners only
	Commit  string
	Date    time.Time
	Cores   int
	Elapsed time.Duration
	// Agent day runs by load, case and mechanism key ("" for none
	// switched off), one per pass.
	Runs map[abKey][]*adRun
	// Mechs are the mechanisms measured: all, or those -ablation-only
	// names.
	Mechs []abMechanism
	// The many-nodes runs by mechanism key, one per pass.
	NodeRuns map[string][]nodesRun
	// The zero-latency drain: batchkit's rate over its raw twin's, the
	// median of a pass's rounds, by group, workers and mechanism key, one
	// per pass.
	Drain       map[abDrainKey][]float64
	DrainWork   drainWork
	DrainRounds int
	// The read load: the HTTP phase's read routes at abReadAgents agents,
	// by route and mechanism key, one per pass.
	Reads      map[abReadKey][]loadResult
	ReadPhase  time.Duration
	ReadAgents int
}

type abReadKey struct{ Route, Mech string }

// abReadAgents is the read load's concurrency: the HTTP phase's most.
const abReadAgents = 50

// abReadRoutes are the HTTP phase's routes the read load measures.
var abReadRoutes = []string{"status", "result"}

type abDrainKey struct {
	Group   string
	Workers int
	Mech    string
}

type abKey struct{ Load, Case, Mech string }

// abSizes are the agent day's sizes for the ablation: shorter windows, as
// it runs many cases.
func abSizes(o options) adSizes {
	sz := adSizesOf(o)
	sz.Scales = []adScale{{1.0 / 15}}
	if !o.short {
		sz.Window = 15 * time.Second
	}
	if o.adWindow > 0 {
		sz.Window = o.adWindow
	}
	return sz
}

func ablationPhase(ctx context.Context, o options, dsz sizes, tmp, pgURL string) (*ablationReport, error) {
	w := dsz.nodes
	sz := abSizes(o)
	rep := &ablationReport{Sizes: sz, Scale: sz.Scales[0], Commit: gitCommit(), Date: time.Now().UTC(), Cores: runtime.NumCPU(),
		Runs: map[abKey][]*adRun{}, NodeRuns: map[string][]nodesRun{}, Drain: map[abDrainKey][]float64{}, Reads: map[abReadKey][]loadResult{}}
	for _, m := range abMechanisms {
		if o.abOnly == nil || o.abOnly.MatchString(m.Key) {
			rep.Mechs = append(rep.Mechs, m)
		}
	}
	start := time.Now()
	if err := rep.drain(ctx, dsz, tmp, pgURL); err != nil {
		return nil, err
	}
	if err := rep.reads(ctx, dsz, tmp); err != nil {
		return nil, err
	}
	for _, load := range abLoads {
		for _, c := range adCases {
			order := rep.orderOf(func(m abMechanism) bool { return slices.Contains(m.Cases, c.Key) })
			if order == nil || (c.Store == storePostgres && pgURL == "") {
				continue
			}
			for pass := range abPasses {
				for _, m := range inPass(order, pass) {
					run, err := runAgentDay(ctx, sz, rep.Scale, c, load.Caps, m.Off, tmp, pgURL, o.short, startNodes)
					if err != nil {
						return nil, fmt.Errorf("ablation %s, %s, %s off: %w", load.Key, c.Key, orNone(m.Key), err)
					}
					k := abKey{load.Key, c.Key, m.Key}
					rep.Runs[k] = append(rep.Runs[k], run)
					logf("ablation %-8s %-13s %-19s util %.3f  write p50 %s  submit p99 %s  status p99 %s  result p99 %s  node CPU %s/target  pg CPU %s/target  refused %d",
						load.Key, c.Key, orNone(m.Key), run.util(), fmtDur(run.Node.Write.P50), fmtDur(quantile(run.Submit, 0.99)),
						fmtDur(quantile(run.Status, 0.99)), fmtDur(quantile(run.Result, 0.99)), fmtDur(run.perTarget(run.Node.CPU)),
						fmtDur(run.perTarget(run.Cost.PGCPU)), run.Refused)
				}
			}
		}
	}
	if pgURL != "" {
		if err := rep.nodes(ctx, w, pgURL); err != nil {
			return nil, err
		}
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// nodes runs the many-nodes model at its most runners with each
// PostgreSQL mechanism switched off in turn.
func (rep *ablationReport) nodes(ctx context.Context, w nodesWork, pgURL string) error {
	p, err := newCostProbe(ctx, pgURL)
	if err != nil {
		return err
	}
	defer p.close()
	n := w.most()
	w.Runners = []int{n}
	rep.Nodes = w
	order := rep.orderOf(func(m abMechanism) bool { return m.Nodes })
	if order == nil {
		return nil
	}
	for pass := range abPasses {
		for _, m := range inPass(order, pass) {
			ablation.Set(m.Off)
			rctx, cancel := context.WithTimeout(ctx, roundTimeout)
			r, err := nodesRound(rctx, w, n, 0, pgURL, p, uint64(pass))
			cancel()
			ablation.Set(ablation.Off{})
			if err != nil {
				return fmt.Errorf("ablation nodes, %s off: %w", orNone(m.Key), err)
			}
			rep.NodeRuns[m.Key] = append(rep.NodeRuns[m.Key], r)
			logf("ablation nodes %2d runners %-19s server %5.0f µs  stmts %4.2f  commits %4.2f  lock %d of %d",
				n, orNone(m.Key), r.per(float64(r.CPU.Microseconds())), r.per(float64(r.Sent)), r.per(float64(r.Commits)),
				r.lockWaits("Lock"), r.Samples)
		}
	}
	return nil
}

// drain runs the zero-latency drain's batchkit contenders beside their raw
// twins with each mechanism off, in the groups it is measured in.
func (rep *ablationReport) drain(ctx context.Context, sz sizes, tmp, pgURL string) error {
	e, err := newDrainEnv(sz.drain, tmp, pgURL)
	if err != nil {
		return err
	}
	rep.DrainWork, rep.DrainRounds = sz.drain, sz.rounds
	groups := []string{sqliteNormal, sqliteFull}
	if pgURL != "" {
		groups = append(groups, postgres, postgres4)
	}
	for _, g := range groups {
		order := rep.orderOf(func(m abMechanism) bool { return slices.Contains(m.Drains, g) })
		if order == nil {
			continue
		}
		for pass := range abPasses {
			for _, m := range inPass(order, pass) {
				pairs := drainPairs(g)
				var cs []*contender
				for _, p := range pairs {
					for _, c := range []*contender{p.batchkit, p.raw} {
						if !slices.ContainsFunc(cs, func(d *contender) bool { return d.Key == c.Key }) {
							cs = append(cs, c)
						}
					}
				}
				ablation.Set(m.Off)
				res, err := runDrain(ctx, e, cs, sz.rounds, sz.rounds, func(string, ...any) {})
				ablation.Set(ablation.Off{})
				if err != nil {
					return fmt.Errorf("ablation drain, %s, %s off: %w", g, orNone(m.Key), err)
				}
				for _, p := range pairs {
					r := spreadOf(ratios(res.Rates[p.batchkit.Key], res.Rates[p.raw.Key])).Median
					k := abDrainKey{g, p.workers, m.Key}
					rep.Drain[k] = append(rep.Drain[k], r)
					logf("ablation drain %-28s %d workers %-19s ÷ raw %.2f", g, p.workers, orNone(m.Key), r)
				}
			}
		}
	}
	return nil
}

// reads runs the HTTP phase's read routes on the SQLite store with each
// mechanism measured there off.
func (rep *ablationReport) reads(ctx context.Context, sz sizes, tmp string) error {
	order := rep.orderOf(func(m abMechanism) bool { return m.Reads })
	if order == nil {
		return nil
	}
	agents := min(abReadAgents, slicesMax(sz.httpAgents))
	rep.ReadPhase, rep.ReadAgents = sz.httpPhase, agents
	for pass := range abPasses {
		for _, m := range inPass(order, pass) {
			dir, err := os.MkdirTemp(tmp, "reads-")
			if err != nil {
				return err
			}
			ablation.Set(m.Off)
			srv, err := newHTTPServer(ctx, dir, agents)
			ablation.Set(ablation.Off{})
			if err != nil {
				os.RemoveAll(dir)
				return fmt.Errorf("ablation reads, %s off: %w", orNone(m.Key), err)
			}
			for _, rt := range abReadRoutes {
				p := loadPhase{Base: srv.base, Agents: agents, Duration: sz.httpPhase, MaxReqs: sz.httpMax, Request: srv.request(rt)}
				res, err := p.run(ctx)
				if err != nil {
					srv.close()
					os.RemoveAll(dir)
					return fmt.Errorf("ablation reads, %s, %s off: %w", rt, orNone(m.Key), err)
				}
				k := abReadKey{rt, m.Key}
				rep.Reads[k] = append(rep.Reads[k], res)
				logf("ablation reads %-7s %2d agents %-19s %8.0f req/s  p99 %s", rt, agents, orNone(m.Key), res.rps(), fmtDur(quantile(res.Latencies, 0.99)))
			}
			srv.close()
			os.RemoveAll(dir)
		}
	}
	return nil
}

// abPair is a batchkit contender of the drain and its raw twin.
type abPair struct {
	workers       int
	batchkit, raw *contender
}

// drainPairs returns the drain's group's batchkit contenders, at the
// default workers and at groupWorkers, each with its raw twin.
func drainPairs(group string) []abPair {
	switch group {
	case sqliteNormal, sqliteFull:
		sync := batchstore.SyncNormal
		if group == sqliteFull {
			sync = batchstore.SyncFull
		}
		return []abPair{
			{batch.DefaultWorkers, batchkitSQLite(sync, group), rawSQLite(string(sync), group)},
			{groupWorkers, batchkitSQLiteWorkers(sync, group, groupWorkers), rawSQLite(string(sync), group)},
		}
	case postgres4:
		return []abPair{{4, batchkitPG(postgres4, 4), rawPG(postgres4, 4)}}
	default:
		return []abPair{{batch.DefaultWorkers, batchkitPG(postgres, batch.DefaultWorkers), rawPG(postgres, batch.DefaultWorkers)}}
	}
}

// orderOf returns a pass's variants of a measurement: nothing switched
// off, then each measured mechanism that in says is measured there; nil
// if none is.
func (rep *ablationReport) orderOf(in func(abMechanism) bool) []abMechanism {
	order := []abMechanism{{}}
	for _, m := range rep.Mechs {
		if in(m) {
			order = append(order, m)
		}
	}
	if len(order) == 1 {
		return nil
	}
	return order
}

// inPass returns the variants in pass's order: as listed in even passes,
// reversed in odd ones.
func inPass(order []abMechanism, pass int) []abMechanism {
	if pass%2 == 0 {
		return order
	}
	return reversed(order)
}

func reversed[T any](s []T) []T {
	out := make([]T, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}

func orNone(key string) string {
	if key == "" {
		return "none"
	}
	return key
}

// gitCommit names the commit the run measures, or "" outside a checkout;
// "+" marks uncommitted changes.
func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	c := strings.TrimSpace(string(out))
	if out, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(out))) > 0 {
		c += "+"
	}
	return c
}
