package batchstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"zombiezen.com/go/sqlite"

	"github.com/siftfetch/batchkit/batch/batchdriver"
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
	s := openTest(t, Config{PoolSize: 2}) // every write on the writer, every read on the one reader
	var compiles atomic.Int64
	count := sqlite.AuthorizeFunc(func(a sqlite.Action) sqlite.AuthResult {
		if a.Type() != sqlite.OpPragma { // a pragma compiles on every run, by design
			compiles.Add(1)
		}
		return sqlite.AuthResultOK
	})
	reader, err := s.take(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	err = reader.SetAuthorizer(count)
	s.pool.Put(reader)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.wconn.SetAuthorizer(count); err != nil {
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
	lim := batchdriver.Limits{JobsPerCaller: 10, JobsTotal: 100, TTL: time.Hour}
	return []namedOp{
		{"Create", func(ctx context.Context, r int) error {
			_, _, err := s.Create(ctx, withLimits(newJob(id(r), "alice", 3, now), lim))
			return err
		}},
		{"Create (reuse)", func(ctx context.Context, r int) error {
			j := newJob(id(r), "alice", 3, now)
			j.ID += "-again"
			_, reused, err := s.Create(ctx, withLimits(j, lim))
			if err == nil && !reused {
				err = fmt.Errorf("not reused")
			}
			return err
		}},
		{"Claim", func(ctx context.Context, r int) error {
			c, ok, err := s.Claim(ctx, batchdriver.ClaimParams{Runner: "runner", Now: nowAt(now)})
			if err == nil && (!ok || c.Job.ID != id(r)) {
				err = fmt.Errorf("claimed %q (%v), want %s", c.Job.ID, ok, id(r))
			}
			return err
		}},
		{"FinishTarget", func(ctx context.Context, r int) error {
			return finishStep(ctx, s, id(r), batchdriver.TargetFinish{Idx: 0, Status: batchdriver.TargetDone, Result: []byte("{}")}, 1)
		}},
		{"FinishTarget (repeat)", func(ctx context.Context, r int) error {
			return finishStep(ctx, s, id(r), batchdriver.TargetFinish{Idx: 0, Status: batchdriver.TargetDone, Result: []byte("{}")}, 1)
		}},
		{"FinishTarget failed", func(ctx context.Context, r int) error {
			return finishStep(ctx, s, id(r), batchdriver.TargetFinish{Idx: 1, Status: batchdriver.TargetFailed, Error: "x"}, 2)
		}},
		{"Heartbeat", func(ctx context.Context, r int) error {
			return s.Heartbeat(ctx, batchdriver.HeartbeatParams{Runner: "runner", Now: nowAt(now.Add(time.Duration(r) * time.Second))})
		}},
		{"Get", func(ctx context.Context, r int) error {
			_, _, err := s.Get(ctx, batchdriver.GetParams{Caller: "alice", JobID: id(r), Results: false})
			return err
		}},
		{"Get with results", func(ctx context.Context, r int) error {
			_, _, err := s.Get(ctx, batchdriver.GetParams{Caller: "alice", JobID: id(r), Results: true})
			return err
		}},
		{"GetTarget", func(ctx context.Context, r int) error {
			_, _, err := s.GetTarget(ctx, batchdriver.GetTargetParams{Caller: "alice", JobID: id(r), Idx: 0})
			return err
		}},
		{"List", func(ctx context.Context, r int) error {
			_, err := s.List(ctx, batchdriver.ListParams{Caller: "alice", Limit: 5 + r})
			return err
		}},
		{"Touch", func(ctx context.Context, r int) error {
			return s.Touch(ctx, batchdriver.TouchParams{Caller: "alice", JobID: id(r), Now: nowAt(now.Add(time.Duration(r+2) * batchdriver.LeaseGrain))})
		}},
		{"Stats", func(ctx context.Context, r int) error { _, err := s.Stats(ctx); return err }},
		{"FinishTarget last", func(ctx context.Context, r int) error {
			return finishStep(ctx, s, id(r), batchdriver.TargetFinish{Idx: 2, Status: batchdriver.TargetDone, Result: []byte("{}")}, -1)
		}},
		{"Create 2", func(ctx context.Context, r int) error {
			_, _, err := s.Create(ctx, withLimits(newJob(id(r)+"-c", "alice", 2, now), lim))
			return err
		}},
		{"Cancel", func(ctx context.Context, r int) error {
			return s.Cancel(ctx, batchdriver.CancelParams{Caller: "alice", JobID: id(r) + "-c", Now: nowAt(now)})
		}},
		{"Create with a webhook", func(ctx context.Context, r int) error {
			j := newJob(id(r)+"-h", "alice", 1, now)
			j.WebhookURL = "https://hooks.example/" + id(r)
			_, _, err := s.Create(ctx, withLimits(j, lim))
			return err
		}},
		{"Cancel with a webhook", func(ctx context.Context, r int) error {
			return s.Cancel(ctx, batchdriver.CancelParams{Caller: "alice", JobID: id(r) + "-h", Now: nowAt(now)})
		}},
		{"ClaimWebhooks", func(ctx context.Context, r int) error {
			ds, err := s.ClaimWebhooks(ctx, batchdriver.ClaimWebhooksParams{Runner: "runner", Limit: 8, Lease: time.Minute, Now: nowAt(now)})
			if err == nil && (len(ds) != 1 || ds[0].JobID != id(r)+"-h") {
				err = fmt.Errorf("claimed %+v, want the event of %s-h", ds, id(r))
			}
			return err
		}},
		{"FinishWebhook retry", func(ctx context.Context, r int) error {
			return s.FinishWebhook(ctx, batchdriver.FinishWebhookParams{JobID: id(r) + "-h", Runner: "runner", Attempt: 1, Retry: true, Now: nowAt(now)})
		}},
		{"ClaimWebhooks again", func(ctx context.Context, r int) error {
			_, err := s.ClaimWebhooks(ctx, batchdriver.ClaimWebhooksParams{Runner: "runner", Limit: 1, Lease: time.Minute, Now: nowAt(now)})
			return err
		}},
		{"FinishWebhook", func(ctx context.Context, r int) error {
			return s.FinishWebhook(ctx, batchdriver.FinishWebhookParams{JobID: id(r) + "-h", Runner: "runner", Attempt: 2, Now: nowAt(now)})
		}},
		{"Create with per-target events", func(ctx context.Context, r int) error {
			j := newJob(id(r)+"-e", "alice", 2, now)
			j.WebhookURL, j.WebhookEvents = "https://hooks.example/"+id(r), batchdriver.HookTargets|batchdriver.HookFinished
			lim := lim
			lim.WebhooksPerCaller = 100
			_, _, err := s.Create(ctx, withLimits(j, lim))
			return err
		}},
		{"Claim (per-target events)", func(ctx context.Context, r int) error {
			c, ok, err := s.Claim(ctx, batchdriver.ClaimParams{Runner: "runner", Now: nowAt(now)})
			if err == nil && (!ok || c.Job.ID != id(r)+"-e") {
				err = fmt.Errorf("claimed %q (%v), want %s-e", c.Job.ID, ok, id(r))
			}
			return err
		}},
		{"FinishTarget (per-target events)", func(ctx context.Context, r int) error {
			return finishStep(ctx, s, id(r)+"-e", batchdriver.TargetFinish{Idx: 0, Status: batchdriver.TargetDone, Result: []byte("{}")}, 1)
		}},
		{"ClaimWebhooks (per-target event)", claimEvent(s, id, batchdriver.HookTargets, 0)},
		{"FinishWebhook (per-target event)", func(ctx context.Context, r int) error {
			return s.FinishWebhook(ctx, batchdriver.FinishWebhookParams{JobID: id(r) + "-e", Runner: "runner", Attempt: 1, Now: nowAt(now)})
		}},
		{"FinishTarget last (per-target events)", func(ctx context.Context, r int) error {
			return finishStep(ctx, s, id(r)+"-e", batchdriver.TargetFinish{Idx: 1, Status: batchdriver.TargetFailed, Error: "x"}, -1)
		}},
		{"ClaimWebhooks (last per-target event)", claimEvent(s, id, batchdriver.HookTargets, 1)},
		{"FinishWebhook (last per-target event)", func(ctx context.Context, r int) error {
			return s.FinishWebhook(ctx, batchdriver.FinishWebhookParams{JobID: id(r) + "-e", Runner: "runner", Attempt: 1, Cursor: 1, Now: nowAt(now)})
		}},
		{"ClaimWebhooks (completion after per-target events)", claimEvent(s, id, batchdriver.HookFinished, 2)},
		{"FinishWebhook (completion after per-target events)", func(ctx context.Context, r int) error {
			return s.FinishWebhook(ctx, batchdriver.FinishWebhookParams{JobID: id(r) + "-e", Runner: "runner", Attempt: 1, Cursor: 2, Now: nowAt(now)})
		}},
		{"Create 3", func(ctx context.Context, r int) error {
			_, _, err := s.Create(ctx, withLimits(newJob(id(r)+"-m", "alice", 2, now), lim))
			return err
		}},
		{"Reap stale", func(ctx context.Context, r int) error {
			_, err := s.Reap(ctx, batchdriver.ReapParams{StaleAfter: time.Hour, Reason: "restart", Now: nowAt(now)})
			return err
		}},
		{"Reap runner", func(ctx context.Context, r int) error {
			_, err := s.Reap(ctx, batchdriver.ReapParams{Runner: "nobody", Reason: "restart", Now: nowAt(now)})
			return err
		}},
		{"Reap all live", func(ctx context.Context, r int) error {
			_, err := s.Reap(ctx, batchdriver.ReapParams{AllLive: true, Reason: "restart", Now: nowAt(now)})
			return err
		}},
		{"Evict", func(ctx context.Context, r int) error {
			_, err := s.Evict(ctx, batchdriver.EvictParams{MaxBytes: 2})
			return err
		}},
		{"Sweep", func(ctx context.Context, r int) error {
			_, err := s.Sweep(ctx, batchdriver.SweepParams{Now: nowAt(now.Add(time.Duration(r+1) * time.Hour))})
			return err
		}},
	}
}

// claimEvent claims the one due event, which must be job <round>-e's of
// kind event at cursor.
// The drain's writes have no Now: the claim takes the store's clock too.
func claimEvent(s *Store, id func(int) string, event batchdriver.HookEvents, cursor int) func(context.Context, int) error {
	return func(ctx context.Context, r int) error {
		ds, err := s.ClaimWebhooks(ctx, batchdriver.ClaimWebhooksParams{Runner: "runner", Limit: 8, Lease: time.Minute})
		if err == nil && (len(ds) != 1 || ds[0].JobID != id(r)+"-e" || ds[0].Event != event || ds[0].Cursor != cursor) {
			err = fmt.Errorf("claimed %+v, want the event of %s-e at %d", ds, id(r), cursor)
		}
		return err
	}
}

// finishStep stores one target of a job held by "runner" and checks the
// next target the write started.
func finishStep(ctx context.Context, s *Store, id string, fin batchdriver.TargetFinish, wantNext int) error {
	st, err := s.FinishTarget(ctx, batchdriver.FinishParams{JobID: id, Runner: "runner", Target: fin})
	if err == nil && st.Next != wantNext {
		err = fmt.Errorf("step %+v, want next %d", st, wantNext)
	}
	return err
}
