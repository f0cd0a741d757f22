package pgstore

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batchstore/pgstore/pgstoretest"
)

// The tests talk to a real PostgreSQL server named by BATCHKIT_PG_URL,
// e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable. Without it
// they skip, except under CI=true, where the package fails at once: CI must
// not pass by skipping them. Each test works in a schema of its own,
// dropped when it ends, so tests run in parallel on one database.
const urlEnv = "BATCHKIT_PG_URL"

// testMaxConns is the pool size of a test store: small, so that parallel
// tests stay well inside max_connections (100 by default). A test store
// uses at most this plus its listener.
const testMaxConns = 3

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(runChild(mode))
	}
	if os.Getenv(urlEnv) == "" && os.Getenv("CI") == "true" {
		fmt.Fprintf(os.Stderr, "pgstore: %s is not set, and CI=true: the PostgreSQL tests must run in CI, not skip\n", urlEnv)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 { // no goroutine outlives the tests
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// pgURL returns the server's URL or skips the test.
func pgURL(tb testing.TB) string {
	tb.Helper()
	return pgstoretest.URL(tb)
}

// newSchema returns the name of a schema that does not exist yet and is
// dropped, with everything in it, when the test ends (after every cleanup
// registered later, such as the stores' Close).
func newSchema(tb testing.TB) string {
	tb.Helper()
	_, name := pgstoretest.Schema(tb, "bkt")
	return name
}

// openTest opens a store on a new schema and closes it when the test
// ends, after checking that its counters match its rows. Unless opts says
// otherwise, it has a small pool.
func openTest(tb testing.TB, opts Config) *Store {
	tb.Helper()
	if opts.Schema == "" {
		opts.Schema = newSchema(tb)
	}
	return openOn(tb, opts)
}

// openOn opens one more store (one more node) on opts.Schema, which the
// caller made with newSchema.
func openOn(tb testing.TB, opts Config) *Store {
	tb.Helper()
	if opts.MaxConns == 0 {
		opts.MaxConns = testMaxConns
	}
	s, err := Open(context.Background(), pgURL(tb), opts)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.checkCounters(context.Background()); err != nil {
			tb.Errorf("after the test: %v", err)
		}
		if err := s.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return s
}

// checkCounters re-derives what the store maintains from its rows and
// reports any difference: the byte counter from the released jobs, each
// caller's byte counter from its released jobs, each job's bytes and progress from its targets, and the drain's invariant (a
// held job's target in flight is pending in its row).
func (s *Store) checkCounters(ctx context.Context) error {
	if s.closed.Load() {
		return nil
	}
	schema := pgx.Identifier{s.opts.Schema}.Sanitize()
	var counted, released, badJobs, badHeld int64
	err := s.pool.QueryRow(ctx, `SELECT
		(SELECT sum(bytes) FROM `+schema+`.stat),
		(SELECT coalesce(sum(bytes), 0) FROM `+schema+`.job WHERE runner = ''),
		(SELECT count(*) FROM `+schema+`.job j WHERE
			j.bytes <> (SELECT coalesce(sum(octet_length(t.error) + coalesce(octet_length(t.result), 0)), 0) FROM `+schema+`.target t WHERE t.job_seq = j.seq)
			OR j.targets_ok <> (SELECT count(*) FROM `+schema+`.target t WHERE t.job_seq = j.seq AND t.status = 'done')
			OR j.targets_failed <> (SELECT count(*) FROM `+schema+`.target t WHERE t.job_seq = j.seq AND t.status = 'failed')),
		(SELECT count(*) FROM `+schema+`.job j WHERE j.runner <> '' AND NOT EXISTS (SELECT 1 FROM `+schema+`.target t
				WHERE t.job_seq = j.seq AND t.idx = j.in_flight AND t.status = 'pending'))`).
		Scan(&counted, &released, &badJobs, &badHeld)
	if err != nil {
		return fmt.Errorf("check counters: %w", err)
	}
	if counted != released || badJobs != 0 || badHeld != 0 {
		return fmt.Errorf("byte counter %d, released jobs' bytes %d; %d jobs whose bytes or counts differ from their targets; %d held jobs whose target in flight is not pending",
			counted, released, badJobs, badHeld)
	}
	// Each caller's counter against its released jobs' bytes, both ways.
	derived := `SELECT caller, sum(bytes) FROM ` + schema + `.job WHERE runner = '' GROUP BY caller HAVING sum(bytes) <> 0`
	var wrong int64
	// A caller's counter is its row plus the deltas not yet folded in.
	counters := `SELECT caller, sum(bytes) FROM (SELECT caller, bytes FROM ` + schema + `.caller_bytes
		UNION ALL SELECT caller, delta FROM ` + schema + `.caller_bytes_log) c GROUP BY caller HAVING sum(bytes) <> 0`
	err = s.pool.QueryRow(ctx, `SELECT count(*) FROM ((`+counters+` EXCEPT `+derived+`)
		UNION ALL (`+derived+` EXCEPT `+counters+`)) d`).Scan(&wrong)
	if err != nil {
		return fmt.Errorf("check caller counters: %w", err)
	}
	if wrong != 0 {
		return fmt.Errorf("%d callers' byte counters differ from their released jobs", wrong)
	}
	return nil
}

// testLimits never cap anything.
var testLimits = batchdriver.Limits{JobsPerCaller: 1 << 20, JobsTotal: 1 << 20, TTL: 24 * time.Hour}
