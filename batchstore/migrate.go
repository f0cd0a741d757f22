package batchstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/siftfetch/batchkit/internal/migrations"
	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"
)

// schemaFS holds the migrations: schema/NNN_name.sql, applied in version
// order, each once, each in its own immediate transaction. They are
// append-only: a released file never changes.
//
//go:embed schema/*.sql
var schemaFS embed.FS

// migrations returns the embedded migrations in version order.
func schemaMigrations() ([]migrations.Migration, error) { return migrations.Load(schemaFS, "schema") }

// init vets and prepares the database on first use: quick_check before
// anything may write, then incremental auto-vacuum and WAL for a new file,
// the migrations, and a write probe. The connection it ran on becomes the
// store's writer.
func (s *Store) init(ctx context.Context) (err error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	conn, err := s.take(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			s.pool.Put(conn)
			return
		}
		err = s.startWriting(conn)
	}()
	steps := []struct {
		name string
		fn   func(*sqlite.Conn) error
	}{
		{"quick_check", quickCheck},
		{"auto_vacuum", initAutoVacuum},
		{"journal_mode", initWAL},
		{"migrate", migrate},
		{"write probe", probeWritable},
	}
	for _, step := range steps {
		if err := step.fn(conn); err != nil {
			return fmt.Errorf("%s: %w", step.name, err)
		}
	}
	return nil
}

// quickCheck runs PRAGMA quick_check: a file that is not a database fails
// to read (SQLITE_NOTADB); a damaged page behind a valid header reads fine
// until something touches it, and only the check finds it.
func quickCheck(conn *sqlite.Conn) error {
	var msgs []string
	err := sqlitex.ExecuteTransient(conn, "PRAGMA quick_check(5)", &sqlitex.ExecOptions{
		ResultFunc: func(stmt *sqlite.Stmt) error {
			msgs = append(msgs, stmt.ColumnText(0))
			return nil
		},
	})
	if err != nil {
		return err
	}
	if len(msgs) != 1 || msgs[0] != "ok" {
		msg := strings.ReplaceAll(strings.Join(msgs, "; "), "\n", "; ")
		return kindError{ErrCorrupt, errors.New(msg)}
	}
	return nil
}

// initAutoVacuum turns on incremental auto-vacuum in a database that has no
// tables yet, so that pages freed by sweep and eviction go back to the file
// system. The pragma is ignored inside a transaction and once page 1 exists,
// hence this step outside the migrations, and the VACUUM of a still-empty
// file whose page 1 a host pool already wrote. A file that already has
// tables keeps its setting: rewriting a host's file is not ours to do.
func initAutoVacuum(conn *sqlite.Conn) error {
	tables, err := queryInt(conn, "SELECT count(*) FROM sqlite_schema")
	if err != nil {
		return err
	}
	if tables > 0 {
		return nil
	}
	if err := sqlitex.ExecuteTransient(conn, "PRAGMA auto_vacuum = INCREMENTAL", nil); err != nil {
		return err
	}
	if av, err := queryInt(conn, "PRAGMA auto_vacuum"); err != nil || av == 2 {
		return err
	}
	return sqlitex.ExecuteTransient(conn, "VACUUM", nil)
}

// initWAL switches a file database to WAL (a setting stored in the file).
// An in-memory database keeps its "memory" journal.
func initWAL(conn *sqlite.Conn) error {
	mode, err := queryText(conn, "PRAGMA journal_mode")
	if err != nil || mode == "wal" || mode == "memory" {
		return err
	}
	mode, err = queryText(conn, "PRAGMA journal_mode = WAL")
	if err != nil {
		return err
	}
	if mode != "wal" {
		return fmt.Errorf("journal_mode is %q, want wal", mode)
	}
	return nil
}

// migrate applies the migrations the database has not recorded yet.
func migrate(conn *sqlite.Conn) error {
	migs, err := schemaMigrations()
	if err != nil {
		return err
	}
	known := make(map[int]bool, len(migs))
	for _, m := range migs {
		known[m.Version] = true
	}
	for _, m := range migs {
		if err := applyMigration(conn, m, known); err != nil {
			if classify(err) != nil { // read-only, full, corrupt: not the schema's fault
				return fmt.Errorf("%s: %w", m.Name, err)
			}
			return kindError{ErrSchema, fmt.Errorf("%s: %w", m.Name, err)}
		}
	}
	return nil
}

// applyMigration applies m in an immediate transaction unless the database
// has recorded it. The version table is the store's own: the host may share
// the file, and PRAGMA user_version belongs to the whole file. A database
// that recorded a version this build does not know (known) is refused: it
// was migrated by a newer build, or one with another change's migration.
func applyMigration(conn *sqlite.Conn, m migrations.Migration, known map[int]bool) (err error) {
	end, err := sqlitex.ImmediateTransaction(conn)
	if err != nil {
		return err
	}
	defer end(&err)
	err = sqlitex.ExecuteTransient(conn, `CREATE TABLE IF NOT EXISTS batch_migration (
		version    INTEGER PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL
	)`, nil)
	if err != nil {
		return err
	}
	var applied, unknown []int
	err = sqlitex.ExecuteTransient(conn, "SELECT version FROM batch_migration ORDER BY version", &sqlitex.ExecOptions{
		ResultFunc: func(stmt *sqlite.Stmt) error {
			v := stmt.ColumnInt(0)
			applied = append(applied, v)
			if !known[v] {
				unknown = append(unknown, v)
			}
			return nil
		},
	})
	if err != nil {
		return err
	}
	if len(unknown) > 0 {
		return fmt.Errorf("database has schema versions %v that this build does not know", unknown)
	}
	if slices.Contains(applied, m.Version) {
		return nil
	}
	if err := sqlitex.ExecuteScript(conn, m.SQL, nil); err != nil {
		return err
	}
	return sqlitex.Execute(conn, "INSERT INTO batch_migration (version, name, applied_at) VALUES (?, ?, ?)",
		&sqlitex.ExecOptions{Args: []any{m.Version, m.Name, time.Now().UnixNano()}})
}

// probeWritable makes one real write and rolls it back, so that a database
// opened read-only (mode=ro, a read-only mount, no write permission) fails
// at open with SQLITE_READONLY rather than at the first submit.
func probeWritable(conn *sqlite.Conn) error {
	if err := sqlitex.ExecuteTransient(conn, "BEGIN IMMEDIATE", nil); err != nil {
		return err
	}
	err := sqlitex.ExecuteTransient(conn, "UPDATE batch_stat SET bytes = bytes WHERE id = 1", nil)
	if rb := sqlitex.ExecuteTransient(conn, "ROLLBACK", nil); err == nil {
		err = rb
	}
	return err
}

func queryInt(conn *sqlite.Conn, q string) (int64, error) {
	stmt, _, err := conn.PrepareTransient(q)
	if err != nil {
		return 0, err
	}
	defer stmt.Finalize()
	return sqlitex.ResultInt64(stmt)
}

func queryText(conn *sqlite.Conn, q string) (string, error) {
	stmt, _, err := conn.PrepareTransient(q)
	if err != nil {
		return "", err
	}
	defer stmt.Finalize()
	return sqlitex.ResultText(stmt)
}
