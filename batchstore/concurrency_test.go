package batchstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// isLockError reports an error that means SQLite's lock wait gave up.
func isLockError(err error) bool {
	return sqlite.ErrCode(err).ToPrimary() == sqlite.ResultBusy ||
		sqlite.ErrCode(err).ToPrimary() == sqlite.ResultLocked ||
		err != nil && strings.Contains(err.Error(), "database is locked")
}

// 16 goroutines × 200 mixed operations on one store: every write path runs
// in an immediate transaction, so no lock error ever surfaces.
func TestStore_ConcurrentMixed(t *testing.T) {
	t.Parallel()
	s := openTest(t, Config{})
	const goroutines, ops = 16, 200
	lim := batchdriver.Limits{JobsPerCaller: 4, JobsTotal: 24, TTL: time.Hour}
	expected := []error{batchdriver.ErrCallerBusy, batchdriver.ErrBusy, batchdriver.ErrNotFound, batchdriver.ErrFinished}
	var mu sync.Mutex
	counts := map[string]int{}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			caller := fmt.Sprintf("caller-%d", g)
			var mine, keys []string
			ctx := context.Background()
			now := func() time.Time { return time.Now() }
			for i := range ops {
				var op string
				var err error
				switch k := rng.IntN(10); {
				case k < 3:
					op = "submit"
					nj := newJob(fmt.Sprintf("%s-%d", caller, i), caller, 1+rng.IntN(4), now())
					if rng.IntN(4) == 0 && len(keys) > 0 { // resubmit an earlier list
						nj.IdemKey = keys[rng.IntN(len(keys))]
					}
					var j batchdriver.Job
					var reused bool
					j, reused, err = s.Create(ctx, withLimits(nj, lim))
					if err == nil && !reused {
						mine, keys = append(mine, j.ID), append(keys, nj.IdemKey)
					}
				case k < 6:
					op = "drain"
					err = drainOne(ctx, s, fmt.Sprintf("runner-%d", g), rng)
				case k < 8:
					op = "read"
					err = readSome(ctx, s, caller, mine, rng)
				case k < 9:
					op = "cancel"
					if len(mine) > 0 {
						err = s.Cancel(ctx, batchdriver.CancelParams{Caller: caller, JobID: mine[rng.IntN(len(mine))], Now: nowAt(now())})
					}
				default:
					op = "gc"
					if _, err = s.Evict(ctx, batchdriver.EvictParams{MaxBytes: 64 << 10}); err == nil {
						_, err = s.Sweep(ctx, batchdriver.SweepParams{TTL: time.Second, Now: nowAt(now())})
					}
				}
				mu.Lock()
				counts[op]++
				mu.Unlock()
				if err == nil || slicesContainsErr(expected, err) {
					continue
				}
				if isLockError(err) {
					t.Errorf("%s: lock error surfaced: %v", op, err)
				} else {
					t.Errorf("%s: %v", op, err)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("operations: %v", counts)
	st, err := s.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if live := st.Queued + st.Running; live > lim.JobsTotal {
		t.Errorf("%d live jobs, cap %d", live, lim.JobsTotal)
	}
}

func slicesContainsErr(list []error, err error) bool {
	for _, e := range list {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// drainOne claims a job and runs it to the end with 1 KiB results; a job
// cancelled meanwhile ends after the target in flight.
func drainOne(ctx context.Context, s *Store, runner string, rng *rand.Rand) error {
	_, err := drainJob(ctx, s, runner, "", func(idx int) batchdriver.TargetFinish {
		if rng.IntN(3) == 0 {
			return batchdriver.TargetFinish{Idx: idx, Status: batchdriver.TargetFailed, Outcome: batchdriver.OutcomeTimeout, Error: "timeout"}
		}
		return batchdriver.TargetFinish{Idx: idx, Status: batchdriver.TargetDone, Outcome: batchdriver.OutcomeOK, Result: make([]byte, 1024)}
	})
	if errors.Is(err, errNoJob) {
		return nil
	}
	return err
}

// readSome does one of the owner reads.
func readSome(ctx context.Context, s *Store, caller string, mine []string, rng *rand.Rand) error {
	if len(mine) == 0 {
		_, err := s.List(ctx, batchdriver.ListParams{Caller: caller, Limit: 10})
		return err
	}
	id := mine[rng.IntN(len(mine))]
	var err error
	switch rng.IntN(5) {
	case 0:
		_, _, err = s.Get(ctx, batchdriver.GetParams{Caller: caller, JobID: id, Results: false})
	case 1:
		_, _, err = s.Get(ctx, batchdriver.GetParams{Caller: caller, JobID: id, Results: true})
	case 2:
		_, _, err = s.GetTarget(ctx, batchdriver.GetTargetParams{Caller: caller, JobID: id, Idx: 0})
	case 3:
		err = s.Touch(ctx, batchdriver.TouchParams{Caller: caller, JobID: id, Now: nowAt(time.Now().Add(2 * batchdriver.LeaseGrain))})
	default:
		_, err = s.Stats(ctx)
	}
	return err
}

// Two identical submits racing, 500 times: exactly one job each time, and
// exactly one row for the key in the table.
func TestStore_ConcurrentIdenticalSubmit(t *testing.T) {
	t.Parallel()
	s := openTest(t, Config{})
	rounds := 500
	for round := range rounds {
		nj := newJob(fmt.Sprintf("r%d", round), "alice", 2, time.Now())
		var wg sync.WaitGroup
		start := make(chan struct{})
		var jobs [2]batchdriver.Job
		var reused [2]bool
		var errs [2]error
		for i := range 2 {
			wg.Go(func() {
				req := nj
				req.ID = fmt.Sprintf("%s-%d", nj.ID, i)
				<-start
				jobs[i], reused[i], errs[i] = s.Create(context.Background(), withLimits(req, testLimits))
			})
		}
		close(start)
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("round %d: %v, %v", round, errs[0], errs[1])
		}
		if jobs[0].ID != jobs[1].ID || reused[0] == reused[1] {
			t.Fatalf("round %d: jobs %s (reused %v) and %s (reused %v); want one job, reused once",
				round, jobs[0].ID, reused[0], jobs[1].ID, reused[1])
		}
		if n := countRows(t, s, `SELECT count(*) FROM batch_job WHERE idem_key = ?`, nj.IdemKey); n != 1 {
			t.Fatalf("round %d: %d rows for the key, want 1", round, n)
		}
	}
}

// 50 callers racing, 10 rounds: never more live jobs than the total cap;
// and one caller racing 50 different lists never beats its own cap.
func TestStore_ConcurrentCaps(t *testing.T) {
	t.Parallel()
	s := openTest(t, Config{})
	f := func(round int, perCaller, total int, caller func(i int) string, wantErr error, want int) {
		t.Helper()
		lim := batchdriver.Limits{JobsPerCaller: perCaller, JobsTotal: total, TTL: time.Hour}
		var wg sync.WaitGroup
		var mu sync.Mutex
		created := 0
		start := make(chan struct{})
		for i := range 50 {
			wg.Go(func() {
				nj := newJob(fmt.Sprintf("%d-%d-%d", round, perCaller, i), caller(i), 1, time.Now())
				<-start
				_, _, err := s.Create(context.Background(), withLimits(nj, lim))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					created++
				case !errors.Is(err, wantErr):
					t.Errorf("round %d, caller %d: %v", round, i, err)
				}
			})
		}
		close(start)
		wg.Wait()
		st, err := s.Stats(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if created != want || st.Queued != want {
			t.Fatalf("round %d: created %d, queued %d; want %d", round, created, st.Queued, want)
		}
		// Finish them all for the next round.
		if _, err := s.Reap(t.Context(), batchdriver.ReapParams{AllLive: true, Reason: "restart"}); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 10 {
		f(round, 1, 8, func(i int) string { return fmt.Sprintf("c%d", i) }, batchdriver.ErrBusy, 8)
		f(round, 3, 8, func(int) string { return "alice" }, batchdriver.ErrCallerBusy, 3)
	}
}

func countRows(t testing.TB, s *Store, q string, args ...any) int64 {
	t.Helper()
	var n int64
	err := s.read(context.Background(), "count", func(conn *sqlite.Conn) (err error) {
		n, err = countInt(conn, q, args...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A writer that holds the lock cannot hang a call: the wait ends at the
// caller's deadline, as the context's error, well within the deadline plus
// a margin; and the store is fine afterwards.
func TestStore_LockWaitBounded(t *testing.T) {
	t.Parallel()
	s := openTest(t, Config{})
	conn, err := s.take(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlitex.ExecuteTransient(conn, "BEGIN IMMEDIATE", nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err = s.Create(ctx, withLimits(newJob("blocked", "alice", 1, time.Now()), testLimits))
	// A generous margin: a loaded 2-core machine can stall any call; a
	// wait that ignored the deadline would last until the lock is released.
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Create waited %s behind a held lock, want about 300ms", d)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, batchdriver.ErrUnavailable) {
		t.Errorf("Create behind a held lock = %v, want context.DeadlineExceeded and batch.ErrUnavailable", err)
	}
	if err := sqlitex.ExecuteTransient(conn, "ROLLBACK", nil); err != nil {
		t.Fatal(err)
	}
	s.pool.Put(conn)
	if _, _, err := s.Create(t.Context(), withLimits(newJob("after", "alice", 1, time.Now()), testLimits)); err != nil {
		t.Fatalf("Create after the lock is released: %v", err)
	}
}

// Polling touches coalesce: within batch.LeaseGrain they commit nothing.
func TestStore_TouchCoalesces(t *testing.T) {
	t.Parallel()
	s := openTest(t, Config{PoolSize: 3}) // the writer, the watch and a reader
	ctx := t.Context()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if _, _, err := s.Create(ctx, withLimits(newJob("job", "alice", 1, now), testLimits)); err != nil {
		t.Fatal(err)
	}
	// Hold one connection: PRAGMA data_version on it changes whenever
	// another connection commits.
	watch, err := s.take(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.pool.Put(watch)
	version := func() int64 {
		v, err := queryInt(watch, "PRAGMA data_version")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := version()
	for i := range 100 { // a poll every 0.5s for 50s
		if err := s.Touch(ctx, batchdriver.TouchParams{Caller: "alice", JobID: "job", Now: nowAt(now.Add(time.Duration(i) * 500 * time.Millisecond))}); err != nil {
			t.Fatal(err)
		}
	}
	if after := version(); after != before {
		t.Errorf("100 touches within the grain committed (data_version %d → %d), want no write", before, after)
	}
	if err := s.Touch(ctx, batchdriver.TouchParams{Caller: "alice", JobID: "job", Now: nowAt(now.Add(batchdriver.LeaseGrain))}); err != nil {
		t.Fatal(err)
	}
	if after := version(); after == before {
		t.Error("a touch a full grain later did not write")
	}
}
