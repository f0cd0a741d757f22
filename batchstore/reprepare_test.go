package batchstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"zombiezen.com/go/sqlite"
)

// The store's statements are prepared once per connection and then reused.
// SQLite silently re-prepares a cached statement whenever its bindings are
// cleared if the query planner looked at a bound value (a LIMIT ?, some
// joins); zombiezen clears the bindings on every reuse, so such a statement
// costs a full compile per call (measured: 25-50 µs instead of 1-4 µs). An
// authorizer runs only while a statement compiles, so counting its calls
// after a warm-up finds every statement that re-prepares. (The two pragmas
// of a sweep or eviction pass that deleted something compile every time;
// they run once per pass.)
func TestStore_StatementsNotReprepared(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{PoolSize: 1}) // every call on the one connection
	var compiles atomic.Int64
	conn, err := s.take(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	err = conn.SetAuthorizer(sqlite.AuthorizeFunc(func(a sqlite.Action) sqlite.AuthResult {
		if a.Type() != sqlite.OpPragma { // a pragma compiles on every run, by design
			compiles.Add(1)
		}
		return sqlite.AuthResultOK
	}))
	s.pool.Put(conn)
	if err != nil {
		t.Fatal(err)
	}
	ops := storeWorkload(s)
	for round := range 3 {
		for _, op := range ops {
			before := compiles.Load()
			if err := op.fn(t.Context(), round); err != nil {
				t.Fatalf("round %d: %s: %v", round, op.name, err)
			}
			if n := compiles.Load() - before; round > 0 && n > 0 {
				t.Errorf("round %d: %s compiled a statement again (%d authorizer calls)", round, op.name, n)
			}
		}
	}
}

type namedOp struct {
	name string
	fn   func(ctx context.Context, round int) error
}

// storeWorkload calls every method of the store; each round uses new ids.
func storeWorkload(s *Store) []namedOp {
	now := time.Now()
	id := func(round int) string { return fmt.Sprintf("w%d", round) }
	lim := batch.Limits{JobsPerCaller: 10, JobsTotal: 100, TTL: time.Hour}
	return []namedOp{
		{"Create", func(ctx context.Context, r int) error {
			_, _, err := s.Create(ctx, newJob(id(r), "alice", 3, now), lim)
			return err
		}},
		{"Create (reuse)", func(ctx context.Context, r int) error {
			j := newJob(id(r), "alice", 3, now)
			j.ID += "-again"
			_, reused, err := s.Create(ctx, j, lim)
			if err == nil && !reused {
				err = fmt.Errorf("not reused")
			}
			return err
		}},
		{"Claim", func(ctx context.Context, r int) error { _, _, err := s.Claim(ctx, "runner", now); return err }},
		{"StartTarget", func(ctx context.Context, r int) error { return s.StartTarget(ctx, id(r), 0, now) }},
		{"FinishTarget", func(ctx context.Context, r int) error {
			_, err := s.FinishTarget(ctx, id(r), batch.TargetFinish{Idx: 0, Status: batch.TargetDone, Result: []byte("{}")}, now)
			return err
		}},
		{"StartTarget 1", func(ctx context.Context, r int) error { return s.StartTarget(ctx, id(r), 1, now) }},
		{"FinishTarget failed", func(ctx context.Context, r int) error {
			_, err := s.FinishTarget(ctx, id(r), batch.TargetFinish{Idx: 1, Status: batch.TargetFailed, Error: "x"}, now)
			return err
		}},
		{"Get", func(ctx context.Context, r int) error { _, _, err := s.Get(ctx, "alice", id(r), false); return err }},
		{"Get with results", func(ctx context.Context, r int) error { _, _, err := s.Get(ctx, "alice", id(r), true); return err }},
		{"GetTarget", func(ctx context.Context, r int) error { _, _, err := s.GetTarget(ctx, "alice", id(r), 0); return err }},
		{"List", func(ctx context.Context, r int) error { _, err := s.List(ctx, "alice", 5+r); return err }},
		{"Touch", func(ctx context.Context, r int) error {
			return s.Touch(ctx, "alice", id(r), now.Add(time.Duration(r+2)*batch.LeaseGrain))
		}},
		{"Stats", func(ctx context.Context, r int) error { _, err := s.Stats(ctx); return err }},
		{"FinishJob", func(ctx context.Context, r int) error { _, err := s.FinishJob(ctx, id(r), now); return err }},
		{"Create 2", func(ctx context.Context, r int) error {
			_, _, err := s.Create(ctx, newJob(id(r)+"-c", "alice", 2, now), lim)
			return err
		}},
		{"Cancel", func(ctx context.Context, r int) error { return s.Cancel(ctx, "alice", id(r)+"-c", now) }},
		{"Create 3", func(ctx context.Context, r int) error {
			_, _, err := s.Create(ctx, newJob(id(r)+"-m", "alice", 2, now), lim)
			return err
		}},
		{"MarkInFlightFailed", func(ctx context.Context, r int) error {
			_, err := s.MarkInFlightFailed(ctx, "runner", "restart", now, now)
			return err
		}},
		{"Evict", func(ctx context.Context, r int) error { _, err := s.Evict(ctx, 2); return err }},
		{"Sweep", func(ctx context.Context, r int) error {
			_, err := s.Sweep(ctx, now.Add(time.Duration(r+1)*time.Hour))
			return err
		}},
	}
}
