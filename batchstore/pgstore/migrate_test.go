package pgstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchdriver/batchdrivertest"
)

// nodes starting at once migrate one fresh schema once, and all
// of them open. Without the advisory lock most of them fail (duplicate
// catalog rows); see the notes in the package documentation.
func TestMigrate_Concurrent(t *testing.T) {
	t.Parallel()
	const nodes = 8
	schema := newSchema(t)
	var wg sync.WaitGroup
	start := make(chan struct{})
	stores := make([]*Store, nodes)
	errs := make([]error, nodes)
	for i := range nodes {
		wg.Go(func() {
			<-start
			stores[i], errs[i] = Open(context.Background(), pgURL(t), Config{Schema: schema, MaxConns: 2})
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("node %d: Open: %v", i, err)
			continue
		}
		t.Cleanup(func() { stores[i].Close() })
	}
	if t.Failed() {
		t.FailNow()
	}
	migs, err := schemaMigrations()
	if err != nil {
		t.Fatal(err)
	}
	var rows, newest int
	err = stores[0].pool.QueryRow(t.Context(), `SELECT count(*), max(version) FROM `+
		pgx.Identifier{schema, "schema_migrations"}.Sanitize()).Scan(&rows, &newest)
	if last := migs[len(migs)-1].Version; err != nil || rows != len(migs) || newest != last {
		t.Fatalf("schema_migrations: %d rows, newest %d, %v; want %d, %d", rows, newest, err, len(migs), last)
	}
	for i, s := range stores {
		if _, err := s.Stats(t.Context()); err != nil {
			t.Errorf("node %d: Stats: %v", i, err)
		}
	}
}

// A schema newer than the build is refused, and left as it is.
func TestMigrate_NewerSchemaRefused(t *testing.T) {
	t.Parallel()
	s := openTest(t, Config{})
	if _, err := s.pool.Exec(t.Context(), `INSERT INTO `+pgx.Identifier{s.opts.Schema, "schema_migrations"}.Sanitize()+
		` (version, name) VALUES (999, '999_from_the_future')`); err != nil {
		t.Fatal(err)
	}
	_, err := Open(t.Context(), pgURL(t), Config{Schema: s.opts.Schema, MaxConns: 1})
	if !errors.Is(err, ErrSchema) || errors.Is(err, batchdriver.ErrUnavailable) {
		t.Fatalf("Open on a newer schema = %v, want ErrSchema (and not unavailable)", err)
	}
}

// The store moves into a schema a DBA made, next to the host's tables,
// and leaves them alone; reopening runs no migration twice.
func TestMigrate_ExistingSchema(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	admin := hostPool(t)
	ident := pgx.Identifier{schema}.Sanitize()
	for _, q := range []string{`CREATE SCHEMA ` + ident, `CREATE TABLE ` + ident + `.host_cache (k text PRIMARY KEY)`,
		`INSERT INTO ` + ident + `.host_cache VALUES ('kept')`} {
		if _, err := admin.Exec(t.Context(), q); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		s, err := New(t.Context(), admin, Config{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Stats(t.Context()); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	var k string
	if err := admin.QueryRow(t.Context(), `SELECT k FROM `+ident+`.host_cache`).Scan(&k); err != nil || k != "kept" {
		t.Fatalf("host table = %q, %v", k, err)
	}
}

// hostPool returns a pool as a host owns it, closed when the test ends
// (before its schemas are dropped, if newSchema ran first).
func hostPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = testMaxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// The store on a host's pool passes the suite too, and its Close leaves
// the pool open.
func TestNew_Conformance(t *testing.T) {
	t.Parallel()
	batchdrivertest.TestStore(t, func(t *testing.T) batchdriver.Store {
		schema := newSchema(t)
		s, err := New(t.Context(), hostPool(t), Config{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := s.checkCounters(context.Background()); err != nil {
				t.Error(err)
			}
			s.Close()
			if err := s.pool.Ping(context.Background()); err != nil {
				t.Errorf("the host's pool after the store's Close: %v", err)
			}
		})
		return s
	})
}

// A completion event pending in a schema of version 14 stays a completion
// event once 15 and 16 (per-target events) are applied: it is claimed and
// delivered as before, and the store then takes jobs with per-target
// events.
func TestMigrate_PendingEventsKeptBy16(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	admin := hostPool(t)
	ident := pgx.Identifier{schema}.Sanitize()
	migs, err := schemaMigrations()
	if err != nil {
		t.Fatal(err)
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := admin.Exec(t.Context(), q, args...); err != nil {
			t.Fatalf("%.80s: %v", q, err)
		}
	}
	exec(`CREATE SCHEMA ` + ident)
	exec(`CREATE TABLE ` + ident + `.schema_migrations (version integer PRIMARY KEY, name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`)
	for _, m := range migs {
		if m.Version > 14 {
			break
		}
		exec(strings.ReplaceAll(m.SQL, "{s}", ident))
		exec(`INSERT INTO `+ident+`.schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name)
	}
	// A job with a webhook, cancelled while queued: the trigger of 014
	// writes its event.
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	exec(`INSERT INTO `+ident+`.job (id, caller, idem_key, status, targets_total, created_at, lease, webhook)
		VALUES ('old', 'alice', 'k', 'queued', 1, $1, $1, 'https://hooks.example/old')`, now)
	exec(`UPDATE `+ident+`.job SET status = 'cancelled', finished_at = $1 WHERE id = 'old'`, now)

	s := openOn(t, Config{Schema: schema})
	ds, err := s.ClaimWebhooks(t.Context(), batchdriver.ClaimWebhooksParams{Runner: "r", Limit: 10, Lease: time.Minute, Now: &now})
	if err != nil || len(ds) != 1 {
		t.Fatalf("claim after the upgrade = %+v, %v; want the old job's event", ds, err)
	}
	if d := ds[0]; d.JobID != "old" || d.Event != batchdriver.HookFinished || d.Cursor != 0 || d.Status != batchdriver.JobCancelled || d.Caller != "alice" {
		t.Fatalf("the old event after the upgrade: %+v", d)
	}
	err = s.FinishWebhook(t.Context(), batchdriver.FinishWebhookParams{JobID: "old", Runner: "r", Attempt: 1, Now: &now})
	if err != nil {
		t.Fatalf("the old event's delivery: %v", err)
	}
	p := batchdriver.CreateParams{ID: "new", Caller: batchdriver.Caller{Name: "alice"}, IdemKey: "n",
		Targets: []batchdriver.Target{{URL: "https://example.test/a"}}, WebhookURL: "https://hooks.example/new",
		WebhookEvents: batchdriver.HookTargets | batchdriver.HookFinished,
		Limits:        batchdriver.Limits{JobsPerCaller: 1, JobsTotal: 1, TTL: time.Hour, WebhooksPerCaller: 1}, Now: &now}
	if j, _, err := s.Create(t.Context(), p); err != nil || j.WebhookEvents != p.WebhookEvents {
		t.Fatalf("a job with per-target events after the upgrade = %+v, %v", j, err)
	}
}
