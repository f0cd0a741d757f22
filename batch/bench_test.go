package batch_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

var discard = slog.New(slog.DiscardHandler)

// BenchmarkRunner_Submit measures a submit of 32 targets on the in-memory
// store: validation, idempotency key, caps and insert. The jobs are cancelled
// in the same iteration so the caps never fill.
func BenchmarkRunner_Submit(b *testing.B) {
	clock := batchtest.NewClock()
	r := batchtest.NewRunner(b, batch.Config{
		Fetch:         batchtest.NewBlockingFetcher().Fetch,
		Workers:       1,
		JobsTotal:     1 << 20,
		JobsPerCaller: 1 << 20,
		Now:           clock.Now,
		Logger:        discard,
	})
	ts := batchtest.Targets("bench", 32)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		caller := batch.Caller{Name: fmt.Sprint("c", i)}
		i++
		idJob, _, err := r.Submit(ctx, caller, ts)
		if err != nil {
			b.Fatal(err)
		}
		id := idJob.ID
		if err := r.Cancel(ctx, caller, id); err != nil {
			b.Fatal(err)
		}
		if i%64 == 0 { // keep the store small: the in-memory store scans all jobs
			clock.Advance(48 * time.Hour)
			if _, err := r.Collect(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkRunner_Drain measures draining one job of 32 targets end to end
// with a zero-latency fetcher on the in-memory store; it reports targets/s.
func BenchmarkRunner_Drain(b *testing.B) {
	r := batchtest.NewRunner(b, batch.Config{Fetch: batchtest.StaticFetcher("content"), Logger: discard})
	ts := batchtest.Targets("drain", 32)
	ctx := context.Background()
	caller := batch.Caller{Name: "bench"}
	b.ReportAllocs()
	i := 0
	start := time.Now()
	for b.Loop() {
		ts[0].URL = fmt.Sprintf("https://drain.test/%d", i) // a new idempotency key each time
		i++
		idJob, _, err := r.Submit(ctx, caller, ts)
		if err != nil {
			b.Fatal(err)
		}
		id := idJob.ID
		for {
			info, err := r.Wait(ctx, caller, id, batch.WaitOptions{Timeout: 10 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			if info.Status.Finished() {
				break
			}
		}
	}
	b.ReportMetric(float64(i*len(ts))/time.Since(start).Seconds(), "targets/s")
}
