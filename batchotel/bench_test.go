package batchotel_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchotel"
	"github.com/siftfetch/batchkit/batchstore"
)

// The cost of tracing on the drain: one round submits benchJobs jobs of
// benchTargets targets in a burst to a started runner on a new SQLite
// store, or a new in-memory one (whose writes cost next to nothing: the
// worst case for the spans' share), with the default workers and a
// fetcher that answers at once, and ends
// when every job is finished, once without an observer and once with
// batchotel on an SDK tracer provider that samples every span and hands
// it, through the batch span processor, to an exporter that drops it. The
// two alternate, on new files each round, so that both see the same
// machine. A round's ratio is the traced rate over the plain one; the
// benchmark reports the median over the rounds of one run (the shared
// 2-core machine is noisy), with the lowest and highest, of the wall
// time's and of the process's CPU time's (which other processes disturb
// less), and the CPU time per target of each.
//
//	go test -run '^$' -bench BenchmarkDrainTraced -benchtime 15x ./batchotel/
//
// Each store runs twice: tracer=sdk (tracing on, every span sampled) and
// tracer=noop (batchotel on the API's no-op provider).
const (
	benchJobs    = 16
	benchTargets = 32
)

func BenchmarkDrainTraced(b *testing.B) {
	for _, store := range []string{"sqlite", "memory"} {
		for _, tracer := range []string{"sdk", "noop"} {
			b.Run("store="+store+"/tracer="+tracer, func(b *testing.B) { benchDrainTraced(b, store, tracer) })
		}
	}
}

// benchDrainTraced runs the rounds of one store, traced by tracer: "sdk",
// the SDK sampling every span into a batch processor and an exporter that
// drops them (tracing on), or "noop", the API's no-op provider, what a
// host that wires batchotel without an SDK (or otel's global default) runs.
func benchDrainTraced(b *testing.B, store, tracer string) {
	var plain, traced, plainCPU, tracedCPU time.Duration
	var ratios, cpuRatios []float64
	for i := range b.N {
		var p, t round
		if i%2 == 0 { // alternate which goes first
			p, t = drainRound(b, store, ""), drainRound(b, store, tracer)
		} else {
			t, p = drainRound(b, store, tracer), drainRound(b, store, "")
		}
		plain, traced = plain+p.wall, traced+t.wall
		plainCPU, tracedCPU = plainCPU+p.cpu, tracedCPU+t.cpu
		ratios = append(ratios, p.wall.Seconds()/t.wall.Seconds())
		cpuRatios = append(cpuRatios, p.cpu.Seconds()/t.cpu.Seconds())
	}
	n := float64(b.N * benchJobs * benchTargets)
	b.ReportMetric(n/plain.Seconds(), "targets/s")
	b.ReportMetric(n/traced.Seconds(), "traced-targets/s")
	b.ReportMetric(float64(plainCPU.Microseconds())/n, "cpu-µs/target")
	b.ReportMetric(float64(tracedCPU.Microseconds())/n, "traced-cpu-µs/target")
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "ratio")
	b.ReportMetric(ratios[0], "ratio-min")
	b.ReportMetric(ratios[len(ratios)-1], "ratio-max")
	slices.Sort(cpuRatios)
	b.ReportMetric(cpuRatios[len(cpuRatios)/2], "cpu-ratio")
	b.ReportMetric(cpuRatios[0], "cpu-ratio-min")
	b.ReportMetric(cpuRatios[len(cpuRatios)-1], "cpu-ratio-max")
}

// round is what one round took: wall time, and the process's CPU time
// (user and system, every goroutine: the span processor's too), which the
// other processes on a shared machine disturb less.
type round struct{ wall, cpu time.Duration }

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

var discard = slog.New(slog.DiscardHandler)

// dropExporter is a span exporter that drops every span.
type dropExporter struct{}

func (dropExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (dropExporter) Shutdown(context.Context) error                             { return nil }

// drainRound drains one round on a new store of kind, traced by tracer
// ("" for no observer; see benchDrainTraced).
func drainRound(b *testing.B, kind, tracer string) round {
	b.Helper()
	ctx := context.Background()
	var store batchdriver.Store = batchtest.NewStore()
	if kind == "sqlite" {
		s, err := batchstore.Open(ctx, filepath.Join(b.TempDir(), "batch.db"), batchstore.Config{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		store = s
	}
	cfg := batch.Config{
		Store: store, Fetch: batchtest.StaticFetcher("content"), Logger: discard,
		JobsTotal: benchJobs, JobsPerCaller: benchJobs,
	}
	switch tracer {
	case "sdk":
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(dropExporter{}))
		defer tp.Shutdown(ctx)
		cfg.Observer = batchotel.New(batchotel.Config{TracerProvider: tp})
	case "noop":
		cfg.Observer = batchotel.New(batchotel.Config{TracerProvider: noop.NewTracerProvider()})
	}
	r, err := batch.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer r.Close(ctx)
	caller := batch.Caller{Name: "bench"}
	start, startCPU := time.Now(), cpuTime(b)
	ids := make([]string, benchJobs)
	for i := range ids {
		job, _, err := r.Submit(ctx, caller, batchtest.Targets(fmt.Sprint("j", i), benchTargets))
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = job.ID
	}
	for _, id := range ids {
		for {
			info, err := r.Wait(ctx, caller, id, batch.WaitOptions{Timeout: batch.MaxWait})
			if err != nil {
				b.Fatal(err)
			}
			if info.Status.Finished() {
				break
			}
		}
	}
	return round{wall: time.Since(start), cpu: cpuTime(b) - startCPU}
}
