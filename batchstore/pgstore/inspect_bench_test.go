package pgstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// seedInspect seeds n finished jobs (see seed), moves their finish times
// back past the last hour, and gives the store the same last hour at every
// size: 100 jobs of 4 targets finished now, two of each failed. So the
// console's reads differ by the finished jobs the store holds and nothing
// else.
func seedInspect(b *testing.B, s *Store, n int) {
	b.Helper()
	seed(b, s, n)
	sch := pgx.Identifier{s.opts.Schema}.Sanitize()
	for _, q := range []string{
		`UPDATE ` + sch + `.job SET finished_at = finished_at - interval '2 hours' WHERE finished_at IS NOT NULL`,
		`INSERT INTO ` + sch + `.job (id, caller, idem_key, status, targets_total, targets_ok, targets_failed, created_at, lease, finished_at, bytes)
		 SELECT 'recent' || i, 'c' || (i % 1000), md5('recent' || i), 'partial', 4, 2, 2, now(), now(), now(), 0
		 FROM generate_series(1, 100) i`,
		`INSERT INTO ` + sch + `.target (job_seq, idx, url, status, outcome)
		 SELECT j.seq, x, convert_to('https://example.test/' || j.id || '/' || x, 'UTF8'),
		        CASE WHEN x % 2 = 1 THEN 'failed' ELSE 'done' END, CASE WHEN x % 2 = 1 THEN 'timeout' ELSE 'ok' END
		 FROM ` + sch + `.job j, generate_series(0, 3) x WHERE j.id LIKE 'recent%'`,
		`UPDATE ` + sch + `.stat SET bytes = (SELECT sum(bytes) FROM ` + sch + `.job WHERE runner = '') WHERE id = 1`,
		// The update above left a dead version of every job: vacuumed, as
		// a store that grew by use is.
		`VACUUM ANALYZE ` + sch + `.job`, `VACUUM ANALYZE ` + sch + `.target`,
	} {
		if _, err := s.pool.Exec(context.Background(), q); err != nil {
			b.Fatalf("seed: %v\n%s", err, q)
		}
	}
}

// BenchmarkInspect: one console poll (Overview: the 50 newest jobs, the
// running ones, the last hour's failures, the runners, the outbox backlog
// of 2000 events and the 50 callers holding the most bytes) and one job's
// page (InspectJob), on stores of 1k and 100k finished jobs with the same
// last hour. They must stay flat: 100k within 2x of 1k.
//
//	BATCHKIT_PG_URL=… go test -run '^$' -bench BenchmarkInspect ./batchstore/pgstore/
func BenchmarkInspect(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			s := openTest(b, Config{})
			seedInspect(b, s, n)
			ctx := context.Background()
			b.Run("overview", func(b *testing.B) {
				for b.Loop() {
					now := time.Now()
					ov, err := s.Overview(ctx, batchdriver.OverviewParams{Recent: 50, Running: 50, Callers: 50,
						FailureWindow: time.Hour, Now: &now})
					if err != nil || len(ov.Recent) != 50 || ov.Failures[batchdriver.OutcomeTimeout] != 200 {
						b.Fatalf("overview: %d recent, failures %v, %v", len(ov.Recent), ov.Failures, err)
					}
				}
			})
			b.Run("job", func(b *testing.B) {
				for i := 0; b.Loop(); i++ {
					id := fmt.Sprint("f", 1+i%n)
					if _, ts, err := s.InspectJob(ctx, id); err != nil || len(ts) != 4 {
						b.Fatal(id, len(ts), err)
					}
				}
			})
		})
	}
}
