package main

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchstore"
)

// sizes are the sizes of every phase: the full run's, or the smoke run's.
type sizes struct {
	drain      drainWork
	rounds     int // drain rounds
	slowRounds int // rounds that the slow (README-setting chain) contenders run
	sweep      bool
	pgOnly     bool // the PostgreSQL contenders alone

	httpPhase  time.Duration // one route at one concurrency
	httpMax    int           // requests in one phase at most
	httpAgents []int

	memJobs     int // live jobs for the per-job figure
	memPeakJobs int // the peak-heap drain: jobs × memPeakItems × memPeakBytes
	memPeakItem int
	memPeakSize int

	only *regexp.Regexp // when set, the drain runs only the contenders whose key it matches, and no sweep

	growth    []int         // stored jobs
	growthOps int           // operations of each kind per size, at most
	growthFor time.Duration // time of each kind per size, at most

	nodes nodesWork // the many-nodes model
}

func sizesFor(o options) sizes {
	s := sizesOf(o)
	s.pgOnly = o.pgOnly
	return s
}

func sizesOf(o options) sizes {
	if o.short {
		return sizes{
			drain: drainWork{Jobs: 4, Items: 4, ResultBytes: 10 << 10}, rounds: 1, slowRounds: 1,
			httpPhase: 150 * time.Millisecond, httpMax: 2000, httpAgents: []int{1, 10, 50},
			memJobs: 50, memPeakJobs: 2, memPeakItem: 4, memPeakSize: 256 << 10,
			growth: []int{10, 100, 1000}, growthOps: 20, growthFor: 200 * time.Millisecond,
			nodes: nodesWork{Runners: []int{1, 4}, Slots: 4, Rate: 60, Median: 5 * time.Millisecond, Sigma: 0.8, Hosts: 16,
				Warm: 300 * time.Millisecond, Window: time.Second, Rounds: 1},
		}
	}
	s := sizes{
		drain: drainWork{Jobs: 64, Items: 32, ResultBytes: 10 << 10}, rounds: 5, slowRounds: 3, sweep: true,
		httpPhase: 3 * time.Second, httpMax: 100_000, httpAgents: []int{1, 10, 50},
		memJobs: 1000, memPeakJobs: 8, memPeakItem: 32, memPeakSize: 256 << 10,
		growth: []int{1_000, 10_000, 100_000}, growthOps: 2000, growthFor: 2 * time.Second,
		nodes: nodesWork{Runners: []int{1, 8, 32}, Slots: 32, Rate: 300, Median: 20 * time.Millisecond, Sigma: 0.8, Hosts: 256,
			Warm: 5 * time.Second, Window: 20 * time.Second, Rounds: 2},
	}
	if o.only != nil {
		s.only, s.sweep = o.only, false
	}
	if o.rounds > 0 {
		s.rounds = o.rounds
		s.slowRounds = min(s.slowRounds, o.rounds)
	}
	return s
}

// groupWorkers is the workers of the group-commit contender: several jobs
// draining at once, whose target writes the SQLite store commits together.
const groupWorkers = 4

// drainReport is the drain phase's outcome.
type drainReport struct {
	*drainResult
	Sweeps []sweepResult
}

// tuning is the tuned configuration of each peer and model.
type tuning struct {
	riverSQLite, riverPG map[string]riverCfg
	goqite               map[string]goqiteCfg
}

