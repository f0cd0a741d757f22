package main

import (
	"fmt"
	"strings"
)

// nodesFigures are the many-nodes model's figures per target: the cost
// phase's, but for WAL (server-wide, so other work counts) and HOT.
var nodesFigures = []figure{costFigures[0], costFigures[2], costFigures[3], costFigures[4], costFigures[5], costFigures[6], costFigures[7], costFigures[9]}

// nodesColumn is one contender's runs, as the report shows them.
type nodesColumn struct {
	name string
	runs []nodesRun
}

// columns returns the contenders in the report's order: each runner
// count, then one runner over the most runners' connections.
func (p *nodesReport) columns() []nodesColumn {
	w := p.Work
	var cs []nodesColumn
	for _, n := range w.Runners {
		cs = append(cs, nodesColumn{plural(n, "runner") + " × " + plural(w.workers(n), "worker"), p.Runs[n]})
	}
	if len(p.Wide) > 0 {
		cs = append(cs, nodesColumn{fmt.Sprintf("1 runner × %d workers, %d connections", w.Slots, w.wideConns()), p.Wide})
	}
	return cs
}

// values returns figure f of each run.
func values(runs []nodesRun, f figure) []float64 {
	var out []float64
	for _, r := range runs {
		out = append(out, f.of(r.costRun))
	}
	return out
}

// perSecond returns v of each run over the window.
func (p *nodesReport) perSecond(runs []nodesRun, v func(nodesRun) int) []float64 {
	var out []float64
	for _, r := range runs {
		out = append(out, float64(v(r))/p.Work.Window.Seconds())
	}
	return out
}

// cpuRatio is the most runners' server CPU per target over ref's, round
// by round.
func (p *nodesReport) cpuRatio(ref []nodesRun) spread {
	w := p.Work
	return spreadOf(ratios(values(p.Runs[w.most()], costFigures[0]), values(ref, costFigures[0])))
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
	if len(p.Wide) > 0 {
		b.p("The last column separates what the runners cost from what the server's connections cost: one runner, as in the first, "+
			"whose one pool has %d connections, all open, as the %d runners' pools together (their listeners aside): the same "+
			"statements as one runner's, spread over as many backends as the many runners' are.", w.wideConns(), w.most())
	}
	cs := p.columns()
	cols := []string{"per target"}
	for _, c := range cs {
		cols = append(cols, c.name)
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
		for _, c := range cs {
			row = append(row, fmtSpread(spreadOf(p.perSecond(c.runs, x.v)), fmtRate))
		}
		b.row(row...)
	}
	for _, f := range nodesFigures {
		if f.name == costFigures[2].name && !p.PGSS {
			continue // pg_stat_statements is not installed
		}
		row := []string{f.name}
		for _, c := range cs {
			row = append(row, fmtSpread(spreadOf(values(c.runs, f)), f.fmt))
		}
		b.row(row...)
	}
	b.line("")
	var waits []string
	for _, c := range cs {
		var runs []costRun
		for _, r := range c.runs {
			runs = append(runs, r.costRun)
		}
		waits = append(waits, fmt.Sprintf("%s: %s", c.name, orDash(topWaits(runs, 4))))
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
	n := w.most()
	s := p.cpuRatio(p.Runs[w.Runners[0]])
	g := goal{Goal: fmt.Sprintf("%d runners: server CPU per target ≤ %.1f× %d runner's, same offered load", n, goalNodesCPU, w.Runners[0]),
		Figure: fmtSpread(s, fmtRatio), State: verdict(s.Median <= goalNodesCPU)}
	if g.State != "missed" {
		return g
	}
	g.Why = "see the many-nodes table: the statements, commits and waits per target beside the CPU"
	if len(p.Wide) > 0 {
		med := func(runs []nodesRun, f figure) float64 { return spreadOf(values(runs, f)).Median }
		one, many := p.Runs[w.Runners[0]], p.Runs[n]
		g.Why = fmt.Sprintf("one runner's own statements cost %s as much spread over %d connections, as many as the %d runners' pools "+
			"have; the %d runners cost %s of that, with %s statements sent and %s commits per target against its %s and %s; "+
			"see the many-nodes table",
			fmtRatio(med(p.Wide, costFigures[0])/med(one, costFigures[0])), w.wideConns(), n, n, fmtRatio(p.cpuRatio(p.Wide).Median),
			costFigures[3].fmt(med(many, costFigures[3])), costFigures[5].fmt(med(many, costFigures[5])),
			costFigures[3].fmt(med(p.Wide, costFigures[3])), costFigures[5].fmt(med(p.Wide, costFigures[5])))
	}
	return g
}
