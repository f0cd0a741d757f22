package main

import (
	"fmt"
	"math"
	"strings"
)

// The goals, each judged on this run's figures.

const (
	goalRawSQLite  = 0.95 // batchkit SQLite ÷ raw twin, same synchronous setting: no regression
	goalPeerSQLite = 1.8  // batchkit SQLite ÷ the faster tuned peer
	// batchkit SQLite at groupWorkers workers ÷ raw twin: group commit
	// under FULL, and no loss for it under NORMAL.
	goalGroupFull   = 2.0
	goalGroupNormal = 1.0
	goalRawPG4      = 1.0  // retired: batchkit PostgreSQL, 4 workers ÷ raw pgx twin, 4 connections
	goalRiverPG4    = 1.25 // batchkit PostgreSQL, 4 workers ÷ River-pgx's best tuned model
	goalRawPG2      = 0.9  // retired: batchkit PostgreSQL, 2 workers ÷ raw pgx twin, 2 connections
	goalWALPG       = 1.1  // batchkit's WAL bytes per target ÷ the twin's, at most
	goalNodesPG     = 0.10 // 3 nodes' per-target cost within this of 1 node's
	goalGrowth      = 2.0  // per-operation cost at the largest size ÷ at the smallest
	goalJobBytes    = 32_000
)

