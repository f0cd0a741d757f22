package main

import (
	"fmt"
	"math"
	"strings"
)

// The cost phase's tables, the scale-out comparison, the model built on
// them, and the PostgreSQL goals.

// figure is one per-target cost of a run.
type figure struct {
	name string
	of   func(costRun) float64
	fmt  func(float64) string
}

func fmtUS(v float64) string  { return fmt.Sprintf("%.0f µs", v) }
func fmtB(v float64) string   { return fmtRate(v) + " B" }
func fmtPer(v float64) string { return fmt.Sprintf("%.2f", v) }

var costFigures = []figure{
	{"server CPU per target", func(c costRun) float64 { return c.per(float64(c.CPU.Microseconds())) }, fmtUS},
	{"WAL bytes per target", func(c costRun) float64 { return c.per(float64(c.WAL)) }, fmtB},
	{"statements per target (server)", func(c costRun) float64 {
		if c.Calls < 0 {
			return math.NaN()
		}
		return c.per(float64(c.Calls))
	}, fmtPer},
	{"statements per target (sent)", func(c costRun) float64 { return c.per(float64(c.Sent)) }, fmtPer},
	{"round trips per target", func(c costRun) float64 { return c.per(float64(c.RoundTrips)) }, fmtPer},
	{"commits per target", func(c costRun) float64 { return c.per(float64(c.Commits)) }, fmtPer},
	{"lock waits per 1,000 targets (sampled)", func(c costRun) float64 { return 1000 * c.per(float64(c.lockWaits("Lock"))) }, fmtPer},
	{"LWLock waits per 1,000 targets (sampled)", func(c costRun) float64 { return 1000 * c.per(float64(c.lockWaits("LWLock"))) }, fmtPer},
	{"HOT share of row updates", func(c costRun) float64 {
		if c.Updates == 0 {
			return math.NaN()
		}
		return float64(c.HOTUpdates) / float64(c.Updates)
	}, func(v float64) string { return fmt.Sprintf("%.0f %%", 100*v) }},
	{"client CPU per target (not the server's)", func(c costRun) float64 { return c.per(float64(c.ClientCPU.Microseconds())) }, fmtUS},
}

// values returns figure f of each of key's runs.
func (p *pgCostReport) values(key string, f figure) []float64 {
	var out []float64
	for _, r := range p.Runs[key] {
		out = append(out, f.of(r))
	}
	return out
}

func (p *pgCostReport) rates(key string) []float64 {
	var out []float64
	for _, r := range p.Runs[key] {
		out = append(out, float64(r.Targets)/r.Elapsed.Seconds())
	}
	return out
}

// ratio is a's figure over b's, round by round.
func (p *pgCostReport) ratio(a, b string, f figure) spread {
	return spreadOf(ratios(p.values(a, f), p.values(b, f)))
}

