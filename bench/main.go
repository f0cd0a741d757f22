// Command bench measures batchkit under an agent's day of load against an
// upstream of realistic latency (the agent day), and beside River and
// goqite and a raw-engine twin of each store in a zero-latency drain, in
// one run on one machine, and writes BENCHMARKS.md.
// A raw twin is the least work that stores the same results on the same
// engine: no validation, caps, idempotency, lease, budget or fencing. Its
// figure is the ceiling batchkit is measured against.
//
//	cd bench && go run . -out ../BENCHMARKS.md   # the full run (bench/run does this)
//	cd bench && go run . -short                  # a smoke run of a few seconds
//
// The ablation (-phases ablation, not among the defaults) switches each
// throughput mechanism of the stores off in turn (internal/ablation) and
// writes only its own section of the report; a run without it carries
// that section over from the report it replaces.
//
// Every figure in the report comes from the run that writes it. The
// PostgreSQL contenders run when BATCHKIT_PG_URL names a server that
// answers (under CI=true they must).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == childFlag {
		os.Exit(runChild(os.Args[2:]))
	}
	os.Exit(run())
}

// options are the command's flags.
type options struct {
	short  bool
	out    string
	phases map[string]bool
	rounds int
	only   *regexp.Regexp
	pgOnly bool

	adWindow time.Duration  // the agent day's measured window per case
	adOnly   *regexp.Regexp // the agent day's cases to run ("<scale>/<case>")
	abOnly   *regexp.Regexp // the ablation's mechanisms to switch off (their keys)
}

func run() int {
	var o options
	var phases string
	flag.BoolVar(&o.short, "short", false, "a smoke run: every contender and table, on tiny sizes, in seconds")
	flag.StringVar(&o.out, "out", "", "where to write the report (default ../BENCHMARKS.md, or none with -short)")
	flag.StringVar(&phases, "phases", "agentday,drain,pgcost,nodes,http,memory,growth", "the phases to run, comma-separated; ablation (about 45 minutes) is not among the default ones, and run alone it replaces its section of -out")
	flag.BoolVar(&o.pgOnly, "pg-only", false, "run the PostgreSQL contenders of the drain alone (their rows of the report)")
	flag.IntVar(&o.rounds, "rounds", 0, "drain rounds (default 5, 1 with -short)")
	only := flag.String("only", "", "a regexp: the drain runs only the contenders whose key matches (e.g. 'sqlite-.*/(batchkit|raw)'), without the sweeps")
	flag.DurationVar(&o.adWindow, "agentday-window", 0, "the agent day's measured window per case (default 60s, 1s with -short)")
	adOnly := flag.String("agentday-only", "", "a regexp: the agent day runs only the cases whose '<scale>/<case>' matches (e.g. '20ms/(memory|sqlite-full)')")
	abOnly := flag.String("ablation-only", "", "a regexp: the ablation switches off only the mechanisms whose key matches (e.g. 'sqlite-linger'), by hand")
	flag.Parse()
	for _, re := range []struct {
		flag, expr string
		to         **regexp.Regexp
	}{{"only", *only, &o.only}, {"agentday-only", *adOnly, &o.adOnly}, {"ablation-only", *abOnly, &o.abOnly}} {
		if re.expr == "" {
			continue
		}
		c, err := regexp.Compile(re.expr)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: -%s: %v\n", re.flag, err)
			return 2
		}
		*re.to = c
	}
	o.phases = map[string]bool{}
	for _, p := range strings.Split(phases, ",") {
		o.phases[strings.TrimSpace(p)] = true
	}
	if o.out == "" && !o.short {
		o.out = "../BENCHMARKS.md"
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer dropLiveSchemas()
	if err := bench(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	return 0
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func bench(ctx context.Context, o options) error {
	start := time.Now()
	tmp, err := os.MkdirTemp("", "batchkit-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	rep := &report{Short: o.short, Start: start}
	pgURL, why := pgURLFromEnv(ctx)
	if pgURL == "" && os.Getenv("CI") == "true" {
		return fmt.Errorf("PostgreSQL is required under CI=true: %s", why)
	}
	rep.PGMissing = why
	if rep.Machine, err = machineInfo(ctx, tmp, pgURL); err != nil {
		return err
	}
	sz := sizesFor(o)
	if o.phases["agentday"] {
		if rep.AgentDay, err = agentDayPhase(ctx, o, tmp, pgURL, why); err != nil {
			return err
		}
	}
	if o.phases["drain"] {
		if rep.Drain, err = drainPhase(ctx, sz, tmp, pgURL); err != nil {
			return err
		}
	}
	if o.phases["pgcost"] && pgURL != "" {
		if rep.PGCost, err = pgCostPhase(ctx, sz, tmp, pgURL); err != nil {
			return err
		}
	}
	if o.phases["nodes"] && pgURL != "" {
		if rep.Nodes, err = nodesPhase(ctx, sz.nodes, pgURL); err != nil {
			return err
		}
	}
	if o.phases["http"] {
		if rep.HTTP, err = httpPhase(ctx, sz, tmp); err != nil {
			return err
		}
	}
	if o.phases["memory"] {
		if rep.Memory, err = memoryPhase(ctx, sz, tmp); err != nil {
			return err
		}
	}
	if o.phases["growth"] {
		if rep.Growth, err = growthPhase(ctx, sz, tmp, pgURL); err != nil {
			return err
		}
	}
	if o.phases["ablation"] {
		if rep.Ablation, err = ablationPhase(ctx, o, sz, tmp, pgURL); err != nil {
			return err
		}
	}
	rep.Elapsed = time.Since(start)
	var old []byte
	if o.out != "" {
		if old, err = os.ReadFile(o.out); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if rep.CarriedAblation, err = carriedAblation(string(old)); err != nil {
		return fmt.Errorf("%s: %w", o.out, err)
	}
	text := rep.markdown()
	if len(o.phases) == 1 && rep.Ablation != nil && len(old) > 0 {
		// The ablation alone: its section replaces the one in the report.
		if text, err = spliceAblation(string(old), rep.Ablation.markdown(o.short)); err != nil {
			return fmt.Errorf("%s: %w", o.out, err)
		}
	}
	if o.out == "" {
		logf("smoke run done in %s; no report written (-out names a file)", rep.Elapsed.Round(time.Second))
		return nil
	}
	if err := os.WriteFile(o.out, []byte(text), 0o644); err != nil {
		return err
	}
	logf("wrote %s in %s", o.out, rep.Elapsed.Round(time.Second))
	return nil
}
