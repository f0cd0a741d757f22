package batchstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// recentActivity gives a seeded store the same last hour at every size:
// 100 jobs of 4 targets, finished now, two of each failed (the seeded jobs
// finished in 2020). So the console's reads below differ by the finished
// jobs the store holds and nothing else.
func recentActivity(b *testing.B, st *benchState) {
	b.Helper()
	if _, ok := st.fixtures["recent"]; ok {
		return
	}
	ctx := context.Background()
	for i := range 100 {
		id := fmt.Sprintf("recent-%d-%d", i, time.Now().UnixNano())
		if _, _, err := st.s.Create(ctx, withLimits(newJob(id, fmt.Sprint("seeder-", i), 4, time.Now()), benchLimits)); err != nil {
			b.Fatal(err)
		}
		_, err := drainJob(ctx, st.s, "bench", id, func(idx int) batchdriver.TargetFinish {
			if idx%2 == 1 {
				return batchdriver.TargetFinish{Idx: idx, Status: batchdriver.TargetFailed, Outcome: batchdriver.OutcomeTimeout, Error: "deadline"}
			}
			return batchdriver.TargetFinish{Idx: idx, Status: batchdriver.TargetDone, Outcome: batchdriver.OutcomeOK, Result: []byte(`{"content":"x"}`)}
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	st.fixtures["recent"] = "done"
}

// BenchmarkInspectOverview: one console poll (batch.Inspector.Overview:
// the 50 newest jobs, the running ones, the last hour's failures, the
// runners, the outbox and the 50 callers holding the most bytes) on stores
// of 1k, 10k and 100k finished jobs with the same last hour. It must stay
// flat: 100k within 2x of 1k.
func BenchmarkInspectOverview(b *testing.B) {
	forSizes(b, func(b *testing.B, st *benchState) {
		recentActivity(b, st)
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			now := time.Now()
			ov, err := st.s.Overview(ctx, batchdriver.OverviewParams{Recent: 50, Running: 50, Callers: 50,
				FailureWindow: time.Hour, Now: &now})
			if err != nil || len(ov.Recent) != 50 || ov.Failures[batchdriver.OutcomeTimeout] != 200 {
				b.Fatalf("overview: %d recent, failures %v, %v", len(ov.Recent), ov.Failures, err)
			}
		}
	})
}

// BenchmarkInspectJob: the console's page of one job (InspectJob).
func BenchmarkInspectJob(b *testing.B) {
	forSizes(b, func(b *testing.B, st *benchState) {
		id := doneJob(b, st, 0)
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if _, ts, err := st.s.InspectJob(ctx, id); err != nil || len(ts) != 32 {
				b.Fatal(len(ts), err)
			}
		}
	})
}
