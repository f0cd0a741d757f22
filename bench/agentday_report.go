package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// The agent day's section of the report and its goals.

const (
	goalUtil200   = 0.99 // utilization of the physical limit, median 200 ms
	goalUtil20    = 0.97 // the same, median 20 ms
	goalUtilRef   = 0.99 // utilization ÷ the in-memory store's, same run
	goalSubmitP99 = 10 * time.Millisecond
	goalStatusP99 = 5 * time.Millisecond
	goalResultP99 = 5 * time.Millisecond
	goalReadP99   = 20 * time.Millisecond
	goalWakeP99   = 150 * time.Millisecond
)

// fast reports whether s is the 20 ms scale (a median below 100 ms).
func (s adScale) fast() bool { return s.median() < 100*time.Millisecond }

// utilGoal is the utilization goal at a scale: the 20 ms goal at the fast
// scale, the 200 ms one otherwise.
func (s adScale) utilGoal() float64 {
	if s.fast() {
		return goalUtil20
	}
	return goalUtil200
}

func (s adScale) title() string {
	return fmt.Sprintf("median %s (scale ×%.3g: p99 %s, timeout %s)", fmtDur(s.median()), s.Factor, fmtDur(s.p99()), fmtDur(s.timeout()))
}

func (r *adRun) util() float64 { return r.Busy.utilization(r.Slots) }

// refUtil is r's utilization over its reference's, or NaN.
func (a *agentDayReport) refUtil(r *adRun) float64 {
	if r.Case.Ref == "" {
		return math.NaN()
	}
	ref := a.find(r.Scale, r.Case.Ref)
	if ref == nil {
		return math.NaN()
	}
	return r.util() / ref.util()
}

// cores is the CPU the three sides used over the window, in cores.
func (r *adRun) cores() float64 {
	return (r.Node.CPU + r.LoadCPU + r.Cost.PGCPU).Seconds() / r.Node.Window.Seconds()
}

func fmtP(sorted []time.Duration) string {
	if len(sorted) == 0 {
		return "–"
	}
	return fmtDur(quantile(sorted, 0.5)) + " / " + fmtDur(quantile(sorted, 0.99))
}

func fmtSum(s durSummary) string {
	if s.N == 0 {
		return "–"
	}
	return fmtDur(s.P50) + " / " + fmtDur(s.P99)
}

func fmtPct(v float64) string { return fmt.Sprintf("%.1f %%", v) }

