package main

import (
	"fmt"
	"math"
	"time"

	"github.com/siftfetch/batchkit/batch"
)

func (r *report) httpSection(b *md) {
	h := r.HTTP
	b.p("## Submit, status and one-result latency over HTTP")
	b.p("batchhttp's Handler, wired as the example daemon wires it (bearer-key auth, the URL pre-check, request ids), on the SQLite "+
		"store at its defaults (`synchronous=FULL`, %d workers), served on 127.0.0.1 and driven by this command's own load generator in "+
		"the same process, so that server and agents share the machine's %d cores. Each agent is a caller with a key of its own and one "+
		"keep-alive connection, and sends its next request as soon as the last is answered; a phase ends after %s or %s requests, "+
		"whichever comes first, and fails on any unexpected status. A status read asks for the summary of the agent's finished job of "+
		"32 targets; a result read asks for one of its 10 KiB results; a submit posts 32 new URLs (the caps are raised so that no submit "+
		"is refused, and the fetcher of submitted jobs waits until the run ends, so that their drain does not load the reads). "+
		"Latencies are per request, from sending it to reading the whole answer.",
		batch.DefaultWorkers, r.Machine.Cores, h.Phase, fmtRate(float64(h.MaxReqs)))
	b.head("route", "agents", "requests/s", "p50", "p99", "requests")
	for _, rt := range httpRoutes {
		for _, a := range h.Agents {
			res := h.Results[rt.Name][a]
			b.row("`"+rt.Route+"`", fmt.Sprint(a), fmtRate(res.rps()), fmtDur(quantile(res.Latencies, 0.50)),
				fmtDur(quantile(res.Latencies, 0.99)), fmtRate(float64(res.Requests)))
		}
	}
	b.line("")
}

func (r *report) memorySection(b *md) {
	m := r.Memory
	l, p := m.Live, m.Peak
	b.p("## Memory")
	b.p("Each measurement runs in a child process of its own, so that no other phase's heap or pages count. Heap is the runtime's "+
		"heap objects (`%s`); RSS is the process's resident set (`VmRSS`, and `VmHWM` for the peak).", heapObjects)
	b.p("**Per live job.** A runner on the SQLite store at its defaults, caps raised, whose fetcher blocks: after one warm-up job, %s "+
		"jobs of %d targets (each a %d-byte URL with `mode: clean`) are submitted and stay live, %d running and the rest queued. "+
		"Heap is live objects after a full GC. No results exist, so none are counted.", fmtRate(float64(l.Jobs)), l.Targets, len(liveTargets(l.Jobs, 1)[0].URL),
		batch.DefaultWorkers)
	b.head("", "before", fmt.Sprintf("with %s live jobs", fmtRate(float64(l.Jobs))), "per live job")
	b.row("heap", fmtBytes(float64(l.HeapBefore)), fmtBytes(float64(l.HeapLive)), fmtBytes(l.heapPerJob()))
	b.row("RSS", fmtBytes(float64(l.RSSBefore)), fmtBytes(float64(l.RSSLive)), fmtBytes(l.rssPerJob()))
	b.row("goroutines", "", fmt.Sprintf("+%d", l.Goroutines), fmt.Sprintf("%.3f", float64(l.Goroutines)/float64(l.Jobs)))
	b.line("")
	b.p("Queued jobs live in the store, not in the runner, so the heap holds only the jobs in flight; the RSS a job adds is mostly " +
		"SQLite's page cache and WAL index growing with its rows.")
	b.p("**Peak heap while a drain runs.** The runner at every default (%d jobs at most, one per caller here; %d workers) drains %d jobs × "+
		"%d targets whose fetcher returns a %s page at once: %s of results in all. The heap is sampled every millisecond over the "+
		"drain (live objects and garbage not yet collected, GOGC %s).", batch.DefaultJobsTotal, batch.DefaultWorkers, p.Jobs, p.Targets, fmtBytes(float64(p.ResultBytes)),
		fmtBytes(float64(p.allResults())), p.GOGC)
	b.head("", "value")
	b.row("heap before the drain (live, after GC)", fmtBytes(float64(p.HeapBefore)))
	b.row("peak heap during the drain", fmtBytes(float64(p.HeapPeak)))
	b.row("peak − before", fmtBytes(float64(p.HeapPeak-p.HeapBefore)))
	b.row("peak − before, in results", fmt.Sprintf("%.1f", float64(p.HeapPeak-p.HeapBefore)/float64(p.ResultBytes)))
	b.row("live heap after the drain (after GC)", fmtBytes(float64(p.HeapAfter)))
	b.row("RSS before → high-water mark", fmtBytes(float64(p.RSSBefore))+" → "+fmtBytes(float64(p.RSSPeak)))
	b.row("drain time", p.Elapsed.Round(time.Millisecond).String())
	b.line("")
}

func (r *report) growthSection(b *md) {
	g := r.Growth
	b.p("## Growth: per-operation cost as the store grows")
	b.p("Each store is seeded through the Store API itself with finished jobs of %d targets and %d-byte results (jobs of %d targets, "+
		"not 32, so that seeding 100k jobs stays within the run's time), one store per size. Then, in %d interleaved rounds over the "+
		"sizes, each operation is timed one call at a time: **submit** is `Store.Create` of a job of 32 targets by a new caller (reuse "+
		"and both caps are checked); **status** is `Store.Get` of a random seeded job's summary by its owner, without results; "+
		"**claim+finish** is `Store.Claim` of the oldest queued job (one the submits made) and `Store.FinishTarget` of each of its 32 "+
		"targets with a 10 KiB result: the whole drain of one job, 33 writes. Each operation runs for up to %s per size and round; "+
		"submits (and so claims) are also capped at a hundredth of the size (at least %d), so that a store grows by a few percent at "+
		"most while it is measured, and status reads at %s. Figures are medians of the calls.",
		seedTargets, seedResultBytes, seedTargets, growthRounds, fmtDur(g.PerOp), growthMinOps, fmtRate(float64(g.MaxOps)))
	cols := []string{"store", "operation"}
	for _, n := range g.Sizes {
		cols = append(cols, fmt.Sprintf("%s jobs", fmtRate(float64(n))))
	}
	first, last := g.Sizes[0], g.Sizes[len(g.Sizes)-1]
	cols = append(cols, fmt.Sprintf("%s ÷ %s", fmtRate(float64(last)), fmtRate(float64(first))))
	b.head(cols...)
	for _, s := range g.Stores {
		for _, op := range growthOps {
			cells := []string{s.Name, op}
			for _, n := range g.Sizes {
				cells = append(cells, fmtDur(s.median(op, n)))
			}
			cells = append(cells, fmtRatio(s.growth(op, first, last)))
			b.row(cells...)
		}
	}
	b.line("")
	for _, s := range g.Stores {
		line := fmt.Sprintf("%s: %s. Seeding took", s.Name, s.Settings)
		for i, n := range g.Sizes {
			sep := ","
			if i == 0 {
				sep = ""
			}
			line += fmt.Sprintf("%s %s for %s jobs", sep, s.Seeded[n].Round(10*time.Millisecond), fmtRate(float64(n)))
		}
		b.p("%s.", line)
	}
}

// growth is the median cost at size b over the median at size a.
func (g growthStoreResult) growth(op string, a, b int) float64 {
	x, y := g.median(op, a), g.median(op, b)
	if x <= 0 {
		return math.NaN()
	}
	return float64(y) / float64(x)
}
