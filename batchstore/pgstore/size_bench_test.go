package pgstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchdriver/batchdrivertest"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// The store stays flat as it grows: each operation on a store seeded with
// 1k and with 50k finished jobs (four targets each, see seed) costs about
// the same, because every statement reads through an index
// (TestStore_QueryPlans) and nothing counts or sums the finished jobs.
//
//	BATCHKIT_PG_URL=… go test -run '^$' -bench BenchmarkStoreSize ./batchstore/pgstore/
func BenchmarkStoreSize(b *testing.B) {
	for _, n := range []int{1_000, 50_000} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			s := openTest(b, Config{})
			seed(b, s, n)
			ctx := context.Background()
			ops := []struct {
				name string
				fn   func(i int) error
			}{
				{"status", func(i int) error {
					j := 1 + i%n // seeded job f<j> belongs to caller c<j % 1000>
					_, _, err := s.Get(ctx, batchdriver.GetParams{Caller: fmt.Sprint("c", j%1000), JobID: fmt.Sprint("f", j)})
					return err
				}},
				{"stats", func(int) error { _, err := s.Stats(ctx); return err }},
				{"sweep-nothing-expired", func(int) error {
					_, err := s.Sweep(ctx, batchdriver.SweepParams{TTL: 1000 * time.Hour})
					return err
				}},
				{"evict-under-budget", func(int) error { _, err := s.Evict(ctx, batchdriver.EvictParams{MaxBytes: 1 << 40}); return err }},
				// One job over the budget (a Stats read, then the pass that
				// picks the caller holding the most and deletes its oldest job).
				{"evict-one", func(int) error {
					st, err := s.Stats(ctx)
					if err != nil {
						return err
					}
					if n, err := s.Evict(ctx, batchdriver.EvictParams{MaxBytes: st.Bytes - 1}); err != nil || n != 1 {
						return fmt.Errorf("evict = %d, %w; want 1", n, err)
					}
					return nil
				}},
				{"reap-nothing-stale", func(int) error {
					_, err := s.Reap(ctx, batchdriver.ReapParams{StaleAfter: time.Hour, Reason: "restart"})
					return err
				}},
				{"submit-claim-drain", func(i int) error {
					ts := batchtest.Targets(fmt.Sprint("size-", i), 2)
					id := fmt.Sprint("bench-", i)
					caller := batchdriver.Caller{Name: fmt.Sprint("c", i%1000)}
					_, _, err := s.Create(ctx, batchdriver.CreateParams{ID: id, Caller: caller, IdemKey: batchdrivertest.IdemKey(caller.Name, ts),
						Targets: ts, Limits: testLimits})
					if err != nil {
						return err
					}
					c, ok, err := s.Claim(ctx, batchdriver.ClaimParams{Runner: "bench"})
					if err != nil || !ok {
						return fmt.Errorf("claim: %v, %w", ok, err)
					}
					for next := c.Next; next >= 0; {
						st, err := s.FinishTarget(ctx, batchdriver.FinishParams{JobID: c.Job.ID, Runner: "bench",
							Target: batchdriver.TargetFinish{Idx: next, Status: batchdriver.TargetDone, Outcome: batchdriver.OutcomeOK, Result: []byte(`{"content":"x"}`)}})
						if err != nil {
							return err
						}
						next = st.Next
					}
					return nil
				}},
			}
			for _, op := range ops {
				b.Run(op.name, func(b *testing.B) {
					i := 0
					for b.Loop() {
						if err := op.fn(i); err != nil {
							b.Fatal(err)
						}
						i++
					}
				})
			}
		})
	}
}