func (r *report) agentDaySection(b *md) {
	a := r.AgentDay
	sz := a.Sizes
	b.p("## Agent day")
	b.p("What an agent sees, and what the fetch slots do, while %d callers keep the runner busy. Each caller (a bearer key of its own) "+
		"keeps %d jobs live: a job of 1 to 32 targets (uniform) is submitted over HTTP (on the nodes in turn), long-polled "+
		"(`?wait=%s`) on a node picked at random until it is finished, one of its results is read on another node, and the next job "+
		"is submitted at once. Beside them, %d status "+
		"readers each read the summary of a random live job on a node other than the one it was submitted to, and %d result readers "+
		"each read one result of a recently finished job, each waiting %s between requests. The targets spread over %d host names, "+
		"which the runner's fetcher (a plain `net/http` client whose dialer stands in for DNS) sends to an upstream on %d loopback "+
		"addresses; `FetchesPerHost` is -1 (no per-host cap), so that no host gate binds. The upstream answers after a lognormal "+
		"latency, whose median and 0.99 quantile at scale 1 are %s and %s; %.0f %% of the requests never answer (the fetch times "+
		"out at `TargetTimeout`, %s at scale 1), %.0f %% answer 404 and %.0f %% answer 500, and the rest answer 200 with a %s page. "+
		"A scale multiplies the latency and the timeout, so that a short run sees many jobs.",
		sz.Agents, sz.JobsEach, longPoll, sz.Probes, sz.Probes, fmtDur(sz.Pace), adHosts, upstreamListeners, fmtDur(adMedian), fmtDur(adP99),
		100*adTimeoutShare, fmtDur(adTimeout), 100*adShare4xx, 100*adShare5xx, fmtBytes(adBodyBytes))
	b.p("The runner has %d fetch slots in all (`Workers`; over 3 nodes, %s) and %d %% as many drains (`Drains`: jobs drained at "+
		"once, so that a slot is not idle while a target is written), `JobsTotal` %d and `JobsPerCaller` %d, so that the "+
		"callers' %d live jobs keep a queue and no submit is refused; the byte budget is raised so that nothing is evicted. "+
		"Each node is a runner, its store and batchhttp's handler (bearer keys, the URL pre-check, request ids) on a loopback "+
		"listener; the nodes run in a child process of their own, the upstream and the clients in the bench process, both on "+
		"this machine's %d cores. The stores: the in-memory one (`batchtest`, no cost: the reference), SQLite at "+
		"`synchronous=NORMAL` and `FULL`, PostgreSQL with 1 node (a pool of %d) and with 3 (each a pool of %d, a runner and a "+
		"listener of its own, on one schema), set beside the in-memory store shared by 3 runners; at 20 ms, SQLite FULL and "+
		"PostgreSQL with 1 node run once more with `Drains` = `Workers`, to show what the drains buy. Each case warms up for "+
		"%s at a median of 200 ms and %s at 20 ms, then measures a window of %s.",
		adSlots, joinInts(workersOf(adSlots, 3)), adDrainsPct, adJobsTotal, sz.JobsEach+1, sz.Agents*sz.JobsEach, r.Machine.Cores, adPoolOne, adPoolEach,
		fmtDur(adScale{2.0 / 3}.warmup(r.Short)), fmtDur(adScale{1.0 / 15}.warmup(r.Short)), fmtDur(sz.Window))
	b.p("**Fetch-slot utilization** is the time requests spent at the upstream inside the window, over the fetch slots × the " +
		"window: the targets answered per second ÷ (fetch slots ÷ mean upstream latency), without the error at the window's edges. " +
		"1.0 is the physical limit: every slot at the upstream all the time. (The upstream sees a request that timed out until it " +
		"notices its client left, so it may count a fetch or two more than the slots at once.) **Fetch end → result readable** is, on the node that " +
		"fetched, the time from the fetch function's return to the return of the store write that makes the result readable. " +
		"**Long-poll wake** is the time from a job's last write (on the node that ended it) to its long-poll's answer at the " +
		"client, on that node and on the others. Latencies are p50 / p99. The **drain time** rows split the drains' time as the " +
		"runner's Observer sees it: in the fetch function; writing a target's outcome; claiming a job; between those (waiting for " +
		"a fetch slot, building the result, the runner's own steps); idle is the rest (no job to drain, or a goroutine waiting " +
		"for a core). CPU is each " +
		"process's user and system time (PostgreSQL: the nodes' backends) per target stored in the window; the probes and the " +
		"long-polls' periodic re-reads (`PollInterval`) run at a rate of their own, so at the slower scale more of that work falls " +
		"on each target.")
	if a.PGMissing != "" {
		b.p("PostgreSQL was not measured: %s.", a.PGMissing)
	}
	for _, sc := range sz.Scales {
		a.scaleTable(b, sc)
	}
	if !a.ran(adScale{2.0 / 3}) {
		b.p("The 200 ms scale did not run (a smoke run runs the 20 ms one alone).")
	}
	b.p("WAL and flushes are PostgreSQL's, server-wide (`pg_current_wal_lsn()`, `pg_stat_wal.wal_sync`): other work on the server " +
		"counts too. Disk bytes are what the nodes' process wrote to storage (`write_bytes` of `/proc/<pid>/io`). SQLite's fsyncs " +
		"are the nodes' `fsync` and `fdatasync` calls, counted by `perf stat` on kernel tracepoints where perf is installed. RSS per " +
		"live job is the nodes' mean RSS in the window, less their RSS before any load, over the mean live jobs: it counts the " +
		"connections, buffers and caches the load brings too (the memory section has the cost of a live job alone), and the " +
		"in-memory store's results.")
}

