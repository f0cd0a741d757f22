package batchstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchdriver/batchdrivertest"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// openTest opens a store on a new file under t.TempDir and closes it when
// the test ends, after checking that its counters match its rows.
func openTest(t testing.TB, opts Config) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "batch.db"), opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.checkCounters(context.Background()); err != nil {
			t.Errorf("after the test: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// checkCounters re-derives the maintained counters from the rows and
// reports any difference: the byte counter of finished jobs from their
// bytes, the store total from the stored results and errors, the live
// counts from the statuses, each caller's byte counter from its finished
// jobs; and every result body belongs to one target.
func (s *Store) checkCounters(ctx context.Context) error {
	return s.read(ctx, "check counters", func(conn *sqlite.Conn) error {
		var got, want [6]int64
		total, err := totalBytes(conn)
		if err != nil {
			return err
		}
		err = sqlitex.Execute(conn, `SELECT bytes, queued, running, 0, 0, 0 FROM batch_stat`,
			&sqlitex.ExecOptions{ResultFunc: func(stmt *sqlite.Stmt) error {
				for i := range got {
					got[i] = stmt.ColumnInt64(i)
				}
				return nil
			}})
		if err != nil {
			return err
		}
		got[3] = total
		if got[4], err = countInt(conn, `SELECT count(*) FROM batch_body`); err != nil {
			return err
		}
		err = sqlitex.Execute(conn, `SELECT
			(SELECT coalesce(sum(bytes), 0) FROM batch_job WHERE `+whereFinished+`),
			(SELECT count(*) FROM batch_job WHERE status = 'queued'),
			(SELECT count(*) FROM batch_job WHERE status = 'running'),
			(SELECT coalesce(sum(length(error)), 0) FROM batch_target)
			  + (SELECT coalesce(sum(length(body)), 0) FROM batch_body),
			(SELECT count(DISTINCT result_id) FROM batch_target),
			(SELECT count(*) FROM batch_target t WHERE t.result_id IS NOT NULL
			   AND NOT EXISTS (SELECT 1 FROM batch_body b WHERE b.id = t.result_id))`,
			&sqlitex.ExecOptions{ResultFunc: func(stmt *sqlite.Stmt) error {
				for i := range want {
					want[i] = stmt.ColumnInt64(i)
				}
				return nil
			}})
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("counters (finished bytes, queued, running, total bytes, bodies, dangling) = %v, rows say %v", got, want)
		}
		// Each caller's counter against its finished jobs' bytes, both ways.
		const derived = `SELECT caller, sum(bytes) FROM batch_job WHERE ` + whereFinished + `
			GROUP BY caller HAVING sum(bytes) <> 0`
		wrong, err := countInt(conn, `SELECT (SELECT count(*) FROM (SELECT caller, bytes FROM batch_caller EXCEPT `+derived+`))
			+ (SELECT count(*) FROM (`+derived+` EXCEPT SELECT caller, bytes FROM batch_caller))`)
		if err != nil {
			return err
		}
		if wrong != 0 {
			return fmt.Errorf("%d callers' byte counters differ from their rows", wrong)
		}
		return nil
	})
}

func TestStore_Conformance(t *testing.T) {
	t.Parallel()
	batchdrivertest.TestStore(t, func(t *testing.T) batchdriver.Store { return openTest(t, Config{}) })
}

func TestStore_Reopen(t *testing.T) {
	t.Parallel()
	batchdrivertest.TestStoreReopen(t, func(t *testing.T) (batchdriver.Store, func() batchdriver.Store) {
		path := filepath.Join(t.TempDir(), "batch.db")
		open := func() *Store {
			s, err := Open(t.Context(), path, Config{})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			return s
		}
		s := open()
		t.Cleanup(func() { s.Close() })
		return s, func() batchdriver.Store {
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			s = open()
			return s
		}
	})
}

// The WAL-reset corruption bug (sqlite.org/wal.html#walresetbug) is fixed
// in 3.51.3; a pool of connections on one file is exactly its trigger.
func TestStore_SQLiteVersion(t *testing.T) {
	t.Parallel()
	s := openTest(t, Config{})
	var v string
	err := s.read(t.Context(), "version", func(conn *sqlite.Conn) (err error) {
		v, err = queryText(conn, "SELECT sqlite_version()")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !versionAtLeast(v, 3, 51, 3) {
		t.Fatalf("sqlite_version() = %s, want >= 3.51.3 (require modernc.org/sqlite >= v1.46.2)", v)
	}
}

func versionAtLeast(v string, want ...int) bool {
	parts := strings.Split(v, ".")
	for i, w := range want {
		var n int
		if i < len(parts) {
			fmt.Sscan(parts[i], &n)
		}
		if n != w {
			return n > w
		}
	}
	return true
}

// Every pooled connection, not just the first, carries the settings.
func TestStore_PragmasOnEveryConnection(t *testing.T) {
	t.Parallel()
	f := func(opts Config, wantSync int64) {
		t.Helper()
		s := openTest(t, opts)
		readers, release := holdReaders(t, s)
		defer release()
		for i, conn := range append(readers, s.wconn) {
			got := map[string]any{}
			for _, p := range []string{"journal_mode", "synchronous", "foreign_keys", "journal_size_limit", "auto_vacuum"} {
				v, err := queryText(conn, "PRAGMA "+p)
				if err != nil {
					t.Fatal(err)
				}
				got[p] = v
			}
			want := map[string]any{
				"journal_mode": "wal", "synchronous": fmt.Sprint(wantSync), "foreign_keys": "1",
				"journal_size_limit": fmt.Sprint(journalSizeLimit), "auto_vacuum": "2",
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("conn %d: %v, want %v", i, got, want)
			}
		}
	}
	f(Config{PoolSize: 3}, 2)
	f(Config{}, 2) // with the quick readers
	f(Config{PoolSize: 3, Synchronous: SyncNormal}, 1)
	f(Config{PoolSize: 2, Synchronous: "normal"}, 1)
}

func TestOpen_Options(t *testing.T) {
	t.Parallel()
	for _, opts := range []Config{{Synchronous: "OFF"}, {PoolSize: -1}, {PoolSize: 1}, {Timeout: -time.Second}} {
		_, err := Open(t.Context(), filepath.Join(t.TempDir(), "x.db"), opts)
		if err == nil || !strings.HasPrefix(err.Error(), "batchstore: invalid options") {
			t.Errorf("Open(%+v) = %v, want an invalid options error", opts, err)
		}
	}
}

// hostPool returns a pool as a host would own it, on a file that already
// holds a host table and the host's user_version.
func hostPool(t *testing.T) *sqlitex.Pool {
	t.Helper()
	pool, err := sqlitex.NewPool(filepath.Join(t.TempDir(), "host.db"), sqlitex.PoolOptions{PoolSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	conn, err := pool.Take(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Put(conn)
	for _, q := range []string{"CREATE TABLE host_cache (k TEXT PRIMARY KEY, v BLOB)", "PRAGMA user_version = 42"} {
		if err := sqlitex.ExecuteTransient(conn, q, nil); err != nil {
			t.Fatal(err)
		}
	}
	return pool
}

func TestNew_Conformance(t *testing.T) {
	t.Parallel()
	batchdrivertest.TestStore(t, func(t *testing.T) batchdriver.Store {
		s, err := New(t.Context(), hostPool(t), Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// The store applies its settings to the host's connections, keeps off the
// host's user_version, and leaves the pool open on Close.
func TestNew_HostPool(t *testing.T) {
	t.Parallel()
	pool := hostPool(t)
	s, err := New(t.Context(), pool, Config{Synchronous: SyncNormal})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(t.Context(), pool, Config{}); !errors.Is(err, ErrLocked) {
		t.Errorf("second New on the same file = %v, want ErrLocked", err)
	}
	conns := []*sqlite.Conn{}
	for range 2 { // every connection of the host's pool but the writer, as the store takes them
		conn, err := s.take(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
	}
	for i, conn := range append(conns, s.wconn) {
		for _, p := range []string{"synchronous", "foreign_keys"} {
			if v, _ := queryInt(conn, "PRAGMA "+p); v != 1 {
				t.Errorf("conn %d: %s = %d, want 1", i, p, v)
			}
		}
	}
	for _, conn := range conns {
		pool.Put(conn)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Claim(t.Context(), batchdriver.ClaimParams{Runner: "r"}); !errors.Is(err, ErrClosed) || !errors.Is(err, batchdriver.ErrUnavailable) {
		t.Errorf("Claim after Close = %v, want ErrClosed and batch.ErrUnavailable", err)
	}
	conn, err := pool.Take(t.Context())
	if err != nil {
		t.Fatalf("host pool after store Close: %v", err)
	}
	defer pool.Put(conn)
	if v, _ := queryInt(conn, "PRAGMA user_version"); v != 42 {
		t.Errorf("user_version = %d, want the host's 42", v)
	}
	migs, err := schemaMigrations()
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := queryInt(conn, "SELECT max(version) FROM batch_migration"); v != int64(migs[len(migs)-1].Version) {
		t.Errorf("batch_migration version = %d, want %d", v, migs[len(migs)-1].Version)
	}
	if v, _ := queryInt(conn, "PRAGMA auto_vacuum"); v != 0 {
		t.Errorf("auto_vacuum of the host's file = %d, want its own 0 (left alone)", v)
	}
}

// Reopening runs no migration twice and keeps the data.
func TestOpen_Reopen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "batch.db")
	ctx := t.Context()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range 3 {
		s, err := Open(ctx, path, Config{})
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		_, _, err = s.Create(ctx, withLimits(newJob(fmt.Sprintf("job-%d", i), "alice", 2, now), testLimits))
		if err != nil {
			t.Fatal(err)
		}
		jobs, err := s.List(ctx, batchdriver.ListParams{Caller: "alice", Limit: 10})
		if err != nil || len(jobs) != i+1 {
			t.Fatalf("open %d: List = %d jobs, %v; want %d", i, len(jobs), err, i+1)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	}
}

// testLimits never cap anything.
var testLimits = batchdriver.Limits{JobsPerCaller: 1 << 30, JobsTotal: 1 << 30, TTL: 24 * time.Hour}

// newJob returns a job of n targets under testLimits; the id doubles as
// the list prefix, so two jobs of one caller differ in their idempotency
// key.
func newJob(id, caller string, n int, now time.Time) batchdriver.CreateParams {
	ts := batchtest.Targets(id, n)
	return batchdriver.CreateParams{
		ID: id, Caller: batchdriver.Caller{Name: caller}, IdemKey: batchdrivertest.IdemKey(caller, ts),
		Targets: ts, Limits: testLimits, Now: nowAt(now),
	}
}

// withLimits returns p with other limits.
func withLimits(p batchdriver.CreateParams, lim batchdriver.Limits) batchdriver.CreateParams {
	p.Limits = lim
	return p
}

// errNoJob: drainJob found no queued job.
var errNoJob = errors.New("no job queued")

// drainJob claims the oldest queued job for runner, checks that it is id
// (unless id is empty), and stores fin(idx) for each of its targets, one
// write each, until the job is released. It returns the final status.
func drainJob(ctx context.Context, s *Store, runner, id string, fin func(idx int) batchdriver.TargetFinish) (batchdriver.JobStatus, error) {
	c, ok, err := s.Claim(ctx, batchdriver.ClaimParams{Runner: runner})
	switch {
	case err != nil:
		return "", err
	case !ok:
		return "", errNoJob
	case id != "" && c.Job.ID != id:
		return "", fmt.Errorf("claimed %s, want %s", c.Job.ID, id)
	}
	for next := c.Next; ; {
		st, err := s.FinishTarget(ctx, batchdriver.FinishParams{JobID: c.Job.ID, Runner: runner, Target: fin(next)})
		if err != nil {
			return "", err
		}
		if st.Next < 0 {
			return st.Status, nil
		}
		next = st.Next
	}
}

// The files a store creates are its owner's only: the database, its -wal and
// -shm, and the lock. An existing file keeps its mode.
func TestOpen_FilesArePrivate(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "private.db")
	s2, err := Open(t.Context(), path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, _, err := s2.Create(t.Context(), newJob("p", "alice", 1, time.Now())); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{path, path + "-wal", path + "-shm", path + ".lock"} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if mode := fi.Mode().Perm(); mode != 0o600 {
			t.Errorf("%s has mode %v, want 0600", filepath.Base(name), mode)
		}
	}
}

// An existing database file, or a -wal or -shm beside it, that other users
// may read holds every caller's results in the open: Open refuses it, as
// key files are refused, and touches nothing. Group access is the
// operator's choice and opens.
func TestOpen_WorldReadableRefused(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "open.db")
	s, err := Open(t.Context(), path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		mode os.FileMode
	}{{path, 0o644}, {path, 0o606}, {path + "-wal", 0o644}, {path + "-shm", 0o604}} {
		if err := os.WriteFile(c.name, nil, 0o600); err != nil && c.name != path {
			t.Fatal(err)
		}
		if err := os.Chmod(c.name, c.mode); err != nil {
			t.Fatal(err)
		}
		s, err := Open(t.Context(), path, Config{})
		if err == nil {
			s.Close()
			t.Errorf("Open with %s at %04o succeeded, want refused", filepath.Base(c.name), c.mode)
		} else if !strings.Contains(err.Error(), "too open") || !strings.Contains(err.Error(), "chmod") {
			t.Errorf("Open with %s at %04o = %v, want too open … chmod", filepath.Base(c.name), c.mode, err)
		}
		if fi, err := os.Stat(c.name); err != nil || fi.Mode().Perm() != c.mode {
			t.Errorf("%s changed: %v, %v", filepath.Base(c.name), fi, err)
		}
		if c.name == path {
			_ = os.Chmod(path, 0o600)
		} else {
			_ = os.Remove(c.name)
		}
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	s, err = Open(t.Context(), path, Config{})
	if err != nil {
		t.Fatalf("Open at 0640 = %v", err)
	}
	s.Close()
}
