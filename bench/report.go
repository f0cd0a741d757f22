package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// report is everything one run measured; markdown writes BENCHMARKS.md
// from it and from nothing else.
type report struct {
	Short     bool
	Start     time.Time
	Elapsed   time.Duration
	PGMissing string // why the PostgreSQL contenders did not run, or ""
	Machine   machine
	AgentDay  *agentDayReport
	Drain     *drainReport
	PGCost    *pgCostReport
	HTTP      *httpReport
	Memory    *memoryReport
	Growth    *growthReport
	Nodes     *nodesReport
	Ablation  *ablationReport
	// CarriedAblation is the ablation's section of the report this one
	// replaces, kept when this run has no ablation.
	CarriedAblation string
}

// md collects markdown.
type md struct{ strings.Builder }

func (b *md) p(format string, args ...any) { fmt.Fprintf(b, format+"\n\n", args...) }
func (b *md) line(format string, args ...any) {
	fmt.Fprintf(b, format+"\n", args...)
}

// row writes one table row.
func (b *md) row(cells ...string) { b.line("| %s |", strings.Join(cells, " | ")) }

// head writes a table's header row and its rule.
func (b *md) head(cells ...string) {
	b.row(cells...)
	rule := make([]string, len(cells))
	for i := range rule {
		rule[i] = "---"
	}
	b.row(rule...)
}

func (r *report) markdown() string {
	var b md
	b.p("# Benchmarks")
	b.p("First the agent day: what an agent sees of batchkit while many callers keep it busy against an upstream of realistic " +
		"latency, and how close its fetch slots come to their physical limit, on each store. Then batchkit beside the job queues a Go " +
		"user would otherwise pick — [River](https://github.com/riverqueue/river) and [goqite](https://github.com/maragudk/goqite) — " +
		"and beside a raw-engine twin of each store, in a drain whose fetcher answers at once: the ceiling of what a store can take, " +
		"which an upstream's latency keeps a real day far below. Everything is measured in one run on one machine. " +
		"This file is written by `bench/run` (`cd bench && go run . -out ../BENCHMARKS.md`): every figure in it comes from the run that wrote it, " +
		"but for the section on what each mechanism buys, which `bench/run -phases ablation` writes and which names its own run; " +
		"nothing in it is typed in by hand. The [`bench/`](bench/) module holds the code; peers enter only its `go.mod`, never the library's.")
	if r.Short {
		b.p("**This is a smoke run (`-short`)**: the sizes are tiny and the figures mean nothing; it only shows that every contender and table works.")
	}
	b.p("Run on %s; the whole command took %s. The machine was shared with other work while it ran (load average %s at the start), "+
		"so absolute figures are noisy: compare the ratios, which are taken within each round, and re-run the command on a quiet machine "+
		"for figures to quote.", r.Machine.Date.Format("2006-01-02 15:04 MST"), r.Elapsed.Round(time.Second), orDash(r.Machine.Load))
	if r.AgentDay != nil {
		r.agentDaySection(&b)
	}
	r.ablationSection(&b)
	r.machineSection(&b)
	if r.Drain != nil {
		r.drainSection(&b)
	}
	r.pgCostSection(&b)
	r.nodesSection(&b)
	if r.HTTP != nil {
		r.httpSection(&b)
	}
	if r.Memory != nil {
		r.memorySection(&b)
	}
	if r.Growth != nil {
		r.growthSection(&b)
	}
	r.goalsSection(&b)
	r.closingSection(&b)
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

func (r *report) machineSection(b *md) {
	m := r.Machine
	b.p("## Machine")
	b.head("", "")
	b.row("CPU", m.CPU)
	b.row("cores", fmt.Sprintf("%d (GOMAXPROCS %d)", m.Cores, m.GOMAXPROCS))
	b.row("RAM", m.ramText())
	b.row("OS", m.OS)
	b.row("Go", m.Go)
	b.row("SQLite", m.SQLite+" (modernc.org/sqlite, pure Go: batchkit's zombiezen and the peers' `database/sql` driver are the same engine)")
	pg := m.PostgreSQL + " (on the same machine, over loopback)"
	if m.PostgreSQL == "" {
		pg = "not measured: " + r.PGMissing
	}
	b.row("PostgreSQL", pg)
	b.row("modules", strings.Join(m.Modules, ", "))
	b.row("date", m.Date.Format(time.RFC3339))
	b.line("")
}

// rates returns a contender's items/s per round and their spread.
func (d *drainReport) rates(key string) ([]float64, spread) {
	v := d.Rates[key]
	var ok []float64
	for _, x := range v {
		if !math.IsNaN(x) {
			ok = append(ok, x)
		}
	}
	return v, spreadOf(ok)
}

// ratio is batchkit's rate over other's, per round, in group.
func (d *drainReport) ratio(group, other string) spread {
	bk := d.find(group, "batchkit", false, "")
	if bk == nil {
		return spread{}
	}
	a, _ := d.rates(bk.Key)
	o, _ := d.rates(other)
	return spreadOf(ratios(a, o))
}

// ratioOf is a's rate over b's, per round.
func (d *drainReport) ratioOf(a, b string) spread {
	x, _ := d.rates(a)
	y, _ := d.rates(b)
	return spreadOf(ratios(x, y))
}

// find returns the group's contender of peer (and, for a peer, tuned and
// model), or nil.
func (d *drainReport) find(group, peer string, tuned bool, model string) *contender {
	for _, c := range d.Contenders {
		if c.Group == group && c.Peer == peer && (strings.HasPrefix(peer, "batchkit") || peer == "raw" || (c.Tuned == tuned && strings.Contains(c.Key, "-"+model+"-"))) {
			return c
		}
	}
	return nil
}

// fastestTuned returns the group's tuned peer configuration with the
// highest median rate.
func (d *drainReport) fastestTuned(group string, peers ...string) *contender {
	var best *contender
	bestRate := math.Inf(-1)
	for _, c := range d.Contenders {
		if c.Group != group || !c.Tuned || !contains(peers, c.Peer) {
			continue
		}
		if _, s := d.rates(c.Key); s.N > 0 && s.Median > bestRate {
			best, bestRate = c, s.Median
		}
	}
	return best
}

func contains(v []string, s string) bool {
	for _, x := range v {
		if x == s {
			return true
		}
	}
	return false
}

func (d *drainReport) groups() []string {
	var gs []string
	for _, c := range d.Contenders {
		if !contains(gs, c.Group) {
			gs = append(gs, c.Group)
		}
	}
	return gs
}