func (a *agentDayReport) ran(sc adScale) bool {
	for _, r := range a.Runs {
		if r.Scale == sc {
			return true
		}
	}
	return false
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, " + ")
}

func (a *agentDayReport) scaleTable(b *md, sc adScale) {
	var runs []*adRun
	for _, r := range a.Runs {
		if r.Scale == sc {
			runs = append(runs, r)
		}
	}
	if len(runs) == 0 {
		return
	}
	b.p("### Agent day, %s", sc.title())
	cols := []string{""}
	for _, r := range runs {
		cols = append(cols, r.Case.Name)
	}
	b.head(cols...)
	row := func(name string, f func(r *adRun) string) {
		cells := []string{name}
		for _, r := range runs {
			cells = append(cells, f(r))
		}
		b.row(cells...)
	}
	row("targets answered per second", func(r *adRun) string { return fmtRate(r.Busy.rate()) })
	row("mean upstream latency", func(r *adRun) string { return fmtDur(r.Busy.meanLatency()) })
	row("**fetch-slot utilization**", func(r *adRun) string { return fmt.Sprintf("**%.3f**", r.util()) })
	row("÷ the in-memory store's", func(r *adRun) string {
		if v := a.refUtil(r); !math.IsNaN(v) {
			return fmt.Sprintf("%.3f×", v)
		}
		return "–"
	})
	row("most fetches at once (slots)", func(r *adRun) string { return fmt.Sprintf("%d (%d)", r.Busy.Peak, r.Slots) })
	row("live jobs, of them queued (mean)", func(r *adRun) string { return fmt.Sprintf("%.0f, %.0f", r.Node.LiveMean, r.Node.QueueMean) })
	row("fetches in flight, as the runner sees them (mean)", func(r *adRun) string {
		return fmt.Sprintf("%.1f of %d", r.Node.FetchingMean, r.Slots)
	})
	row("submit", func(r *adRun) string { return fmtP(r.Submit) })
	row("submits the caps refused (429)", func(r *adRun) string { return fmt.Sprint(r.Refused) })
	row("status (another node)", func(r *adRun) string { return fmtP(r.Status) })
	row("one result", func(r *adRun) string { return fmtP(r.Result) })
	row("fetch end → result readable", func(r *adRun) string { return fmtSum(r.Node.Readable) })
	row("long-poll wake, same node", func(r *adRun) string { return fmtP(r.WakeSame) })
	row("long-poll wake, across nodes", func(r *adRun) string { return fmtP(r.WakeOther) })
	row("drains (fetch slots)", func(r *adRun) string { return fmt.Sprintf("%d (%d)", r.Drains, r.Slots) })
	row("drain time: in the fetch", func(r *adRun) string { return fmtPct(r.drainShare(r.Node.Slots.Fetch)) })
	row("drain time: writing outcomes (write p50 / p99)", func(r *adRun) string {
		return fmt.Sprintf("%s (%s)", fmtPct(r.drainShare(r.Node.Slots.Write)), fmtSum(r.Node.Write))
	})
	row("drain time: claiming jobs (claim p50 / p99)", func(r *adRun) string {
		return fmt.Sprintf("%s (%s)", fmtPct(r.drainShare(r.Node.Slots.Claim)), fmtSum(r.Node.Claim))
	})
	row("drain time: between (waiting for a fetch slot among it)", func(r *adRun) string {
		return fmtPct(r.drainShare(r.Node.Slots.BeforeFetch + r.Node.Slots.AfterFetch))
	})
	row("drain time: idle", func(r *adRun) string { return fmtPct(100 - r.drainShare(r.Node.Slots.total())) })
	row("node CPU per target", func(r *adRun) string { return fmtDur(r.perTarget(r.Node.CPU)) })
	row("PostgreSQL CPU per target", func(r *adRun) string {
		if r.Case.Store != storePostgres {
			return "–"
		}
		return fmtDur(r.perTarget(r.Cost.PGCPU))
	})
	row("PostgreSQL round trips per target; writes per group of several", func(r *adRun) string {
		if r.Case.Store != storePostgres || r.Node.Targets == 0 {
			return "–"
		}
		per := "–"
		if r.Node.PGBatches > 0 {
			per = fmt.Sprintf("%.1f", float64(r.Node.PGBatchStatements)/float64(r.Node.PGBatches))
		}
		return fmt.Sprintf("%.2f; %s", float64(r.Node.PGRoundTrips)/float64(r.Node.Targets), per)
	})
	row("upstream and clients' CPU per target", func(r *adRun) string { return fmtDur(r.perTarget(r.LoadCPU)) })
	row("cores used, all three", func(r *adRun) string { return fmt.Sprintf("%.2f of %d", r.cores(), a.Cores) })
	row("WAL per target (PostgreSQL)", func(r *adRun) string {
		if r.Case.Store != storePostgres || r.Node.Targets == 0 {
			return "–"
		}
		return fmtBytes(float64(r.Cost.WAL) / float64(r.Node.Targets))
	})
	row("disk bytes written per target (nodes)", func(r *adRun) string {
		if r.Node.Targets == 0 {
			return "–"
		}
		return fmtBytes(float64(r.Node.DiskBytes) / float64(r.Node.Targets))
	})
	row("fsyncs (SQLite) or WAL flushes (PostgreSQL) per target", func(r *adRun) string {
		n := r.Cost.Fsyncs
		switch r.Case.Store {
		case storePostgres:
			n = r.Cost.WALSyncs
		case storeMemory:
			return "–"
		}
		if n < 0 || r.Node.Targets == 0 {
			if r.Cost.Why != "" {
				return "– (" + r.Cost.Why + ")"
			}
			return "–"
		}
		return fmt.Sprintf("%.3f", float64(n)/float64(r.Node.Targets))
	})
	row("RSS under load (mean), per live job", func(r *adRun) string {
		if r.Node.LiveMean <= 0 {
			return fmtBytes(float64(r.Node.RSSMean)) + ", –"
		}
		per := float64(r.Node.RSSMean-r.Node.RSSIdle) / r.Node.LiveMean
		return fmtBytes(float64(r.Node.RSSMean)) + ", " + fmtBytes(per)
	})
	b.line("")
}

