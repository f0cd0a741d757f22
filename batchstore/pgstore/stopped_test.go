package pgstore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// A node that stops mid-transaction (a frozen process, a node cut off from
// the network) keeps its locks only for txIdleTimeout. Here one stops
// while it holds the byte counter's rows, as a sweep takes them, and
// another node's release, which moves the counter, still commits; when the
// stopped node wakes, its transaction is refused as unavailable, and the
// node serves again.
func TestStore_StoppedMidTransaction(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	stopped := openOn(t, Config{Schema: schema})
	other := openOn(t, Config{Schema: schema, Timeout: 4 * txIdleTimeout})
	ctx := t.Context()
	_, _, err := other.Create(ctx, batchdriver.CreateParams{ID: "held", Caller: batchdriver.Caller{Name: "c"}, IdemKey: "held",
		Targets: []batchdriver.Target{{URL: "https://example.test/held"}}, Limits: testLimits})
	if err != nil {
		t.Fatal(err)
	}
	c, ok, err := other.Claim(ctx, batchdriver.ClaimParams{Runner: "r"})
	if err != nil || !ok {
		t.Fatalf("Claim: %v, %v", ok, err)
	}

	wake := stopIn(t, stopped.inTx, func(tx pgx.Tx) error {
		_, err := stopped.lockCounter(ctx, tx)
		return err
	})
	fin := batchdriver.TargetFinish{Idx: 0, Status: batchdriver.TargetDone, Outcome: batchdriver.OutcomeOK, Result: []byte("page")}
	step, err := other.FinishTarget(ctx, batchdriver.FinishParams{JobID: c.Job.ID, Runner: "r", Target: fin})
	woken := wake()
	if err != nil {
		t.Fatalf("a release while another node is stopped holding the counter: %v", err)
	}
	if step.Status != batchdriver.JobDone {
		t.Errorf("job after its last target: %s, want done", step.Status)
	}
	if woken == nil {
		t.Fatal("the stopped node's transaction committed after it had kept the counter locked past txIdleTimeout")
	}
	if werr := stopped.wrap(ctx, "sweep", woken); !errors.Is(werr, batchdriver.ErrUnavailable) {
		t.Errorf("the stopped node's error on waking = %v, want one matching ErrUnavailable", werr)
	}
	if _, err := stopped.Sweep(ctx, batchdriver.SweepParams{TTL: time.Hour}); err != nil {
		t.Errorf("a sweep on the woken node: %v", err)
	}
}

// A node that stops while it holds the migration lock keeps it only for
// txIdleTimeout: another node opening the same schema then migrates it,
// and the stopped node's session is gone when it wakes.
func TestStore_StoppedWhileMigrating(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, pgURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	stopped := &Store{pool: pool, opts: Config{Schema: schema}, migrateKey: lockKey(schema, "migrate")}
	if err := stopped.lockMigrations(ctx, conn); err != nil {
		t.Fatalf("take the migration lock: %v", err)
	}
	// stopped: the server hears nothing from it meanwhile
	other := openOn(t, Config{Schema: schema, Timeout: 4 * txIdleTimeout})
	if _, _, err := other.Create(ctx, batchdriver.CreateParams{ID: "after", Caller: batchdriver.Caller{Name: "c"}, IdemKey: "after",
		Targets: []batchdriver.Target{{URL: "https://example.test/after"}}, Limits: testLimits}); err != nil {
		t.Fatalf("Create on the schema the other node migrated: %v", err)
	}
	_, err = conn.Exec(ctx, "SELECT 1")
	if err == nil {
		t.Fatal("the stopped node's session outlived its bound while it held the migration lock")
	}
	if werr := stopped.wrap(ctx, "migrate", err); !errors.Is(werr, batchdriver.ErrUnavailable) {
		t.Errorf("the stopped node's error on waking = %v, want one matching ErrUnavailable", werr)
	}
}

// The bounds that the migration lock puts on its session end with the
// lock: the connection that migrated goes back to the pool at the
// settings a RESET gives.
func TestStore_MigrationBoundsLifted(t *testing.T) {
	t.Parallel()
	s := openTest(t, Config{})
	ctx := t.Context()
	conns := s.pool.AcquireAllIdle(ctx)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	if len(conns) == 0 {
		t.Fatal("no idle connection in the store's pool")
	}
	for _, c := range conns {
		rows, err := c.Query(ctx, `SELECT name, setting, reset_val FROM pg_settings
			WHERE name IN ('idle_session_timeout', 'idle_in_transaction_session_timeout')`)
		if err != nil {
			t.Fatal(err)
		}
		type setting struct{ Name, Setting, ResetVal string }
		got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[setting])
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 {
			t.Fatalf("settings read: %v", got)
		}
		for _, g := range got {
			if g.Setting != g.ResetVal {
				t.Errorf("connection %d: %s = %s after Open, want %s", c.Conn().PgConn().PID(), g.Name, g.Setting, g.ResetVal)
			}
		}
	}
}

// A node that stops inside a read-only snapshot (an overview) keeps its
// tables' share locks only for txIdleTimeout, so a migration's DDL, and
// every call queued behind it, does not wait for it longer.
func TestStore_StoppedInSnapshot(t *testing.T) {
	t.Parallel()
	s := openTest(t, Config{})
	ctx := t.Context()
	job := pgx.Identifier{s.opts.Schema, "job"}.Sanitize()
	wake := stopIn(t, s.readTx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT count(*) FROM "+job)
		return err
	})
	conn, err := pgx.Connect(ctx, pgURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '20s'"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "LOCK TABLE "+job+" IN ACCESS EXCLUSIVE MODE")
		return err
	})
	woken := wake()
	if err != nil {
		t.Fatalf("DDL's lock while another node is stopped in a snapshot: %v", err)
	}
	if woken == nil {
		t.Fatal("the stopped node's snapshot outlived its bound")
	}
	if werr := s.wrap(ctx, "overview", woken); !errors.Is(werr, batchdriver.ErrUnavailable) {
		t.Errorf("the stopped node's error on waking = %v, want one matching ErrUnavailable", werr)
	}
	if _, err := s.Overview(ctx, batchdriver.OverviewParams{Recent: 5, Running: 5}); err != nil {
		t.Errorf("an overview on the woken node: %v", err)
	}
}

// stopIn runs first in a transaction that begin (inTx, readTx) starts,
// and then stops: the server hears nothing more from it until wake, which
// sends one more statement and returns the transaction's error. The test
// wakes it at its end if it has not.
func stopIn(t *testing.T, begin func(context.Context, func(pgx.Tx) error) error, first func(pgx.Tx) error) (wake func() error) {
	t.Helper()
	ctx := t.Context()
	stopped, resume := make(chan struct{}), make(chan struct{})
	woke := make(chan error, 1)
	go func() {
		woke <- begin(ctx, func(tx pgx.Tx) error {
			if err := first(tx); err != nil {
				return err
			}
			close(stopped)
			<-resume
			_, err := tx.Exec(ctx, "SELECT 1")
			return err
		})
	}()
	var once sync.Once
	var err error
	wake = func() error {
		once.Do(func() { close(resume); err = <-woke })
		return err
	}
	t.Cleanup(func() { wake() })
	select {
	case <-stopped:
	case err := <-woke:
		once.Do(func() {}) // it has returned: nothing to wake
		t.Fatalf("the transaction failed before it stopped: %v", err)
	}
	return wake
}
