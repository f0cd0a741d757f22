package main

import (
	"fmt"
	"math"
	"strings"

	"github.com/siftfetch/batchkit/batch"
)

func (r *report) drainSection(b *md) {
	d := r.Drain
	w := d.Work
	b.p("## Drain throughput against peers")
	b.p("The fetcher here answers at once, so a target costs only its write and the runner's own steps: this is the ceiling of " +
		"the drain, not a day's work, and the agent day above shows how far below it an upstream's latency keeps the runner.")
	b.p("One job is %d items handled one at a time, in order, by a zero-latency handler whose result, a %s envelope of English-like words, "+
		"is stored; %d jobs (%d items) are submitted in a burst to workers that are already running (every library's workers run for %s "+
		"before the burst). A round's time runs from the first submit to the commit of the last item's result, and after each round every "+
		"contender checks that every result is stored. Each contender runs once per round, on a new SQLite file or PostgreSQL schema of its "+
		"own, and the order of the contenders turns by one each round, so that all see the same machine. %s; the README-setting "+
		"chain contenders, whose rate their poll settings fix, ran in the first %d. Figures are items per second, the median over the rounds "+
		"with the lowest and highest; a ratio is batchkit's rate over the contender's within one round, with its median and range over the rounds. "+
		"The drain took %s.",
		w.Items, fmtBytes(float64(w.ResultBytes)), w.Jobs, w.total(), settle, plural(d.Rounds, "round"), min(d.Rounds, slowRoundsOf(d)), d.Elapsed.Round(1e9))
	b.p("### How each peer models a batchkit job")
	b.line("- **chain**: %s. This is the model the issue names, and River makes its step atomic: `InsertTx` and `JobCompleteTx` in the "+
		"handler's transaction commit the item, start the next and retire the current one together, as batchkit's one write per target does.", modelText(modelChain))
	b.line("- **loop**: %s; the last item's transaction also completes the River job (`JobCompleteTx`). This is how batchkit's own workers "+
		"drain a job (a worker claims a job and runs its targets in order), and how a user would more likely write \"a job of 32 URLs\" on either peer.", modelText(modelLoop))
	b.line("- **River**: both models, because River supports both faithfully (transactional insert and completion for the chain, a long job for the loop).")
	b.line("- **goqite**: both models, within what it offers: its handler gets the message body but not its id, and its runner deletes the " +
		"message in a transaction of its own after the handler returns, so a chained step is two commits instead of one and not atomic.")
	b.line("- Both are reported; a goal against \"the faster tuned peer\" takes the fastest tuned configuration of either model.")
	b.line("")
	for _, g := range d.groups() {
		r.drainTable(b, g)
	}
	r.groupTable(b)
	if r.PGMissing != "" {
		b.p("PostgreSQL was not measured: %s.", r.PGMissing)
	}
	b.p("### Settings")
	b.p("README settings are each peer's README (River: a client with `MaxWorkers: 100` on the default queue, River's migrations, "+
		"riversqlite's advice of one connection; goqite: one connection, WAL, its schema, and the runner of its jobs example, `Limit: 1`, "+
		"`PollInterval: 10ms`). Tuned settings are the fastest of the tuning sweep below, chosen in this run. batchkit runs at its defaults, "+
		"%d workers, in every table but the group-commit one (%d workers).", batch.DefaultWorkers, groupWorkers)
	b.head("contender", "settings")
	seen := map[string]bool{}
	for _, c := range d.Contenders {
		name := c.Name
		if c.Group == postgres || c.Group == postgres4 {
			name += ", PostgreSQL"
		} else {
			name += ", SQLite"
		}
		if seen[name+c.Settings] {
			continue
		}
		seen[name+c.Settings] = true
		b.row(name, c.Settings)
	}
	b.line("")
	if len(d.Sweeps) > 0 {
		b.p("### Tuning sweeps")
		b.p("Each candidate ran one round of the full workload; the fastest (in bold) is the tuned setting for that peer and model, at both " +
			"synchronous settings. River documents `FetchCooldown` (at least 1 ms; the floor between two fetches, 100 ms by default, which caps " +
			"a chain of items near ten steps a second) and `FetchPollInterval` (the fallback poll, 1 s by default); goqite's runner sleeps " +
			"`PollInterval` whenever `Limit` jobs run and between polls of an empty queue. One round per candidate makes the pick itself " +
			"noisy on a shared machine: in a given round a README-setting row can beat its tuned row.")
		for _, sw := range d.Sweeps {
			b.head(sw.Name, "items/s")
			for i, s := range sw.Settings {
				rate := fmtRate(sw.Rates[i])
				if i == sw.Best {
					s, rate = "**"+s+"**", "**"+rate+"**"
				}
				b.row(s, rate)
			}
			b.line("")
		}
	}
	b.p("### What each does that batchkit does not, or the reverse")
	b.line("- **raw twin**: the least work that stores the same results: one connection (SQLite) or %d (PostgreSQL), no validation, "+
		"caps, idempotency, lease, byte budget, runner fencing or metrics; its figure is the ceiling.", batch.DefaultWorkers)
	b.line("- **batchkit**: per submit it validates the targets, derives an idempotency key and checks reuse and both caps in the " +
		"insert's transaction; per target it stores the target's status, outcome and byte count, the result in a row of its own and the " +
		"next target's start in one commit, fenced by the runner that holds the job, and counts metrics. It never retries a target: a job " +
		"a restart interrupts fails (at most once).")
	b.line("- **River**: keeps a job row per River job (args, state, attempt, metadata), claims jobs with fetch queries, tells fetchers " +
		"of inserts (riversqlite through a notification table it polls, riverpgxv5 through LISTEN/NOTIFY) and runs maintenance services " +
		"beside the workers; it retries a failed job with back-off (at least once). It stores no results: the side tables do, as they " +
		"would for a user, and in the loop model the item-by-item progress lives only there (a rerun job starts over).")
	b.line("- **goqite**: per message a receive transaction (an `UPDATE … RETURNING` whose trigger rewrites `updated`), the handler's " +
		"transaction and a delete transaction; it redelivers a message after its timeout (at least once, three receives by default). It " +
		"has no per-item state, caps, idempotency or results: the side tables store the results.")
	b.line("")
}