func (s slotTimes) total() time.Duration {
	return s.Fetch + s.BeforeFetch + s.AfterFetch + s.Write + s.Claim
}

// agentDayGoals judges the agent day's goals at each scale that ran.
func (r *report) agentDayGoals() []goal {
	a := r.AgentDay
	if a == nil {
		return []goal{{Goal: "agent day goals", State: "not measured", Why: "the agent day did not run"}}
	}
	var gs []goal
	for _, sc := range a.Sizes.Scales {
		var runs []*adRun
		for _, run := range a.Runs {
			if run.Scale == sc && !run.Case.NoDrains { // the goals judge the runner as configured
				runs = append(runs, run)
			}
		}
		if len(runs) == 0 {
			continue
		}
		at := "at a median of " + fmtDur(sc.median())
		gs = append(gs, judge(fmt.Sprintf("fetch-slot utilization ≥ %.2f of the physical limit, %s", sc.utilGoal(), at), runs,
			func(r *adRun) (float64, bool) { return r.util(), true },
			func(v float64) string { return fmt.Sprintf("%.3f", v) },
			func(v float64) bool { return v >= sc.utilGoal() }, utilWhy))
		gs = append(gs, judge(fmt.Sprintf("fetch-slot utilization ≥ %.2f× the in-memory store's, same run, %s", goalUtilRef, at), runs,
			func(r *adRun) (float64, bool) { v := a.refUtil(r); return v, !math.IsNaN(v) },
			func(v float64) string { return fmt.Sprintf("%.3f×", v) },
			func(v float64) bool { return v >= goalUtilRef }, utilWhy))
		for _, l := range []struct {
			name  string
			limit time.Duration
			of    func(r *adRun) (time.Duration, bool)
		}{
			{"submit p99", goalSubmitP99, func(r *adRun) (time.Duration, bool) { return quantile(r.Submit, 0.99), len(r.Submit) > 0 }},
			{"status p99", goalStatusP99, func(r *adRun) (time.Duration, bool) { return quantile(r.Status, 0.99), len(r.Status) > 0 }},
			{"one result p99", goalResultP99, func(r *adRun) (time.Duration, bool) { return quantile(r.Result, 0.99), len(r.Result) > 0 }},
			{"fetch end → result readable p99, on the node that fetched", goalReadP99, func(r *adRun) (time.Duration, bool) {
				return r.Node.Readable.P99, r.Node.Readable.N > 0
			}},
			{"long-poll wake p99 across nodes", goalWakeP99, func(r *adRun) (time.Duration, bool) {
				return quantile(r.WakeOther, 0.99), len(r.WakeOther) > 0
			}},
		} {
			// A store's miss is set beside its in-memory reference's
			// figure: what the HTTP path and the machine cost without it.
			refFig := func(r *adRun) string {
				ref := a.find(r.Scale, r.Case.Ref)
				if r.Case.Ref == "" || ref == nil {
					return "the reference"
				}
				d, ok := l.of(ref)
				if !ok {
					return "the in-memory store's: –"
				}
				return "the in-memory store's: " + fmtDur(d)
			}
			gs = append(gs, judge(fmt.Sprintf("%s ≤ %s, %s", l.name, fmtDur(l.limit), at), runs,
				func(r *adRun) (float64, bool) { d, ok := l.of(r); return float64(d), ok },
				func(v float64) string { return fmtDur(time.Duration(v)) },
				func(v float64) bool { return v <= float64(l.limit) }, refFig))
		}
	}
	return gs
}

