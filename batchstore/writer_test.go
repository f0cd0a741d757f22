package batchstore

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"
)

// Writes that arrive while one runs share its commit, each in a savepoint:
// a failing write undoes only its own changes, and a write whose context
// ended while it waited does not run.
func TestStore_WritesShareACommit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "group.db")
	s, err := Open(ctx, path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	insert := func(v string) func(*sqlite.Conn) error {
		return func(conn *sqlite.Conn) error {
			return sqlitex.Execute(conn, `INSERT INTO scratch (v) VALUES (?)`, &sqlitex.ExecOptions{Args: []any{v}})
		}
	}
	if err := s.write(ctx, "schema", func(conn *sqlite.Conn) error {
		return sqlitex.ExecuteTransient(conn, `CREATE TABLE scratch (v TEXT NOT NULL UNIQUE)`, nil)
	}); err != nil {
		t.Fatal(err)
	}
	hold, running := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		err := s.write(ctx, "blocker", func(conn *sqlite.Conn) error {
			close(running)
			<-hold
			return insert("blocker")(conn)
		})
		if err != nil {
			t.Errorf("blocker: %v", err)
		}
	})
	<-running
	before := len(walFrames(t, path))
	errBoom := errors.New("boom")
	gone, cancel := context.WithCancel(ctx)
	results := make([]error, 4)
	writes := []func(*sqlite.Conn) error{
		insert("a"),
		func(conn *sqlite.Conn) error { // changes something, then fails
			if err := insert("b")(conn); err != nil {
				return err
			}
			return errBoom
		},
		func(conn *sqlite.Conn) error { // an error of SQLite's
			return sqlitex.Execute(conn, `INSERT INTO no_such_table (v) VALUES ('x')`, nil)
		},
		insert("c"),
	}
	for i, fn := range writes {
		wctx := ctx
		if i == 3 {
			wctx = gone
		}
		wg.Go(func() { results[i] = s.write(wctx, "grouped", fn) })
	}
	// Every write waits for the blocker; then the last one gives up, and
	// the blocker ends.
	waitHanding := func(n int64) {
		for s.handing.Load() != n {
			time.Sleep(time.Millisecond)
		}
	}
	waitHanding(4)
	cancel()
	waitHanding(3)
	close(hold)
	wg.Wait()
	if results[0] != nil || !errors.Is(results[1], errBoom) || results[2] == nil || !errors.Is(results[3], context.Canceled) {
		t.Fatalf("results = %v, want nil, boom, an SQL error, canceled", results)
	}
	var got []string
	err = s.read(ctx, "scratch", func(conn *sqlite.Conn) error {
		return sqlitex.Execute(conn, `SELECT v FROM scratch ORDER BY v`, &sqlitex.ExecOptions{
			ResultFunc: func(stmt *sqlite.Stmt) error { got = append(got, stmt.ColumnText(0)); return nil },
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "blocker"}; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("rows = %v, want %v: only the failed writes' changes are undone", got, want)
	}
	commits := 0
	for _, f := range walFrames(t, path)[before:] {
		if f.commit {
			commits++
		}
	}
	if commits != 2 {
		t.Errorf("%d commits for the blocker and three waiting writes, want 2", commits)
	}
}

// A group lingers while most lingers gather every writer they wait for;
// once most end at the timer, only one group in probeEvery lingers, and
// lingers that gather their writers again bring the wait back.
func TestGrouper_LingersWhileLingersPay(t *testing.T) {
	t.Parallel()
	g := &grouper{hits: 1}
	for range 3 {
		if !g.lingers() {
			t.Fatal("a new writer does not linger")
		}
		g.lingered(false)
	}
	if !g.lingers() {
		t.Fatal("three missed lingers of a new writer stop it lingering")
	}
	for range 10 {
		g.lingered(false)
	}
	n := 0
	for range 4 * probeEvery {
		if g.lingers() {
			n++
		}
	}
	if n != 4 {
		t.Fatalf("after missed lingers, %d of %d groups lingered, want one in %d", n, 4*probeEvery, probeEvery)
	}
	for range 10 {
		g.lingered(true)
	}
	if !g.lingers() {
		t.Fatal("lingers that gathered their writers did not bring the wait back")
	}
}
