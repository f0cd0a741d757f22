package batchstore

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// fileSum hashes a file, or returns "absent". Call it only while no
// connection of this process has the file open: closing any descriptor of
// a database file drops the process's POSIX locks on it.
func fileSum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "absent"
	}
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))
}

// sums hashes the database and its WAL and shared-memory files.
func sums(t *testing.T, path string) [3]string {
	return [3]string{fileSum(t, path), fileSum(t, path+"-wal"), fileSum(t, path+"-shm")}
}

// wantOpenError opens path (times times, at least 3) and checks that each
// attempt fails with want and leaves the files as they were, and that the
// error comes within a second: the median attempt must take less, and none
// more than 5s (a loaded 2-core CI machine can stall any single call).
func wantOpenError(t *testing.T, path, uri string, want error, times int) {
	t.Helper()
	before := sums(t, path)
	var took []time.Duration
	for i := range max(times, 3) {
		start := time.Now()
		s, err := Open(t.Context(), uri, Config{})
		d := time.Since(start)
		took = append(took, d)
		if err == nil {
			s.Close()
			t.Fatalf("attempt %d: Open succeeded, want %v", i, want)
		}
		if !errors.Is(err, want) {
			t.Fatalf("attempt %d: Open = %v, want %v", i, err, want)
		}
		if !strings.HasPrefix(err.Error(), "batchstore: ") {
			t.Errorf("error %q lacks the batchstore: prefix", err)
		}
		if after := sums(t, path); after != before {
			t.Fatalf("attempt %d: the files changed: %v → %v", i, before, after)
		}
		if i == 0 {
			t.Logf("%v", err)
		}
	}
	slices.Sort(took)
	if took[len(took)/2] > time.Second || took[len(took)-1] > 5*time.Second {
		t.Errorf("Open took %v to fail; want a median under 1s", took)
	}
	t.Logf("%d attempts, each failed in %v", len(took), took)
}

// populated creates a closed store file with some jobs and results, and
// returns its path and the root page of batch_target.
func populated(t *testing.T) (path string, targetRoot int64) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "batch.db")
	s, err := Open(t.Context(), path, Config{Synchronous: SyncNormal}) // a fixture: speed over durability
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for i := range 40 {
		id := fmt.Sprintf("job-%d", i)
		if _, _, err := s.Create(ctx, withLimits(newJob(id, "alice", 8, time.Now()), testLimits)); err != nil {
			t.Fatal(err)
		}
		_, err := drainJob(ctx, s, "r", id, func(idx int) batchdriver.TargetFinish {
			return batchdriver.TargetFinish{Idx: idx, Status: batchdriver.TargetFailed, Outcome: batchdriver.OutcomeOther,
				Error: strings.Repeat("e", 300)}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	targetRoot = countRows(t, s, `SELECT rootpage FROM sqlite_schema WHERE name = 'batch_target'`)
	if n := countRows(t, s, `PRAGMA page_count`); n < targetRoot+5 {
		t.Fatalf("only %d pages", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path, targetRoot
}

func TestOpen_Garbage(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "junk.db")
	junk := make([]byte, 64<<10)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range junk {
		junk[i] = byte(rng.Uint32())
	}
	if err := os.WriteFile(path, junk, 0o600); err != nil {
		t.Fatal(err)
	}
	wantOpenError(t, path, path, ErrCorrupt, 3)

	text := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(text, []byte("these are not the bytes you are looking for\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantOpenError(t, text, text, ErrCorrupt, 1)
}

// A page of garbage behind a valid header opens and passes simple queries;
// only the integrity check finds it.
func TestOpen_DamagedPage(t *testing.T) {
	t.Parallel()
	path, root := populated(t)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	garbage := make([]byte, 4096)
	for i := range garbage {
		garbage[i] = byte(i*7 + 3)
	}
	if _, err := f.WriteAt(garbage, (root-1)*4096); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	wantOpenError(t, path, path, ErrCorrupt, 10)
}

func TestOpen_ReadOnly(t *testing.T) {
	t.Parallel()
	path, _ := populated(t)
	wantOpenError(t, path, "file:"+path+"?mode=ro", ErrReadOnly, 3)

	// A host pool opened read-only.
	pool, err := sqlitex.NewPool(path, sqlitex.PoolOptions{Flags: sqlite.OpenReadOnly, PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(t.Context(), pool, Config{})
	pool.Close()
	if !errors.Is(err, ErrReadOnly) {
		t.Errorf("New on a read-only pool = %v, want ErrReadOnly", err)
	}

	// A file without write permission (root writes anyway).
	if os.Geteuid() != 0 {
		if err := os.Chmod(path, 0o440); err != nil {
			t.Fatal(err)
		}
		wantOpenError(t, path, path, ErrReadOnly, 1)
	}
}

// A second store on the same file is refused at once, from another process
// and from this one, and the file is left alone; once the first store
// closes, the file opens again.
func TestOpen_SecondProcess(t *testing.T) {
	t.Parallel()
	path, _ := populated(t)
	holder := startChild(t, "hold", path, SyncFull)
	waitLine(t, holder.lines, "ready", 30*time.Second)

	wantOpenError(t, path, path, ErrLocked, 3)
	_, err := Open(t.Context(), path, Config{})
	if want := fmt.Sprintf("by pid %d", holder.cmd.Process.Pid); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Open = %v, want it to name the holder (%s)", err, want)
	}

	holder.stdin.Close() // the holder closes its store and exits
	for range holder.lines {
	}
	if err := holder.cmd.Wait(); err != nil {
		t.Fatalf("holder: %v", err)
	}
	s, err := Open(t.Context(), path, Config{})
	if err != nil {
		t.Fatalf("Open after the holder exited: %v", err)
	}
	defer s.Close()
	if _, err := Open(t.Context(), path, Config{}); !errors.Is(err, ErrLocked) {
		t.Errorf("second Open in one process = %v, want ErrLocked", err)
	}
}

func TestOpen_NewerSchema(t *testing.T) {
	t.Parallel()
	path, _ := populated(t)
	pool, err := sqlitex.NewPool(path, sqlitex.PoolOptions{PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Take(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	err = sqlitex.ExecuteTransient(conn, `INSERT INTO batch_migration VALUES (99, '099_future', 0)`, nil)
	pool.Put(conn)
	pool.Close()
	if err != nil {
		t.Fatal(err)
	}
	wantOpenError(t, path, path, ErrSchema, 1)
}

func TestOpen_MissingDirectory(t *testing.T) {
	t.Parallel()
	_, err := Open(t.Context(), filepath.Join(t.TempDir(), "no", "such", "dir", "batch.db"), Config{})
	if err == nil || !strings.HasPrefix(err.Error(), "batchstore: open ") {
		t.Fatalf("Open in a missing directory = %v, want a batchstore: open error", err)
	}
}
