package batchstore

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
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

// The drain costs one commit per target, counted in the WAL: a job of 32
// targets is its claim plus 32 writes. The test also bounds the pages those
// commits write and logs which b-trees they fall in, so that a change that
// puts a page back on the hot path shows here (run with -v to see them).
func TestStore_OneCommitPerTarget(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "wal.db")
	s, err := Open(ctx, path, Config{}) // FULL: SQLite's own checkpoints only
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	body := []byte(`{"content":"` + strings.Repeat("x", 10<<10-14) + `"}`)
	drain := func(id string) {
		t.Helper()
		if _, _, err := s.Create(ctx, newJob(id, "c", 32, time.Now())); err != nil {
			t.Fatal(err)
		}
		_, err := drainJob(ctx, s, "r", id, func(idx int) batchdriver.TargetFinish {
			return batchdriver.TargetFinish{Idx: idx, Status: batchdriver.TargetDone, Outcome: batchdriver.OutcomeOK, Result: body}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 { // warm: the b-trees have interior pages, as in a store in use
		drain(fmt.Sprint("warm-", i))
	}
	err = s.write(ctx, "no checkpoints", func(conn *sqlite.Conn) error { return setAutoCheckpoint(conn, 0) })
	if err == nil {
		err = s.read(ctx, "checkpoint", func(conn *sqlite.Conn) error {
			return sqlitex.ExecuteTransient(conn, "PRAGMA wal_checkpoint(TRUNCATE)", nil)
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Create(ctx, newJob("measured", "c", 32, time.Now())); err != nil {
		t.Fatal(err)
	}
	before := walFrames(t, path)
	if _, err := drainJob(ctx, s, "r", "measured", func(idx int) batchdriver.TargetFinish {
		return batchdriver.TargetFinish{Idx: idx, Status: batchdriver.TargetDone, Outcome: batchdriver.OutcomeOK, Result: body}
	}); err != nil {
		t.Fatal(err)
	}
	frames := walFrames(t, path)[len(before):]
	commits := 0
	pages := map[string]int{}
	owners := pageOwners(t, s)
	for _, f := range frames {
		if f.commit {
			commits++
		}
		pages[cmp.Or(owners[f.page], "page 1, pointer map or free list")]++
	}
	for _, name := range slices.Sorted(maps.Keys(pages)) {
		t.Logf("%-40s %5.2f pages per target", name, float64(pages[name])/32)
	}
	perTarget := float64(len(frames)) / 32
	t.Logf("%d commits, %d pages: %.2f pages per target", commits, len(frames), perTarget)
	if commits != 33 {
		t.Errorf("draining 32 targets took %d commits, want 33 (the claim and one per target)", commits)
	}
	if perTarget > 8 {
		t.Errorf("%.2f WAL pages per target, want at most 8", perTarget)
	}
}

type walFrame struct {
	page   uint32
	commit bool
}

// walFrames returns the valid frames of path's WAL in order: those after
// the header whose salts match it (older frames past them belong to an
// earlier generation of the file). A commit frame records the database
// size.
func walFrames(tb testing.TB, path string) []walFrame {
	tb.Helper()
	wal, err := os.ReadFile(path + "-wal")
	if err != nil {
		tb.Fatal(err)
	}
	if len(wal) < 32 {
		return nil
	}
	pageSize := int(binary.BigEndian.Uint32(wal[8:12]))
	var out []walFrame
	for off := 32; off+24+pageSize <= len(wal); off += 24 + pageSize {
		h := wal[off : off+24]
		if string(h[8:16]) != string(wal[16:24]) { // salts: a frame of this WAL generation
			break
		}
		out = append(out, walFrame{binary.BigEndian.Uint32(h[0:4]), binary.BigEndian.Uint32(h[4:8]) != 0})
	}
	return out
}

// pageOwners maps each page to the b-tree it belongs to, from dbstat.
func pageOwners(t *testing.T, s *Store) map[uint32]string {
	t.Helper()
	owners := map[uint32]string{}
	err := s.read(context.Background(), "dbstat", func(conn *sqlite.Conn) error {
		return sqlitex.ExecuteTransient(conn, "SELECT name, pageno, pagetype FROM dbstat", &sqlitex.ExecOptions{
			ResultFunc: func(stmt *sqlite.Stmt) error {
				owners[uint32(stmt.ColumnInt64(1))] = stmt.ColumnText(0) + " " + stmt.ColumnText(2)
				return nil
			},
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	delete(owners, 1) // page 1 is the schema's root, but what a commit writes there is the file header
	return owners
}