// judge makes one goal over the runs that have a figure: met when every
// one meets it; where missed, why names the runs that did not (and, if
// explain is set, what it says of each).
func judge(text string, runs []*adRun, of func(*adRun) (float64, bool), format func(float64) string, ok func(float64) bool,
	explain func(*adRun) string) goal {
	g := goal{Goal: "Agent day: " + text}
	var figs, over []string
	for _, r := range runs {
		v, has := of(r)
		if !has {
			continue
		}
		figs = append(figs, r.Case.Name+" "+format(v))
		if !ok(v) {
			s := r.Case.Name + " " + format(v)
			if explain != nil {
				s += " (" + explain(r) + ")"
			}
			over = append(over, s)
		}
	}
	if len(figs) == 0 {
		g.State, g.Why = "not measured", "no case had the figure"
		return g
	}
	g.Figure = strings.Join(figs, "; ")
	g.State = verdict(len(over) == 0)
	if len(over) > 0 {
		g.Why = "missed by " + strings.Join(over, "; ")
	}
	return g
}

// utilWhy says where a run's drain time went besides the fetch, and how
// busy the machine was.
func utilWhy(r *adRun) string {
	s := r.Node.Slots
	return fmt.Sprintf("%d drains for %d slots: %s writing, write p99 %s; %s claiming; %s idle; the three processes used %.2f cores",
		r.Drains, r.Slots, fmtPct(r.drainShare(s.Write)), fmtDur(r.Node.Write.P99), fmtPct(r.drainShare(s.Claim)),
		fmtPct(100-r.drainShare(s.total())), r.cores())
}