// goal is one goal's verdict.
type goal struct {
	Goal, Figure string
	State        string // "met", "missed" or "not measured"
	Why          string // where missed: why
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

func (r *report) goals() []goal {
	gs := r.agentDayGoals()
	d := r.Drain
	notMeasured := func(text, why string) { gs = append(gs, goal{Goal: text, State: "not measured", Why: why}) }
	for _, g := range []string{sqliteNormal, sqliteFull} {
		text := fmt.Sprintf("SQLite drain ≥ %.2f× the raw twin at %s", goalRawSQLite, strings.TrimPrefix(g, "SQLite, "))
		raw := findOrNil(d, g, "raw")
		if raw == nil {
			notMeasured(text, "the drain did not run")
			continue
		}
		s := d.ratio(g, raw.Key)
		gl := goal{Goal: text, Figure: fmtSpread(s, fmtRatio), State: verdict(s.Median >= goalRawSQLite)}
		if gl.State == "missed" {
			gl.Why = "batchkit's one write per target stores more than the twin's: the target's status, outcome and byte count, the result " +
				"in a row of its own and the next target's start, under a check that its runner still holds the job; the twin rewrites one " +
				"row and bumps a counter."
		}
		gs = append(gs, gl)
	}
	for _, g := range []struct {
		group string
		want  float64
	}{{sqliteNormal, goalGroupNormal}, {sqliteFull, goalGroupFull}} {
		text := fmt.Sprintf("SQLite drain at %d workers ≥ %.1f× the raw twin at %s", groupWorkers, g.want, strings.TrimPrefix(g.group, "SQLite, "))
		raw, bk := findOrNil(d, g.group, "raw"), findOrNil(d, g.group, groupPeer)
		if raw == nil || bk == nil {
			notMeasured(text, "the drain did not run")
			continue
		}
		s := d.ratioOf(bk.Key, raw.Key)
		gl := goal{Goal: text, Figure: fmtSpread(s, fmtRatio), State: verdict(s.Median >= g.want)}
		if gl.State == "missed" {
			gl.Why = "the writer's groups did not grow large enough in this run to pay for the store's larger write per target " +
				"(batchstore's BenchmarkDrain counts the commits per target)"
		}
		gs = append(gs, gl)
	}
	for _, g := range []string{sqliteNormal, sqliteFull} {
		text := fmt.Sprintf("SQLite drain ≥ %.1f× the faster tuned peer at %s", goalPeerSQLite, strings.TrimPrefix(g, "SQLite, "))
		f := fastestOrNil(d, g, "river", "goqite")
		if f == nil {
			notMeasured(text, "the drain did not run")
			continue
		}
		s := d.ratio(g, f.Key)
		gl := goal{Goal: text, Figure: fmt.Sprintf("%s against %s", fmtSpread(s, fmtRatio), f.Name), State: verdict(s.Median >= goalPeerSQLite)}
		if gl.State == "missed" {
			gl.Why = d.peerWhy(g, f, goalPeerSQLite)
		}
		gs = append(gs, gl)
	}
	if r.PGMissing != "" {
		notMeasured("PostgreSQL goals", r.PGMissing)
	} else {
		gs = append(gs, r.pgGoals()...)
	}
	gs = append(gs, r.growthGoal(), r.memoryGoal())
	gs = append(gs, r.nodesGoal())
	return gs
}

func findOrNil(d *drainReport, group, peer string) *contender {
	if d == nil {
		return nil
	}
	return d.find(group, peer, false, "")
}

func fastestOrNil(d *drainReport, group string, peers ...string) *contender {
	if d == nil {
		return nil
	}
	return d.fastestTuned(group, peers...)
}

// peerWhy explains a missed lead over peer f: how close f itself comes to
// the raw twin bounds the lead batchkit can have.
func (d *drainReport) peerWhy(group string, f *contender, want float64) string {
	raw := d.find(group, "raw", false, "")
	fr, _ := d.rates(f.Key)
	rr, _ := d.rates(raw.Key)
	peerRaw := spreadOf(ratios(fr, rr)).Median
	bkRaw := d.ratio(group, raw.Key).Median
	how := "per item it runs the item through its queue"
	if strings.Contains(f.Key, "-"+modelLoop+"-") {
		how = "per item it does the twin's work, and its queue's work once per job"
	}
	s := fmt.Sprintf("%s drains at %s the raw twin here (per-round median): %s. A %.2f× lead over it would need batchkit at %s "+
		"the twin, and batchkit drains at %s it.", f.Name, fmtRatio(peerRaw), how, want, fmtRatio(want*peerRaw), fmtRatio(bkRaw))
	if strings.Contains(f.Key, "-"+modelLoop+"-") {
		s += " Against the same peer's chain model, which runs each item through its queue, the lead is " + d.chainLead(group, f.Peer) + "."
	}
	return s
}

// chainLead is batchkit's per-round median ratio over peer's tuned chain
// configuration in group.
func (d *drainReport) chainLead(group, peer string) string {
	c := d.find(group, peer, true, modelChain)
	if c == nil {
		return "not measured"
	}
	return fmtRatio(d.ratio(group, c.Key).Median) + " (" + c.Name + ")"
}

func (r *report) growthGoal() goal {
	g := goal{Goal: fmt.Sprintf("per-operation cost at %s stored jobs ≤ %.0f× at %s", "100k", goalGrowth, "1k")}
	if r.Growth == nil || len(r.Growth.Sizes) < 2 {
		g.State, g.Why = "not measured", "the growth phase did not run"
		return g
	}
	sz := r.Growth.Sizes
	first, last := sz[0], sz[len(sz)-1]
	g.Goal = fmt.Sprintf("per-operation cost at %s stored jobs ≤ %.0f× at %s", fmtRate(float64(last)), goalGrowth, fmtRate(float64(first)))
	var figs, over []string
	for _, s := range r.Growth.Stores {
		for _, op := range growthOps {
			x := s.growth(op, first, last)
			figs = append(figs, fmt.Sprintf("%s %s %s", s.Name, op, fmtRatio(x)))
			if math.IsNaN(x) || x > goalGrowth {
				over = append(over, fmt.Sprintf("%s %s (%s → %s)", s.Name, op, fmtDur(s.median(op, first)), fmtDur(s.median(op, last))))
			}
		}
	}
	g.Figure = strings.Join(figs, "; ")
	g.State = verdict(len(over) == 0)
	if len(over) > 0 {
		g.Why = "over the goal: " + strings.Join(over, "; ") + ". The stores' query-plan tests (plan_test.go) check that their " +
			"statements read through indexes; this run did not profile where the extra time goes."
	}
	return g
}

func (r *report) memoryGoal() goal {
	g := goal{Goal: "≤ 32 KB (32,000 bytes) of memory per live job, results excluded"}
	if r.Memory == nil {
		g.State, g.Why = "not measured", "the memory phase did not run"
		return g
	}
	l := r.Memory.Live
	g.Figure = fmt.Sprintf("heap %s, RSS %s per live job (%s jobs)", fmtBytes(l.heapPerJob()), fmtBytes(l.rssPerJob()), fmtRate(float64(l.Jobs)))
	g.State = verdict(l.heapPerJob() <= goalJobBytes && l.rssPerJob() <= goalJobBytes)
	if g.State == "missed" {
		g.Why = "the RSS a live job adds is mostly SQLite's page cache and WAL index growing with its rows; the Go heap per job is " +
			fmtBytes(l.heapPerJob()) + "."
	}
	return g
}

func (r *report) goalsSection(b *md) {
	b.p("## Goals")
	b.p("The issue's goals, each judged on this run's figures (a per-round median, with its range, where the figure is a drain ratio).")
	b.head("goal", "figure", "verdict", "why, where missed")
	for _, g := range r.goals() {
		state := g.State
		if state == "met" || state == "missed" {
			state = "**" + state + "**"
		}
		b.row(g.Goal, orDash(g.Figure), state, orDash(g.Why))
	}
	b.line("")
}

// closingSection quotes the headline ratios: batchkit's drain over each
// contender, per-round medians with their ranges.
func (r *report) closingSection(b *md) {
	d := r.Drain
	b.p("## Closing note: the headline ratios")
	if d == nil {
		b.p("The drain did not run.")
		return
	}
	b.p("batchkit's drain rate over each contender's, per-round median (min–max), from the tables above.")
	groups := d.groups()
	cols := append([]string{"batchkit ÷"}, groups...)
	b.head(cols...)
	type rowSpec struct {
		label, peer, model string
		tuned              bool
	}
	rows := []rowSpec{{label: "raw twin (the ceiling)", peer: "raw"}}
	for _, peer := range []struct{ key, name string }{{"river", "River"}, {"goqite", "goqite"}} {
		for _, model := range []string{modelChain, modelLoop} {
			for _, tuned := range []bool{false, true} {
				rows = append(rows, rowSpec{label: fmt.Sprintf("%s, %s, %s", peer.name, model, settingsWord(tuned)), peer: peer.key, model: model, tuned: tuned})
			}
		}
	}
	for _, rs := range rows {
		cells := []string{rs.label}
		for _, g := range groups {
			c := d.find(g, rs.peer, rs.tuned, rs.model)
			if c == nil {
				cells = append(cells, "—")
				continue
			}
			cells = append(cells, fmtSpread(d.ratio(g, c.Key), fmtRatio))
		}
		b.row(cells...)
	}
	b.line("")
	var lines []string
	for _, g := range groups {
		raw := d.find(g, "raw", false, "")
		peers := []string{"river", "goqite"}
		if g == postgres || g == postgres4 {
			peers = []string{"river"}
		}
		f := d.fastestTuned(g, peers...)
		if raw == nil || f == nil {
			continue
		}
		_, bk := d.rates(d.find(g, "batchkit", false, "").Key)
		lines = append(lines, fmt.Sprintf("- %s: batchkit drains %s items/s, %s the raw twin and %s the fastest tuned peer (%s).",
			g, fmtRate(bk.Median), fmtRatio(d.ratio(g, raw.Key).Median), fmtRatio(d.ratio(g, f.Key).Median), f.Name))
	}
	full, normal := d.find(sqliteFull, groupPeer, false, ""), d.find(sqliteNormal, groupPeer, false, "")
	rawFull, rawNormal := d.find(sqliteFull, "raw", false, ""), d.find(sqliteNormal, "raw", false, "")
	if full != nil && normal != nil && rawFull != nil && rawNormal != nil {
		lines = append(lines, fmt.Sprintf("- SQLite with %d workers (group commit): %s the raw twin at synchronous=NORMAL, %s at FULL; "+
			"FULL drains at %s NORMAL's rate.", groupWorkers, fmtRatio(d.ratioOf(normal.Key, rawNormal.Key).Median),
			fmtRatio(d.ratioOf(full.Key, rawFull.Key).Median), fmtRatio(d.ratioOf(full.Key, normal.Key).Median)))
	}
	for _, l := range lines {
		b.line("%s", l)
	}
	b.line("")
}