func (r *report) pgCostSection(b *md) {
	p := r.PGCost
	if p == nil {
		return
	}
	b.p("## PostgreSQL: what a target costs the server")
	b.p("Each contender drains the drain's workload (%d jobs of %d items, %s results, submits or inserts included) once per round, "+
		"%d rounds, in turn, each in a schema of its own; figures are per target, the median over the rounds with the lowest and highest. "+
		"Server CPU is the user and system time of the run's backends, read from `/proc/<pid>/stat` (the server runs on this machine; "+
		"background processes such as the WAL writer are not counted). WAL bytes are `pg_current_wal_lsn()` before and after "+
		"(server-wide: other work on the server counts too). Statements at the server are `pg_stat_statements` calls in the database%s; "+
		"statements sent, round trips (a query, a batch, a prepare) and commits (a COMMIT, a statement or batch outside a transaction) "+
		"are counted by a pgx tracer on the run's connections. Waits are `pg_stat_activity` sampled every %s: the run's active backends "+
		"by wait event; Lock is a heavyweight lock (a row, a transaction), LWLock a shared-memory one (WALWrite: waiting for another "+
		"backend's WAL flush). HOT is the share of the run's row updates that were heap-only, from `pg_stat_user_tables`. The phase took %s.",
		r.Drain0().Jobs, r.Drain0().Items, fmtBytes(float64(r.Drain0().ResultBytes)), p.Rounds,
		map[bool]string{true: "", false: " (not installed on this server: –)"}[p.PGSS], costSample, p.Elapsed.Round(1e9))
	var fresh []*costContender // the steady-state runs have a table of their own
	for _, c := range p.Contenders {
		if !c.Steady {
			fresh = append(fresh, c)
		}
	}
	cols := []string{"per target"}
	for _, c := range fresh {
		cols = append(cols, c.Name)
	}
	b.head(cols...)
	row := []string{"items/s"}
	for _, c := range fresh {
		row = append(row, fmtSpread(spreadOf(p.rates(c.Key)), fmtRate))
	}
	b.row(row...)
	for _, f := range costFigures {
		row := []string{f.name}
		for _, c := range fresh {
			row = append(row, fmtSpread(spreadOf(p.values(c.Key, f)), f.fmt))
		}
		b.row(row...)
	}
	b.line("")
	b.p("Most sampled waits, all rounds: %s.", p.waitsLine())

	b.p("batchkit over the twin at the same concurrency, round by round:")
	b.head("figure", "batchkit 2 workers ÷ twin 2 connections", "batchkit 4 workers ÷ twin 4 connections")
	for _, f := range append(costFigures[:6:6], costFigures[9]) {
		b.row(f.name, fmtSpread(p.ratio("batchkit-1x2", "raw-2", f), fmtRatio), fmtSpread(p.ratio("batchkit-1x4", "raw-4", f), fmtRatio))
	}
	b.line("")

	b.p("### Scale-out in costs: 1 node and 3 nodes")
	b.p("Three nodes are three stores, each with a pool of its own and a runner of 2 workers, on one schema, as three processes " +
		"would be (the jobs are submitted through the nodes in turn, and any node claims any job). On a 2-core machine three nodes " +
		"and the server share the cores, so throughput cannot show scale-out here; what a target costs the server can.")
	b.p("The goal compares 3 nodes with 1 node of the same runner (2 workers). 1 node of 6 workers, as many as the 3 nodes have, " +
		"shows what is concurrency rather than nodes: its groups are larger (fewer commits per target), so fewer transactions " +
		"write at once.")
	b.p("**A store at its working size (steady state).** Each run first drains the workload once, untimed, then sweeps every job " +
		"through the store and vacuums without truncating the files, so that the timed drain reuses the space the sweep freed, as " +
		"a store whose sweeps and autovacuum keep it near its working size does. The goal is judged on these runs.")
	p.scaleTable(b, "-steady")
	b.p("**A new store, growing.** The same runs on empty tables: every result extends the TOAST table, and the writers of " +
		"concurrent transactions queue for its relation extension lock (Lock:extend), the more the more transactions write " +
		"at once: each node's group commit bounds its own, not the others'. The raw twin, whose 4 connections write at once, " +
		"waits for it too (first table). A store grows so only until its sweeps free space.")
	p.scaleTable(b, "")
	b.p("Most sampled heavyweight-lock waits, all rounds: %s.", p.lockLine())

	b.p("### A model, not a measurement: the drain rate of a larger server")
	cpu := spreadOf(p.values("batchkit-3x2-steady", costFigures[0])).Median
	wal := spreadOf(p.values("batchkit-3x2-steady", costFigures[1])).Median
	commits := spreadOf(p.values("batchkit-3x2-steady", costFigures[5])).Median
	b.p("**Assumption.** The server's CPU is the only limit: the runners run on other machines, the WAL device takes the WAL bytes "+
		"and flushes below, the store is at its working size, and a target costs the server the CPU it costs with 3 nodes here "+
		"(%s, the median of the steady-state runs), whatever the number of nodes and cores, which the steady-state table supports "+
		"as far as 3 nodes (3 nodes ÷ 1 node: %s for the CPU; %s). Then a server "+
		"of N cores drains at most N × 1 s ÷ %s targets a second. PostgreSQL's own background work (WAL writer, checkpointer) and "+
		"the locks that more backends contend for are not in the model: it is a ceiling, not a forecast.", fmtUS(cpu),
		fmtRatio(p.ratio("batchkit-3x2-steady", "batchkit-1x2-steady", costFigures[0]).Median), p.lockGrowth(), fmtUS(cpu))
	b.head("server cores", "predicted drain ceiling (targets/s)", "WAL it writes", "commits per second it needs")
	for _, n := range []int{2, 8, 32} {
		rate := float64(n) * 1e6 / cpu
		b.row(fmt.Sprint(n), fmtRate(rate), fmtBytes(rate*wal)+"/s", fmtRate(rate*commits))
	}
	b.line("")
	if bk := spreadOf(p.rates("batchkit-1x4")); !math.IsNaN(bk.Median) {
		b.p("For scale: on this machine, where the runner and the server share 2 cores, batchkit at 4 workers drained %s targets/s in this phase.",
			fmtRate(bk.Median))
	}
}

