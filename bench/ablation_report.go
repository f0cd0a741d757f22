package main

import (
	"cmp"
	"fmt"
	"math"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The ablation's section of the report, and its verdicts.

// abFigure is the least change, on a reported measure, that makes a
// mechanism keep its place.
const abFigure = 0.05

// abMeasure is one measure of the ablation's agent day runs.
type abMeasure struct {
	name  string
	of    func(*adRun) float64 // NaN where not measured
	lower bool                 // lower is better
	fmt   func(float64) string
}

func fmtSec(v float64) string { return fmtDur(time.Duration(v * float64(time.Second))) }
func fmtUtil(v float64) string {
	return fmt.Sprintf("%.3f", v)
}

func durOf(d time.Duration) float64 { return d.Seconds() }

var abMeasures = []abMeasure{
	{"utilization", func(r *adRun) float64 { return r.util() }, false, fmtUtil},
	{"write p50", func(r *adRun) float64 { return durOf(r.Node.Write.P50) }, true, fmtSec},
	{"submit p99", func(r *adRun) float64 { return durOf(quantile(r.Submit, 0.99)) }, true, fmtSec},
	{"status p99", func(r *adRun) float64 { return durOf(quantile(r.Status, 0.99)) }, true, fmtSec},
	{"one result p99", func(r *adRun) float64 { return durOf(quantile(r.Result, 0.99)) }, true, fmtSec},
	{"readable p99", func(r *adRun) float64 { return durOf(r.Node.Readable.P99) }, true, fmtSec},
	{"node CPU per target", func(r *adRun) float64 { return durOf(r.perTarget(r.Node.CPU)) }, true, fmtSec},
	{"PostgreSQL CPU per target", func(r *adRun) float64 {
		if r.Case.Store != storePostgres {
			return math.NaN()
		}
		return durOf(r.perTarget(r.Cost.PGCPU))
	}, true, fmtSec},
}

// abNodeMeasures are the many-nodes model's measures of the ablation:
// server CPU, statements sent and commits per target, and heavyweight
// lock waits per 1,000 targets.
var abNodeMeasures = []figure{costFigures[0], costFigures[3], costFigures[5], costFigures[6]}

// abCompare is one measure of one mechanism, switched off, against the
// stores as they are.
type abCompare struct {
	on, off []float64 // per pass
	lower   bool
	noise   float64 // the measure's noise (see ablationReport.noise)
}

// worse is how much worse off is than on in each pass, as a fraction
// (negative where off is better).
func (c abCompare) worse() []float64 {
	var w []float64
	for i := range min(len(c.on), len(c.off)) {
		on, off := c.on[i], c.off[i]
		if math.IsNaN(on) || math.IsNaN(off) || on <= 0 || off <= 0 {
			return nil
		}
		if c.lower {
			w = append(w, off/on-1)
		} else {
			w = append(w, on/off-1)
		}
	}
	return w
}

// spreadOfRuns is the relative spread of one variant's runs.
func spreadOfRuns(v []float64) float64 {
	if len(v) < 2 || slices.ContainsFunc(v, math.IsNaN) {
		return 0
	}
	lo, hi := slices.Min(v), slices.Max(v)
	if lo <= 0 {
		return math.Inf(1)
	}
	return hi/lo - 1
}

// figure reports whether off is worse than on by abFigure or more in every
// pass, and on average by more than the noise, and the average.
func (c abCompare) figure() (float64, bool) {
	w := c.worse()
	if len(w) == 0 {
		return 0, false
	}
	mean := 0.0
	for _, v := range w {
		mean += v
	}
	mean /= float64(len(w))
	return mean, slices.Min(w) >= abFigure && mean > c.noise
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// compare returns measure m of mechanism mech on a load and a case; its
// noise is how far apart that load and case's runs with nothing switched
// off came on m.
func (a *ablationReport) compare(load, caseKey, mech string, m abMeasure) abCompare {
	c := abCompare{lower: m.lower}
	for _, r := range a.Runs[abKey{load, caseKey, ""}] {
		c.on = append(c.on, m.of(r))
	}
	c.noise = spreadOfRuns(c.on)
	for _, r := range a.Runs[abKey{load, caseKey, mech}] {
		c.off = append(c.off, m.of(r))
	}
	return c
}

func (a *ablationReport) compareNodes(mech string, f figure) abCompare {
	c := abCompare{lower: true}
	for _, r := range a.NodeRuns[""] {
		c.on = append(c.on, f.of(r.costRun))
	}
	c.noise = spreadOfRuns(c.on)
	for _, r := range a.NodeRuns[mech] {
		c.off = append(c.off, f.of(r.costRun))
	}
	return c
}

// drainKeys returns the drain's figures of mechanism m, in order.
func (a *ablationReport) drainKeys(m abMechanism) []abDrainKey {
	var ks []abDrainKey
	for k := range a.Drain {
		if k.Mech == m.Key {
			ks = append(ks, k)
		}
	}
	slices.SortFunc(ks, func(x, y abDrainKey) int {
		return cmp.Or(cmp.Compare(slices.Index(drainGroups, x.Group), slices.Index(drainGroups, y.Group)), cmp.Compare(x.Workers, y.Workers))
	})
	return ks
}

// drainGroups orders the drain's groups.
var drainGroups = []string{sqliteNormal, sqliteFull, postgres, postgres4}

// compareDrain returns the drain's figure k against the same with nothing
// switched off; its noise is how far apart that group and workers' drains
// with nothing off came.
func (a *ablationReport) compareDrain(k abDrainKey) abCompare {
	c := abCompare{off: a.Drain[k], on: a.Drain[abDrainKey{k.Group, k.Workers, ""}]}
	c.noise = spreadOfRuns(c.on)
	return c
}

// abReadMeasures are the read load's measures.
var abReadMeasures = []struct {
	name  string
	of    func(loadResult) float64
	lower bool
	fmt   func(float64) string
}{
	{"req/s", func(r loadResult) float64 { return r.rps() }, false, fmtRate},
	{"p99", func(r loadResult) float64 { return durOf(quantile(r.Latencies, 0.99)) }, true, fmtSec},
}

// compareReads returns read measure i of route rt with mechanism mech
// off; its noise is how far apart the route's runs with nothing off came
// on that measure.
func (a *ablationReport) compareReads(rt, mech string, i int) abCompare {
	m := abReadMeasures[i]
	vals := func(k abReadKey) []float64 {
		var v []float64
		for _, r := range a.Reads[k] {
			v = append(v, m.of(r))
		}
		return v
	}
	c := abCompare{on: vals(abReadKey{rt, ""}), off: vals(abReadKey{rt, mech}), lower: m.lower}
	c.noise = spreadOfRuns(c.on)
	return c
}

// abFinding is a mechanism's largest figure.
type abFinding struct {
	where string
	text  string
	worse float64
}

// findings returns the figures that make mechanism m keep its place,
// the largest first.
func (a *ablationReport) findings(m abMechanism) []abFinding {
	var out []abFinding
	for _, load := range abLoads {
		for _, c := range m.Cases {
			for _, ms := range abMeasures {
				x := a.compare(load.Key, c, m.Key, ms)
				if w, ok := x.figure(); ok {
					out = append(out, abFinding{where: load.Name + ", " + caseName(c), worse: w,
						text: fmt.Sprintf("%s %s → %s", ms.name, ms.fmt(mean(x.on)), ms.fmt(mean(x.off)))})
				}
			}
		}
	}
	if m.Reads {
		for _, rt := range abReadRoutes {
			for i, ms := range abReadMeasures {
				x := a.compareReads(rt, m.Key, i)
				if w, ok := x.figure(); ok {
					out = append(out, abFinding{where: fmt.Sprintf("%s reads, %d agents", rt, a.ReadAgents), worse: w,
						text: fmt.Sprintf("%s %s → %s", ms.name, ms.fmt(mean(x.on)), ms.fmt(mean(x.off)))})
				}
			}
		}
	}
	for _, k := range a.drainKeys(m) {
		x := a.compareDrain(k)
		if w, ok := x.figure(); ok {
			out = append(out, abFinding{where: fmt.Sprintf("drain, %s, %d workers", k.Group, k.Workers), worse: w,
				text: fmt.Sprintf("÷ raw twin %.2f → %.2f", mean(x.on), mean(x.off))})
		}
	}
	if m.Nodes {
		for _, f := range abNodeMeasures {
			x := a.compareNodes(m.Key, f)
			if w, ok := x.figure(); ok {
				out = append(out, abFinding{where: fmt.Sprintf("%d runners", a.runners()), worse: w,
					text: fmt.Sprintf("%s %s → %s", f.name, f.fmt(mean(x.on)), f.fmt(mean(x.off)))})
			}
		}
	}
	slices.SortFunc(out, func(x, y abFinding) int { return cmp.Compare(y.worse, x.worse) })
	return out
}

func caseName(key string) string {
	for _, c := range adCases {
		if c.Key == key {
			return c.Name
		}
	}
	return key
}

// Markers around the ablation's section, so that a run of that phase
// alone replaces it in a report written by a whole run, and a whole run
// without it carries it over.
const (
	abBegin = "<!-- ablation: begin -->"
	abEnd   = "<!-- ablation: end -->"
)

// ablationSection writes the section, or the one carried over from the
// last report.
func (r *report) ablationSection(b *md) {
	switch {
	case r.Ablation != nil:
		b.WriteString(r.Ablation.markdown(r.Short))
	case r.CarriedAblation != "":
		b.WriteString(r.CarriedAblation)
	default:
		return
	}
	b.WriteString("\n\n")
	deletedSection(b)
}

// abDeletion is a mechanism that an ablation run showed no figure for,
// and the commit that deleted it.
type abDeletion struct {
	Name     string
	JudgedOn string // the commit the ablation run measured
	Commit   string // the commit that deleted it
}

// abDeleted are the mechanisms deleted after an ablation run; a run no
// longer measures them.
var abDeleted = []abDeletion{
	{Name: "PostgreSQL counter shards", JudgedOn: "6805bc4", Commit: "abb18a7"},
}

// deletedSection lists abDeleted, with the lines of non-test Go each
// deletion changed, read from git.
func deletedSection(b *md) {
	if len(abDeleted) == 0 {
		return
	}
	b.p("Deleted, each after an ablation run above or before it showed no figure for it (the lines are the deleting commit's " +
		"non-test Go, from `git show --numstat`):")
	b.head("mechanism", "no figure in the run on", "deleted in", "lines of non-test Go removed, added")
	for _, d := range abDeleted {
		lines := "–"
		if added, removed, err := goLines(d.Commit); err == nil {
			lines = fmt.Sprintf("%d, %d", removed, added)
		}
		b.row(d.Name, d.JudgedOn, d.Commit, lines)
	}
	b.line("")
}

// goLines returns the lines of non-test Go that commit added and removed.
func goLines(commit string) (added, removed int, err error) {
	out, err := exec.Command("git", "show", "--numstat", "--format=", commit, "--", ":(top)*.go", ":(top,exclude)*_test.go").Output()
	if err != nil {
		return 0, 0, fmt.Errorf("git show %s: %w", commit, err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		a, err1 := strconv.Atoi(f[0])
		r, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil {
			return 0, 0, fmt.Errorf("git show %s: %q", commit, line)
		}
		added, removed = added+a, removed+r
	}
	return added, removed, nil
}

func (a *ablationReport) markdown(short bool) string {
	var b md
	b.line("%s", abBegin)
	b.p("## What each mechanism buys: the ablation")
	commit := a.Commit
	if commit == "" {
		commit = "an unknown commit"
	}
	b.p("Each throughput mechanism of the stores, switched off (a bench-only switch, `internal/ablation`) and measured against the stores "+
		"as they are, where users feel it: the agent day at a median of %s (its workload above, %d agents), with each node at the "+
		"seeds' default caps and at ten times them, and, for the PostgreSQL ones, the many-nodes model at %d runners. Each variant ran "+
		"%d times, in passes of alternating order, with %s warm-up and a %s window. A mechanism **keeps its place** where switching it off "+
		"makes a reported measure worse by %.0f %% or more in every pass, and on average by more than the noise: how far apart the "+
		"runs with nothing switched off came on that measure, in the same load and store (the noise rows of each table below); "+
		"otherwise it shows **no figure**. This section was written by `bench/run -phases ablation` on %s at %s and took %s; "+
		"a whole run carries it over unchanged.",
		fmtDur(a.Scale.median()), a.Sizes.Agents, a.runners(), abPasses, fmtDur(cmp.Or(a.Sizes.Warmup, a.Scale.warmup(short))),
		fmtDur(a.Sizes.Window), 100*abFigure, commit, a.Date.Format("2006-01-02 15:04 MST"), a.Elapsed.Round(time.Second))
	if short {
		b.p("**This is a smoke run (`-short`)**: the figures mean nothing.")
	}
	if len(a.Mechs) < len(abMechanisms) {
		b.p("**A partial run (`-ablation-only`)**: it switched off only the mechanisms listed below.")
	}
	var loads []string
	for _, l := range abLoads {
		loads = append(loads, fmt.Sprintf("%s: `Workers` %d per node, `JobsPerCaller` %d, `JobsTotal` %d", l.Name, l.Caps.PerNode, l.Caps.JobsPerCaller, l.Caps.JobsTotal))
	}
	b.p("The loads: %s.", strings.Join(loads, "; "))
	b.head("mechanism", "measured on", "its largest figure (on → off)", "verdict")
	for _, m := range a.Mechs {
		on := make([]string, 0, len(m.Cases)+1)
		for _, c := range m.Cases {
			on = append(on, caseName(c))
		}
		if m.Reads && len(a.Reads) > 0 {
			on = append(on, "reads under load")
		}
		if len(m.Drains) > 0 && len(a.Drain) > 0 {
			on = append(on, "the drain")
		}
		if m.Nodes {
			on = append(on, fmt.Sprintf("%d runners", a.runners()))
		}
		fs := a.findings(m)
		fig, verdict := "none", "no figure"
		if len(fs) > 0 {
			fig = fmt.Sprintf("%s: %s (%+.0f %%)", fs[0].where, fs[0].text, 100*fs[0].worse)
			verdict = "keeps its place"
			if len(fs) > 1 {
				fig += fmt.Sprintf("; %d more", len(fs)-1)
			}
		}
		b.row(m.Name, strings.Join(on, "; "), fig, verdict)
	}
	b.line("")
	b.p("Every measure, on → off, the mean of the passes; ✱ marks a figure as defined above.")
	cols := []string{"mechanism", "load", "store"}
	for _, ms := range abMeasures {
		cols = append(cols, ms.name)
	}
	b.head(cols...)
	for _, m := range a.Mechs {
		for _, load := range abLoads {
			for _, c := range m.Cases {
				if len(a.Runs[abKey{load.Key, c, m.Key}]) == 0 {
					continue
				}
				row := []string{m.Name, load.Name, caseName(c)}
				for _, ms := range abMeasures {
					row = append(row, abCell(a.compare(load.Key, c, m.Key, ms), ms.fmt))
				}
				b.row(row...)
			}
		}
	}
	for _, load := range abLoads {
		for _, c := range adCases {
			if len(a.Runs[abKey{load.Key, c.Key, ""}]) == 0 {
				continue
			}
			row := []string{"noise: the runs with nothing off", load.Name, caseName(c.Key)}
			for _, ms := range abMeasures {
				row = append(row, fmtNoise(a.compare(load.Key, c.Key, "", ms)))
			}
			b.row(row...)
		}
	}
	b.line("")
	if len(a.NodeRuns) > 0 {
		b.p("The many-nodes model at %d runners (its workload below), on → off:", a.runners())
		cols := []string{"mechanism"}
		for _, f := range abNodeMeasures {
			cols = append(cols, f.name)
		}
		b.head(cols...)
		for _, m := range a.Mechs {
			if !m.Nodes {
				continue
			}
			row := []string{m.Name}
			for _, f := range abNodeMeasures {
				row = append(row, abCell(a.compareNodes(m.Key, f), f.fmt))
			}
			b.row(row...)
		}
		row := []string{"noise: the runs with nothing off"}
		for _, f := range abNodeMeasures {
			row = append(row, fmtNoise(a.compareNodes("", f)))
		}
		b.row(row...)
		b.line("")
	}
	if len(a.Reads) > 0 {
		b.p("Reads under load: the HTTP phase's status and one-result routes (below: batchhttp's handler on the SQLite store at "+
			"`synchronous=FULL`, key auth, %d agents each reading its own finished job as fast as it can, %s a route), on → off:",
			a.ReadAgents, fmtDur(a.ReadPhase))
		cols := []string{"mechanism"}
		for _, rt := range abReadRoutes {
			for _, ms := range abReadMeasures {
				cols = append(cols, rt+" "+ms.name)
			}
		}
		b.head(cols...)
		for _, m := range a.Mechs {
			if !m.Reads {
				continue
			}
			row := []string{m.Name}
			for _, rt := range abReadRoutes {
				for i, ms := range abReadMeasures {
					row = append(row, abCell(a.compareReads(rt, m.Key, i), ms.fmt))
				}
			}
			b.row(row...)
		}
		row := []string{"noise: the runs with nothing off"}
		for _, rt := range abReadRoutes {
			for i := range abReadMeasures {
				row = append(row, fmtNoise(a.compareReads(rt, "", i)))
			}
		}
		b.row(row...)
		b.line("")
	}
	if len(a.Drain) > 0 {
		b.p("The zero-latency drain (its workload below: %d jobs × %d targets, %s results, %d rounds a pass), batchkit's rate over its "+
			"raw twin's, the median of a pass's rounds, on → off:", a.DrainWork.Jobs, a.DrainWork.Items, fmtBytes(float64(a.DrainWork.ResultBytes)), a.DrainRounds)
		b.head("mechanism", "store", "workers", "batchkit ÷ raw twin", "noise: the runs with nothing off")
		for _, m := range a.Mechs {
			for _, k := range a.drainKeys(m) {
				c := a.compareDrain(k)
				b.row(m.Name, k.Group, fmt.Sprint(k.Workers), abCell(c, fmtRatio), fmtNoise(c))
			}
		}
		b.line("")
	}
	b.line("%s", abEnd)
	return strings.TrimRight(b.String(), "\n")
}

// fmtNoise formats a comparison's noise as a percentage.
func fmtNoise(c abCompare) string {
	if len(c.on) < 2 {
		return "–"
	}
	return fmt.Sprintf("%.0f %%", 100*c.noise)
}

// abCell is one measure on → off, marked where it is a figure.
func abCell(c abCompare, f func(float64) string) string {
	if len(c.on) == 0 || len(c.off) == 0 || math.IsNaN(mean(c.on)) || math.IsNaN(mean(c.off)) {
		return "–"
	}
	s := f(mean(c.on)) + " → " + f(mean(c.off))
	if _, ok := c.figure(); ok {
		s += " ✱"
	}
	return s
}

// runners is the many-nodes model's one runner count.
func (a *ablationReport) runners() int {
	if len(a.Nodes.Runners) == 0 {
		return 0
	}
	return a.Nodes.Runners[0]
}

// carriedAblation returns the ablation's section of an earlier report:
// "" if it has none, and an error if its markers are not one begin marker
// followed by one end marker, so that a damaged report is neither spliced
// into nor silently dropped.
func carriedAblation(text string) (string, error) {
	nb, ne := strings.Count(text, abBegin), strings.Count(text, abEnd)
	if nb == 0 && ne == 0 {
		return "", nil
	}
	i, j := strings.Index(text, abBegin), strings.Index(text, abEnd)
	if nb != 1 || ne != 1 || j < i {
		return "", fmt.Errorf("the ablation section's markers are damaged: want one %q and then one %q, found %d and %d", abBegin, abEnd, nb, ne)
	}
	return text[i : j+len(abEnd)], nil
}

// spliceAblation puts section in place of the ablation's section of an
// earlier report, or, if it has none, before its "## Machine" section.
func spliceAblation(text, section string) (string, error) {
	old, err := carriedAblation(text)
	if err != nil {
		return "", err
	}
	if old != "" {
		return strings.Replace(text, old, section, 1), nil
	}
	if i := strings.Index(text, "\n## Machine"); i >= 0 {
		return text[:i+1] + section + "\n\n" + text[i+1:], nil
	}
	return strings.TrimRight(text, "\n") + "\n\n" + section + "\n", nil
}