func slowRoundsOf(d *drainReport) int {
	n := 0
	for _, c := range d.Contenders {
		if c.Slow {
			v, _ := d.rates(c.Key)
			m := 0
			for _, x := range v {
				if !math.IsNaN(x) {
					m++
				}
			}
			n = max(n, m)
		}
	}
	if n == 0 {
		return d.Rounds
	}
	return n
}

func plural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func (r *report) drainTable(b *md, group string) {
	d := r.Drain
	b.p("### %s", group)
	b.head("contender", "model", "items/s", "batchkit ÷ contender")
	for _, c := range d.Contenders {
		if c.Group != group || c.Peer == groupPeer {
			continue
		}
		_, s := d.rates(c.Key)
		ratio := "—"
		if c.Peer != "batchkit" {
			ratio = fmtSpread(d.ratio(group, c.Key), fmtRatio)
		}
		model := "—"
		switch {
		case strings.Contains(c.Key, "-chain-"):
			model = modelChain
		case strings.Contains(c.Key, "-loop-"):
			model = modelLoop
		}
		name := c.Name
		if c.Peer == "batchkit" {
			name = "**batchkit**"
		}
		b.row(name, model, fmtSpread(s, fmtRate), ratio)
	}
	b.line("")
}

// groupPeer is the peer name of the group-commit contender.
var groupPeer = fmt.Sprintf("batchkit-%d", groupWorkers)

// groupTable reports the SQLite store's group commit: batchkit at
// groupWorkers workers against the raw twin (one transaction per item) at
// each synchronous setting, and FULL against NORMAL.
func (r *report) groupTable(b *md) {
	d := r.Drain
	full, normal := d.find(sqliteFull, groupPeer, false, ""), d.find(sqliteNormal, groupPeer, false, "")
	if full == nil && normal == nil {
		return
	}
	b.p("### SQLite group commit: %d workers", groupWorkers)
	b.p("The same workload with %d workers, so that %d jobs drain at once: the store's one writer commits the target writes of "+
		"jobs that arrive together in one transaction (see docs/design/sqlite-store.md, \"Group commit\"), where the raw twin "+
		"commits once per item. Ratios are taken within each round; the last row is the %d-worker drain under FULL over the same under "+
		"NORMAL, i.e. how close durable commits come to NORMAL's speed.", groupWorkers, groupWorkers, groupWorkers)
	b.head("synchronous", fmt.Sprintf("batchkit, %d workers, items/s", groupWorkers), "raw twin, items/s",
		fmt.Sprintf("batchkit (%d workers) ÷ raw twin", groupWorkers), fmt.Sprintf("batchkit (%d workers) ÷ raw twin", batch.DefaultWorkers))
	for _, g := range []struct {
		group, name string
		c           *contender
	}{{sqliteNormal, "NORMAL", normal}, {sqliteFull, "FULL", full}} {
		raw := d.find(g.group, "raw", false, "")
		if g.c == nil || raw == nil {
			continue
		}
		_, s := d.rates(g.c.Key)
		_, rs := d.rates(raw.Key)
		b.row(g.name, fmtSpread(s, fmtRate), fmtSpread(rs, fmtRate), fmtSpread(d.ratioOf(g.c.Key, raw.Key), fmtRatio),
			fmtSpread(d.ratio(g.group, raw.Key), fmtRatio))
	}
	if full != nil && normal != nil {
		b.row(fmt.Sprintf("FULL ÷ NORMAL, %d workers", groupWorkers), "", "", fmtSpread(d.ratioOf(full.Key, normal.Key), fmtRatio), "")
	}
	b.line("")
}