// scaleTable writes the scale-out table of the batchkit runs whose keys
// end in suffix.
func (p *pgCostReport) scaleTable(b *md, suffix string) {
	one, three, six := "batchkit-1x2"+suffix, "batchkit-3x2"+suffix, "batchkit-1x6"+suffix
	b.head("per target", "1 node × 2 workers", "3 nodes × 2 workers", "3 nodes ÷ 1 node", "1 node × 6 workers", "3 nodes ÷ 1 node of 6 workers")
	b.row("items/s", fmtSpread(spreadOf(p.rates(one)), fmtRate), fmtSpread(spreadOf(p.rates(three)), fmtRate), "",
		fmtSpread(spreadOf(p.rates(six)), fmtRate), "")
	for _, f := range costFigures {
		b.row(f.name, fmtSpread(spreadOf(p.values(one, f)), f.fmt), fmtSpread(spreadOf(p.values(three, f)), f.fmt),
			fmtSpread(p.ratio(three, one, f), fmtRatio),
			fmtSpread(spreadOf(p.values(six, f)), f.fmt), fmtSpread(p.ratio(three, six, f), fmtRatio))
	}
	b.line("")
}

// lockGrowth says whether the steady-state runs' sampled lock waits grow
// from 1 node to 3 (the goal's test).
func (p *pgCostReport) lockGrowth() string {
	lock := costFigures[6]
	l1 := spreadOf(p.values("batchkit-1x2-steady", lock)).Median
	l3 := spreadOf(p.values("batchkit-3x2-steady", lock)).Median
	if lockGrows(l1, l3) {
		return fmt.Sprintf("the sampled lock waits, though, grow from %.2f to %.2f per 1,000 targets", l1, l3)
	}
	return fmt.Sprintf("no sampled lock wait grows: %.2f and %.2f per 1,000 targets", l1, l3)
}

// lockGrows is the goal's test of sampled lock waits per 1,000 targets at
// 1 node (l1) and 3 nodes (l3): less than one in 1,000 counts as none.
func lockGrows(l1, l3 float64) bool { return l3 > math.Max(l1, 1)*(1+goalNodesPG) }

// lockLine names the heavyweight-lock waits of the scale-out runs.
func (p *pgCostReport) lockLine() string {
	var parts []string
	for _, c := range p.Contenders {
		if c.Nodes > 0 && c.Workers != 4 {
			parts = append(parts, fmt.Sprintf("%s: %s", c.Name, orDash(lockKinds(p.Runs[c.Key]))))
		}
	}
	return strings.Join(parts, "; ")
}

// Drain0 is the drain's workload, whether or not the drain phase ran.
func (r *report) Drain0() drainWork {
	if r.PGCost != nil {
		return r.PGCost.Work
	}
	return drainWork{}
}

// lockKinds names the heavyweight locks runs waited for, most first.
func lockKinds(runs []costRun) string {
	var only []costRun
	for _, r := range runs {
		w := map[string]int{}
		for k, v := range r.Waits {
			if strings.HasPrefix(k, "Lock:") {
				w[k] = v
			}
		}
		only = append(only, costRun{Waits: w})
	}
	return topWaits(only, 4)
}

