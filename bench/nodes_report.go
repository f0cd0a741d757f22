package main

import (
	"fmt"
	"strings"
)

// nodesFigures are the many-nodes model's figures per target: the cost
// phase's, but for WAL (server-wide, so other work counts) and HOT.
var nodesFigures = []figure{costFigures[0], costFigures[2], costFigures[3], costFigures[4], costFigures[5], costFigures[6], costFigures[7], costFigures[9]}

// values returns figure f of each of n runners' runs.
func (p *nodesReport) values(n int, f figure) []float64 {
	var out []float64
	for _, r := range p.Runs[n] {
		out = append(out, f.of(r.costRun))
	}
	return out
}

// perSecond returns v of each of n runners' runs over the window.
func (p *nodesReport) perSecond(n int, v func(nodesRun) int) []float64 {
	var out []float64
	for _, r := range p.Runs[n] {
		out = append(out, float64(v(r))/p.Work.Window.Seconds())
	}
	return out
}

// cpuRatio is the most runners' server CPU per target over the
// reference's, round by round.
func (p *nodesReport) cpuRatio() spread {
	w := p.Work
	return spreadOf(ratios(p.values(w.Runners[len(w.Runners)-1], costFigures[0]), p.values(w.Runners[0], costFigures[0])))
}

func (r *report) nodesSection(b *md) {
	p := r.Nodes
	if p == nil {
		return
	}
	w := p.Work
	b.p("## PostgreSQL: many nodes on one database")
	b.p("What a target costs the database as the nodes sharing it grow, at the same offered load. A contender is R runners in one process, "+
		"each with a store, a pool and a runner id of its own (and so its own heartbeats, polls and sweeps), as R processes would be, on one "+
		"schema; together they have %d fetch slots, split evenly, and are offered %s targets per second: jobs of 1 to 32 targets submitted at "+
		"random (Poisson) times, round robin over the runners, to a fetch that waits a lognormal time (median %s, σ %.1f, mean %s: the "+
		"network's latencies compressed so that the store is under real pressure) on %d hosts. The runners run at their defaults otherwise. "+
		"After a %s warm-up a %s window measures, per target finished in it, the cost phase's figures (above); %d round%s, the runner counts "+
		"in turn. The phase took %s.",
		w.Slots, fmtRate(w.Rate), fmtDur(w.Median), w.Sigma, fmtDur(w.meanLatency()), w.Hosts, fmtDur(w.Warm), fmtDur(w.Window),
		w.Rounds, map[bool]string{true: "s"}[w.Rounds > 1], p.Elapsed.Round(1e9))
	cols := []string{"per target"}
	for _, n := range w.Runners {
		k := max(w.Slots/n, 1)
		cols = append(cols, fmt.Sprintf("%d runner%s × %d worker%s", n, map[bool]string{true: "s"}[n > 1], k, map[bool]string{true: "s"}[k > 1]))
	}
	b.head(cols...)
	rows := []struct {
		name string
		v    func(nodesRun) int
	}{
		{"targets submitted per second", func(r nodesRun) int { return r.Offered }},
		{"targets finished per second", func(r nodesRun) int { return r.Finished }},
	}
	for _, x := range rows {
		row := []string{x.name}
		for _, n := range w.Runners {
			row = append(row, fmtSpread(spreadOf(p.perSecond(n, x.v)), fmtRate))
		}
		b.row(row...)
	}
	for _, f := range nodesFigures {
		if f.name == costFigures[2].name && !p.PGSS {
			continue // pg_stat_statements is not installed
		}
		row := []string{f.name}
		for _, n := range w.Runners {
			row = append(row, fmtSpread(spreadOf(p.values(n, f)), f.fmt))
		}
		b.row(row...)
	}
	b.line("")
	var waits []string
	for _, n := range w.Runners {
		var runs []costRun
		for _, r := range p.Runs[n] {
			runs = append(runs, r.costRun)
		}
		waits = append(waits, fmt.Sprintf("%d runners: %s", n, orDash(topWaits(runs, 4))))
	}
	b.p("Most sampled waits: %s.", strings.Join(waits, "; "))
}

// goalNodesCPU bounds the server CPU per target of the most runners over
// one runner's, at the same offered load.
const goalNodesCPU = 1.2

// nodesGoal judges the many-nodes model: server CPU per target of the most
// runners within goalNodesCPU× one runner's.
func (r *report) nodesGoal() goal {
	p := r.Nodes
	if p == nil || len(p.Work.Runners) < 2 {
		return goal{Goal: fmt.Sprintf("many nodes: server CPU per target ≤ %.1f× one runner's", goalNodesCPU), State: "not measured",
			Why: "the many-nodes phase did not run (it needs PostgreSQL)"}
	}
	w := p.Work
	n := w.Runners[len(w.Runners)-1]
	s := p.cpuRatio()
	g := goal{Goal: fmt.Sprintf("%d runners: server CPU per target ≤ %.1f× %d runner's, same offered load", n, goalNodesCPU, w.Runners[0]),
		Figure: fmtSpread(s, fmtRatio), State: verdict(s.Median <= goalNodesCPU)}
	if g.State == "missed" {
		g.Why = "see the many-nodes table: the statements, commits and waits per target beside the CPU"
	}
	return g
}
