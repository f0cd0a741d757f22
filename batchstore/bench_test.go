package batchstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// Benchmarks run on stores seeded with 1k, 10k and 100k finished jobs
// (4 targets and 4 results of 64 bytes each), built once per process with
// raw SQL in one transaction and copied per size. They use synchronous =
// NORMAL, so that they measure the store's work rather than the disk's
// fsync; BenchmarkRawUpdate is the same-run baseline on the same file and
// settings. Run them with
//
//	go test -run '^$' -bench . -benchtime 1s ./batchstore/

var benchSizes = []int{1_000, 10_000, 100_000}

// benchT0 is the lease of seeded job 0; seeded job i has lease benchT0+i s,
// long before any lease the benchmarks themselves write.
var benchT0 = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

const seedTargets, seedResultBytes = 4, 64

// benchState is one seeded store, shared by every benchmark of its size.
type benchState struct {
	s         *Store
	nextLease int64 // lease of the next replacement job
	nextSeed  int64 // id number of the next replacement job
	fixtures  map[string]string
}

var bench struct {
	mu     sync.Mutex
	dir    string
	stores map[int]*benchState
}

// removeBenchTemplates closes the shared stores and removes their files.
func removeBenchTemplates() {
	bench.mu.Lock()
	defer bench.mu.Unlock()
	for _, st := range bench.stores {
		st.s.Close()
	}
	if bench.dir != "" {
		os.RemoveAll(bench.dir)
	}
}

// seededStore returns the shared store of n seeded jobs, building it on
// first use.
func seededStore(b *testing.B, n int) *benchState {
	b.Helper()
	bench.mu.Lock()
	defer bench.mu.Unlock()
	if st, ok := bench.stores[n]; ok {
		return st
	}
	if bench.dir == "" {
		dir, err := os.MkdirTemp("", "batchstore-bench-")
		if err != nil {
			b.Fatal(err)
		}
		bench.dir, bench.stores = dir, map[int]*benchState{}
	}
	start := time.Now()
	tmpl := filepath.Join(bench.dir, fmt.Sprintf("template-%d.db", n))
	s, err := Open(context.Background(), tmpl, Config{Synchronous: SyncNormal})
	if err != nil {
		b.Fatal(err)
	}
	err = s.write(context.Background(), "seed", func(conn *sqlite.Conn) error {
		return seedJobs(conn, 0, int64(n))
	})
	if err == nil {
		err = s.Close()
	}
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(bench.dir, fmt.Sprintf("bench-%d.db", n))
	if err := copyFile(tmpl, path); err != nil {
		b.Fatal(err)
	}
	if s, err = Open(context.Background(), path, Config{Synchronous: SyncNormal}); err != nil {
		b.Fatal(err)
	}
	st := &benchState{s: s, nextLease: int64(n), nextSeed: int64(n), fixtures: map[string]string{}}
	bench.stores[n] = st
	b.Logf("seeded %d jobs in %s (%d bytes)", n, time.Since(start).Round(time.Millisecond), fileSizeOf(path))
	return st
}

// seedJobs inserts count finished jobs numbered from first, each with
// seedTargets done targets and results; job i has lease benchT0+i s. The
// triggers keep the counters right.
func seedJobs(conn *sqlite.Conn, first, count int64) error {
	maxSeq, err := countInt(conn, `SELECT coalesce(max(seq), 0) FROM batch_job`)
	if err != nil {
		return err
	}
	maxBody, err := countInt(conn, `SELECT coalesce(max(id), 0) FROM batch_body`)
	if err != nil {
		return err
	}
	t0 := benchT0.UnixNano()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`WITH RECURSIVE n(i) AS (SELECT ?1 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?1 + ?2)
		INSERT INTO batch_job (id, caller, idem_key, status, targets_total, targets_done,
			created_at, lease, finished_at, bytes)
		SELECT printf('seed-%d', i), printf('seeder-%d', i % 997), printf('seed-key-%d', i), 'done', ?4, ?4,
			?3 + i * 1000000000, ?3 + i * 1000000000, ?3 + i * 1000000000, ?4 * ?5 FROM n`,
			[]any{first, count, t0, seedTargets, seedResultBytes}},
		{`WITH RECURSIVE k(idx) AS (SELECT 0 UNION ALL SELECT idx + 1 FROM k WHERE idx + 1 < ?1)
		INSERT INTO batch_target (job_seq, idx, url, status, outcome, result_id)
		SELECT j.seq, k.idx, printf('https://example.test/%d/%d', j.seq, k.idx), 'done', 'ok',
			?3 + (j.seq - ?2 - 1) * ?1 + k.idx + 1
		FROM batch_job j, k WHERE j.seq > ?2`, []any{seedTargets, maxSeq, maxBody}},
		{`INSERT INTO batch_body (id, body)
		SELECT result_id, zeroblob(?1) FROM batch_target WHERE job_seq > ?2`, []any{seedResultBytes, maxSeq}},
	} {
		if err := sqlitex.Execute(conn, q.sql, &sqlitex.ExecOptions{Args: q.args}); err != nil {
			return err
		}
	}
	return nil
}