func (p *pgCostReport) waitsLine() string {
	var parts []string
	for _, c := range p.Contenders {
		parts = append(parts, fmt.Sprintf("%s: %s", c.Name, orDash(topWaits(p.Runs[c.Key], 4))))
	}
	return strings.Join(parts, "; ")
}

// pgGoals judges the PostgreSQL goals on the drain and cost phases.
func (r *report) pgGoals() []goal {
	var gs []goal
	d := r.Drain
	if d != nil {
		var figs []string
		for _, g := range []struct {
			group, name string
		}{{postgres4, "4 workers"}, {postgres, "2 workers"}} {
			if raw := d.find(g.group, "raw", false, ""); raw != nil {
				figs = append(figs, fmt.Sprintf("%s %s", g.name, fmtSpread(d.ratio(g.group, raw.Key), fmtRatio)))
			}
		}
		if len(figs) > 0 {
			gs = append(gs, goal{
				Goal:   fmt.Sprintf("PostgreSQL drain ≥ %.1f× the raw pgx twin at 4 workers, ≥ %.1f× at 2", goalRawPG4, goalRawPG2),
				Figure: strings.Join(figs, ", "), State: "retired",
				Why: "The twin does less per item (no fencing, caps, idempotency, metrics or change feed), and on 2 shared cores " +
					"the drain's rate follows the CPU per item, so the ratio measures the work the twin leaves out, not waste; " +
					"the agent day's utilization goals judge the store instead.",
			})
		}
		if f := d.fastestTuned(postgres4, "river"); f != nil {
			s := d.ratio(postgres4, f.Key)
			gl := goal{Goal: fmt.Sprintf("PostgreSQL drain at 4 workers ≥ %.2f× River's best tuned model", goalRiverPG4),
				Figure: fmt.Sprintf("%s against %s", fmtSpread(s, fmtRatio), f.Name), State: verdict(s.Median >= goalRiverPG4)}
			if gl.State == "missed" {
				gl.Why = d.peerWhy(postgres4, f, goalRiverPG4)
			}
			gs = append(gs, gl)
		}
	}
	p := r.PGCost
	if p == nil {
		return gs
	}
	walF := costFigures[1]
	w2, w4 := p.ratio("batchkit-1x2", "raw-2", walF), p.ratio("batchkit-1x4", "raw-4", walF)
	gs = append(gs, goal{Goal: fmt.Sprintf("PostgreSQL WAL bytes per target ≤ %.1f× the twin's", goalWALPG),
		Figure: fmt.Sprintf("2 workers %s, 4 workers %s", fmtSpread(w2, fmtRatio), fmtSpread(w4, fmtRatio)),
		State:  verdict(w2.Median <= goalWALPG && w4.Median <= goalWALPG)})
	var parts, over []string
	for _, f := range costFigures[:5] {
		s := p.ratio("batchkit-3x2-steady", "batchkit-1x2-steady", f)
		if math.IsNaN(s.Median) {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s", strings.TrimSuffix(f.name, " per target"), fmtRatio(s.Median)))
		if math.Abs(s.Median-1) > goalNodesPG {
			over = append(over, f.name)
		}
	}
	lock := costFigures[6]
	med := func(key string) float64 { return spreadOf(p.values(key, lock)).Median }
	l1, l3 := med("batchkit-1x2-steady"), med("batchkit-3x2-steady")
	parts = append(parts, fmt.Sprintf("lock waits per 1,000 targets %.2f → %.2f (a new, growing store: %.2f → %.2f)",
		l1, l3, med("batchkit-1x2"), med("batchkit-3x2")))
	gl := goal{Goal: fmt.Sprintf("3 nodes cost per target within %.0f %% of 1 node, no lock wait growing with nodes (a store at its working size)", 100*goalNodesPG),
		Figure: "steady state: " + strings.Join(parts, "; "), State: verdict(len(over) == 0 && !lockGrows(l1, l3))}
	if len(over) > 0 {
		gl.Why = "over 10 %: " + strings.Join(over, ", ")
	} else if gl.State == "missed" {
		gl.Why = fmt.Sprintf("the sampled lock waits grow (%s at 3 nodes)", orDash(lockKinds(p.Runs["batchkit-3x2-steady"])))
	}
	gs = append(gs, gl)
	return gs
}