// drainPhase picks the tuned peer settings (a sweep, in the full run) and
// runs the interleaved rounds.
func drainPhase(ctx context.Context, sz sizes, tmp, pgURL string) (*drainReport, error) {
	e, err := newDrainEnv(sz.drain, tmp, pgURL)
	if err != nil {
		return nil, err
	}
	rep := &drainReport{}
	tu := tuning{riverSQLite: map[string]riverCfg{}, riverPG: map[string]riverCfg{}, goqite: map[string]goqiteCfg{}}
	for _, model := range []string{modelChain, modelLoop} {
		tu.riverSQLite[model], tu.riverPG[model], tu.goqite[model] = riverSweep[0], riverPGSweep[0], goqiteSweep[0]
		if !sz.sweep {
			continue
		}
		var cs []*contender
		var sw sweepResult
		if sz.pgOnly {
			goto pg
		}
		for _, cfg := range riverSweep {
			cs = append(cs, riverSQLite("NORMAL", sqliteNormal, model, cfg, true))
		}
		if sw, err = sweep(ctx, e, "River (riversqlite), "+model+", synchronous=NORMAL", cs); err != nil {
			return nil, err
		}
		rep.Sweeps, tu.riverSQLite[model] = append(rep.Sweeps, sw), riverSweep[sw.Best]
		cs = nil
		for _, cfg := range goqiteSweep {
			cs = append(cs, goqiteSQLite("NORMAL", sqliteNormal, model, cfg, true))
		}
		if sw, err = sweep(ctx, e, "goqite, "+model+", synchronous=NORMAL", cs); err != nil {
			return nil, err
		}
		rep.Sweeps, tu.goqite[model] = append(rep.Sweeps, sw), goqiteSweep[sw.Best]
	pg:
		if pgURL == "" {
			continue
		}
		cs = nil
		for _, cfg := range riverPGSweep {
			cs = append(cs, riverPG(model, cfg, true))
		}
		if sw, err = sweep(ctx, e, "River (riverpgxv5), "+model, cs); err != nil {
			return nil, err
		}
		rep.Sweeps, tu.riverPG[model] = append(rep.Sweeps, sw), riverPGSweep[sw.Best]
	}
	var cs []*contender
	for _, g := range []struct {
		sync  batchstore.Synchronous
		group string
	}{{batchstore.SyncNormal, sqliteNormal}, {batchstore.SyncFull, sqliteFull}} {
		if sz.pgOnly {
			break
		}
		s := string(g.sync)
		cs = append(cs, batchkitSQLite(g.sync, g.group), batchkitSQLiteWorkers(g.sync, g.group, groupWorkers), rawSQLite(s, g.group))
		for _, model := range []string{modelChain, modelLoop} {
			cs = append(cs,
				riverSQLite(s, g.group, model, riverREADME, false),
				riverSQLite(s, g.group, model, tu.riverSQLite[model], true))
		}
		for _, model := range []string{modelChain, modelLoop} {
			cs = append(cs,
				goqiteSQLite(s, g.group, model, goqiteREADME, false),
				goqiteSQLite(s, g.group, model, tu.goqite[model], true))
		}
	}
	if pgURL != "" {
		cs = append(cs, batchkitPG(postgres, batch.DefaultWorkers), rawPG(postgres, batch.DefaultWorkers))
		for _, model := range []string{modelChain, modelLoop} {
			cs = append(cs, riverPG(model, riverREADME, false), riverPG(model, tu.riverPG[model], true))
		}
		// Four workers against four connections, where group commit has
		// jobs to share commits between; River is its tuned self again,
		// so that the ratios are taken within the group's rounds.
		cs = append(cs, batchkitPG(postgres4, 4), rawPG(postgres4, 4))
		for _, model := range []string{modelChain, modelLoop} {
			c := riverPG(model, tu.riverPG[model], true)
			c.Group, c.Key = postgres4, strings.Replace(c.Key, "postgres/", "postgres4/", 1)
			cs = append(cs, c)
		}
	}
	if sz.only != nil {
		cs = slices.DeleteFunc(cs, func(c *contender) bool { return !sz.only.MatchString(c.Key) })
	}
	res, err := runDrain(ctx, e, cs, sz.rounds, sz.slowRounds, logf)
	if err != nil {
		return nil, err
	}
	rep.drainResult = res
	return rep, nil
}

// The tuning sweeps: River's fetch settings (FetchCooldown, the floor
// between fetches, and FetchPollInterval, the fallback poll) and
// goqite's runner settings (Limit, the jobs run at once, and
// PollInterval, which the runner sleeps whenever Limit jobs run and
// between polls of an empty queue), each within its documented range,
// tried on one round of each model at synchronous=NORMAL (SQLite) or on
// PostgreSQL; the fastest is "tuned" for that model, at both synchronous
// settings. The first of each list is what a smoke run uses.
var (
	riverSweep = []riverCfg{
		{MaxWorkers: 100, FetchCooldown: time.Millisecond, FetchPollInterval: 5 * time.Millisecond},
		{MaxWorkers: 100, FetchCooldown: 2 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond}, // river bench's
		{MaxWorkers: 100, FetchCooldown: time.Millisecond, FetchPollInterval: time.Millisecond},
		{MaxWorkers: 100, FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond},
		{MaxWorkers: 2, FetchCooldown: time.Millisecond, FetchPollInterval: 5 * time.Millisecond},
	}
	riverPGSweep = []riverCfg{
		{MaxWorkers: 100, FetchCooldown: time.Millisecond, FetchPollInterval: 5 * time.Millisecond},
		{MaxWorkers: 100, FetchCooldown: 2 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond},
		{MaxWorkers: 100, FetchCooldown: time.Millisecond, FetchPollInterval: time.Millisecond},
		{MaxWorkers: 100, FetchCooldown: time.Millisecond, FetchPollInterval: 5 * time.Millisecond, PoolConns: 8},
		{MaxWorkers: 100, FetchCooldown: time.Millisecond, FetchPollInterval: 5 * time.Millisecond, PoolConns: 2},
	}
	goqiteSweep = []goqiteCfg{
		{Limit: 64, PollInterval: time.Millisecond},
		{Limit: 2, PollInterval: time.Millisecond},
		{Limit: 16, PollInterval: time.Millisecond},
		{Limit: 100, PollInterval: 5 * time.Millisecond},
		{Limit: 64, PollInterval: 10 * time.Millisecond},
	}
)

// sweepResult is one sweep: each candidate's items/s and the fastest.
type sweepResult struct {
	Name     string
	Settings []string
	Rates    []float64
	Best     int
}

func sweep(ctx context.Context, e *drainEnv, name string, cs []*contender) (sweepResult, error) {
	sw := sweepResult{Name: name}
	bestRate := math.Inf(-1)
	for i, c := range cs {
		rctx, cancel := context.WithTimeout(ctx, roundTimeout)
		d, err := c.Run(rctx, e)
		cancel()
		if err != nil {
			return sw, fmt.Errorf("sweep %s, %s: %w", name, c.Tuning, err)
		}
		rate := float64(e.work.total()) / d.Seconds()
		logf("sweep %-44s %8.0f items/s  %s", name, rate, c.Tuning)
		sw.Settings = append(sw.Settings, c.Tuning)
		sw.Rates = append(sw.Rates, rate)
		if rate > bestRate {
			bestRate, sw.Best = rate, i
		}
	}
	return sw, nil
}