// replace inserts one more seeded job with the newest seeded lease, so that
// a benchmark that deletes one job per operation keeps the size it runs at.
func (st *benchState) replace(b *testing.B) {
	err := st.s.write(context.Background(), "replace", func(conn *sqlite.Conn) error {
		return seedJobs(conn, st.nextSeed, 1)
	})
	if err != nil {
		b.Fatal(err)
	}
	st.nextSeed++
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600) // Open refuses a world-readable database
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func fileSizeOf(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return -1
	}
	return fi.Size()
}

// forSizes runs fn as a sub-benchmark per store size.
func forSizes(b *testing.B, fn func(b *testing.B, st *benchState)) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) { fn(b, seededStore(b, n)) })
	}
}

var benchLimits = batchdriver.Limits{JobsPerCaller: 1, JobsTotal: 1 << 30, TTL: time.Hour}

// BenchmarkCreate: submit a job of 8 targets (a new caller each time, so
// the per-caller cap is checked, not hit).
func BenchmarkCreate(b *testing.B) {
	forSizes(b, func(b *testing.B, st *benchState) {
		ctx := context.Background()
		for i := 0; b.Loop(); i++ {
			id := fmt.Sprintf("create-%d-%d", time.Now().UnixNano(), i)
			if _, _, err := st.s.Create(ctx, withLimits(newJob(id, id, 8, time.Now()), benchLimits)); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		// Fail the queued jobs, so that later claims see only their own.
		if _, err := st.s.Reap(ctx, batchdriver.ReapParams{AllLive: true, Reason: "bench"}); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkFinishTarget: the drain's one write per target: store a 10 KB
// result of the target in flight and start the next one (every 32nd write
// finishes its job).
func BenchmarkFinishTarget(b *testing.B) {
	forSizes(b, func(b *testing.B, st *benchState) {
		ctx := context.Background()
		result := make([]byte, 10<<10)
		next, id := -1, ""
		for i := 0; i < b.N; i++ {
			if next < 0 {
				b.StopTimer()
				id = claimedJob(b, st.s, fmt.Sprintf("finish-%d-%d", time.Now().UnixNano(), i), 32)
				next = 0
				b.StartTimer()
			}
			binary.LittleEndian.PutUint64(result, uint64(i))
			fin := batchdriver.TargetFinish{Idx: next, Status: batchdriver.TargetDone, Outcome: batchdriver.OutcomeOK, Result: result}
			step, err := st.s.FinishTarget(ctx, batchdriver.FinishParams{JobID: id, Runner: "bench", Target: fin})
			if err != nil {
				b.Fatal(err)
			}
			next = step.Next
		}
		b.StopTimer()
		// Release a job left mid-drain, so that later claims see only their own.
		if _, err := st.s.Reap(ctx, batchdriver.ReapParams{Runner: "bench", Reason: "bench"}); err != nil {
			b.Fatal(err)
		}
	})
}

// claimedJob creates a job of n targets and claims it (the seeded jobs
// are all finished, so it is the oldest queued job).
func claimedJob(b *testing.B, s *Store, id string, n int) string {
	b.Helper()
	ctx := context.Background()
	if _, _, err := s.Create(ctx, withLimits(newJob(id, id, n, time.Now()), benchLimits)); err != nil {
		b.Fatal(err)
	}
	c, ok, err := s.Claim(ctx, batchdriver.ClaimParams{Runner: "bench"})
	if err != nil || !ok || c.Job.ID != id {
		b.Fatalf("claim = %s, %v, %v; want %s", c.Job.ID, ok, err, id)
	}
	return id
}

// doneJob returns (building once per store) a finished job of 32 targets
// whose results are size bytes each.
func doneJob(b *testing.B, st *benchState, size int) string {
	b.Helper()
	key := fmt.Sprintf("done-%d", size)
	if id, ok := st.fixtures[key]; ok {
		return id
	}
	ctx := context.Background()
	id := fmt.Sprintf("%s-%d", key, time.Now().UnixNano())
	if _, _, err := st.s.Create(ctx, withLimits(newJob(id, id, 32, time.Now()), benchLimits)); err != nil {
		b.Fatal(err)
	}
	_, err := drainJob(ctx, st.s, "bench", id, func(idx int) batchdriver.TargetFinish {
		return batchdriver.TargetFinish{Idx: idx, Status: batchdriver.TargetDone, Outcome: batchdriver.OutcomeOK, Result: make([]byte, size)}
	})
	if err != nil {
		b.Fatal(err)
	}
	st.fixtures[key] = id
	return id
}

// BenchmarkStatus: an owner's status summary of a job of 32 done targets,
// with empty and with 200 KB results: the cost must not depend on them.
func BenchmarkStatus(b *testing.B) {
	for _, size := range []int{0, 200 << 10} {
		b.Run(fmt.Sprintf("result=%dKB", size>>10), func(b *testing.B) {
			forSizes(b, func(b *testing.B, st *benchState) {
				id := doneJob(b, st, size)
				for b.Loop() {
					if _, ts, err := st.s.Get(context.Background(), batchdriver.GetParams{Caller: id, JobID: id, Results: false}); err != nil || len(ts) != 32 {
						b.Fatal(len(ts), err)
					}
				}
			})
		})
	}
}

// BenchmarkStatusJobOnly: the job row alone, as a poll reads it to learn
// whether anything changed.
func BenchmarkStatusJobOnly(b *testing.B) {
	forSizes(b, func(b *testing.B, st *benchState) {
		id := doneJob(b, st, 0)
		b.ReportAllocs()
		for b.Loop() {
			if job, _, err := st.s.Get(context.Background(), batchdriver.GetParams{Caller: id, JobID: id, JobOnly: true}); err != nil || job.ID != id {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkResult: read one 10 KB result.
func BenchmarkResult(b *testing.B) {
	forSizes(b, func(b *testing.B, st *benchState) {
		id := doneJob(b, st, 10<<10)
		for i := 0; b.Loop(); i++ {
			if _, tr, err := st.s.GetTarget(context.Background(), batchdriver.GetTargetParams{Caller: id, JobID: id, Idx: i % 32}); err != nil || len(tr.Result) != 10<<10 {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSweep: a sweep pass that deletes the one expired job (with its
// targets and results, the incremental vacuum and the checkpoint). Each
// deleted job is replaced (untimed), so the size holds.
func BenchmarkSweep(b *testing.B) {
	forSizes(b, func(b *testing.B, st *benchState) {
		ctx := context.Background()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			st.replace(b)
			oldest := countRows(b, st.s, `SELECT min(lease) FROM batch_job WHERE `+whereFinished)
			b.StartTimer()
			n, err := st.s.Sweep(ctx, batchdriver.SweepParams{Now: nowAt(time.Unix(0, oldest+1))})
			if err != nil || n != 1 {
				b.Fatalf("Sweep = %d, %v; want 1", n, err)
			}
		}
	})
}

// BenchmarkSweepNoop: a sweep pass with nothing expired.
func BenchmarkSweepNoop(b *testing.B) {
	forSizes(b, func(b *testing.B, st *benchState) {
		for b.Loop() {
			if n, err := st.s.Sweep(context.Background(), batchdriver.SweepParams{Now: nowAt(benchT0)}); err != nil || n != 0 {
				b.Fatalf("Sweep = %d, %v; want 0", n, err)
			}
		}
	})
}

// BenchmarkEvict: an eviction pass over budget by one job's bytes, which
// evicts the job with the oldest lease. Each evicted job is replaced
// (untimed).
func BenchmarkEvict(b *testing.B) {
	forSizes(b, func(b *testing.B, st *benchState) {
		ctx := context.Background()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			st.replace(b)
			stats, err := st.s.Stats(ctx)
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if n, err := st.s.Evict(ctx, batchdriver.EvictParams{MaxBytes: stats.Bytes - 1}); err != nil || n != 1 {
				b.Fatalf("Evict = %d, %v; want 1", n, err)
			}
		}
	})
}

// BenchmarkRawUpdate is the baseline for BenchmarkFinishTarget: raw
// zombiezen on the same file and connection settings, one immediate
// transaction updating one row with a new 10 KB blob.
func BenchmarkRawUpdate(b *testing.B) {
	forSizes(b, func(b *testing.B, st *benchState) {
		ctx := context.Background()
		body := make([]byte, 10<<10)
		conn, err := st.s.pool.Take(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer st.s.pool.Put(conn)
		err = sqlitex.ExecuteScript(conn, `CREATE TABLE IF NOT EXISTS bench_raw (id INTEGER PRIMARY KEY, body BLOB);
			INSERT OR IGNORE INTO bench_raw VALUES (1, NULL);`, nil)
		if err != nil {
			b.Fatal(err)
		}
		update := func() (err error) {
			end, err := sqlitex.ImmediateTransaction(conn)
			if err != nil {
				return err
			}
			defer end(&err)
			return sqlitex.Execute(conn, `UPDATE bench_raw SET body = ? WHERE id = 1`,
				&sqlitex.ExecOptions{Args: []any{body}})
		}
		for i := uint64(0); b.Loop(); i++ {
			// New bytes on every page every time: SQLite writes only the
			// pages whose bytes changed, so rewriting the same blob would
			// commit next to nothing.
			for off := 0; off+8 <= len(body); off += 512 {
				binary.LittleEndian.PutUint64(body[off:], i)
			}
			if err := update(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
