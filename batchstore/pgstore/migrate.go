package pgstore

import (
	"context"
	"embed"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/siftfetch/batchkit/internal/migrations"
)

// migrationFS holds the migrations: migrations/NNN_name.sql, applied in
// version order, each once, each in a transaction of its own. They are
// append-only: a released file never changes.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

// migrations returns the embedded migrations in version order.
func schemaMigrations() ([]migrations.Migration, error) {
	return migrations.Load(migrationFS, "migrations")
}

// migrate brings the schema to the newest version this build knows. A
// schema already there costs one read. Otherwise it takes a session
// advisory lock keyed by the schema on one connection (locks are per
// database, and the unlock must run on the connection that locked), so
// that of several nodes starting at once one migrates and the others wait
// and then find nothing to do: CREATE … IF NOT EXISTS alone is not safe
// against a concurrent create. Each migration runs in its own transaction
// with its row in schema_migrations.
func (s *Store) migrate(ctx context.Context) error {
	migs, err := schemaMigrations()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSchema, err)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if todo, err := s.pending(ctx, conn, migs); err != nil || len(todo) == 0 {
		return err
	}
	if err := s.lockMigrations(ctx, conn); err != nil {
		return err
	}
	defer unlock(conn, s.migrateKey)
	if err := s.createSchema(ctx, conn); err != nil {
		return err
	}
	todo, err := s.pending(ctx, conn, migs)
	if err != nil {
		return err
	}
	schema := pgx.Identifier{s.opts.Schema}.Sanitize()
	for _, m := range todo {
		err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, strings.ReplaceAll(m.SQL, "{s}", schema)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO `+schema+`.schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name)
			return err
		})
		if err != nil {
			return fmt.Errorf("%w: migration %s: %w", ErrSchema, m.Name, err)
		}
	}
	return nil
}

// pending returns the migrations of migs that the schema has not recorded,
// in version order: all of them for a schema (or migrations table) that
// does not exist yet. A schema that recorded a version this build does not
// know is refused ([ErrSchema]): a newer build, or one with another change's
// migration, migrated it.
func (s *Store) pending(ctx context.Context, conn *pgxpool.Conn, migs []migrations.Migration) ([]migrations.Migration, error) {
	var table *string
	name := pgx.Identifier{s.opts.Schema, "schema_migrations"}.Sanitize()
	if err := conn.QueryRow(ctx, `SELECT to_regclass($1)::text`, name).Scan(&table); err != nil || table == nil {
		return migs, err
	}
	rows, err := conn.Query(ctx, `SELECT version FROM `+name+` ORDER BY version`)
	if err != nil {
		return nil, err
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, err
	}
	var todo []migrations.Migration
	known := map[int]bool{}
	for _, m := range migs {
		known[m.Version] = true
		if !slices.Contains(applied, m.Version) {
			todo = append(todo, m)
		}
	}
	for _, v := range applied {
		if !known[v] {
			return nil, fmt.Errorf("%w: schema %s has version %d, which this build does not know", ErrSchema, s.opts.Schema, v)
		}
	}
	return todo, nil
}

// createSchema creates the schema and the migrations table if they are
// missing. An existing schema is not created again, so a role that may use
// but not create schemas can run a store in one a DBA made.
func (s *Store) createSchema(ctx context.Context, conn *pgxpool.Conn) error {
	schema := pgx.Identifier{s.opts.Schema}.Sanitize()
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, s.opts.Schema).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		if _, err := conn.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
			return err
		}
	}
	_, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+schema+`.schema_migrations (
		version    integer     PRIMARY KEY,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`)
	return err
}

// lockMigrations takes the migration lock on conn, in one round trip
// with the bounds of the session that holds it: the server ends the
// session once it has waited txIdleTimeout on its client, in a
// migration's transaction or between two. So a node that stops while it
// migrates (a frozen process, a node cut off from the network) keeps
// neither the lock, which the other nodes' Open wait for, nor a
// migration's table locks, which every node's calls would wait for, for
// longer than that. Its migration rolls back whole, and the next node to
// take the lock runs it.
func (s *Store) lockMigrations(ctx context.Context, conn *pgxpool.Conn) error {
	_, err := conn.Exec(ctx, `SELECT set_config('idle_session_timeout', $2, false),
		set_config('idle_in_transaction_session_timeout', $2, false), pg_advisory_lock($1)`, s.migrateKey, idleBound)
	return err
}

// unlock releases the migration lock on the connection that took it, and
// lifts the bounds lockMigrations set, before the connection goes back to
// the pool. If that fails, the connection is closed, which releases the
// lock too.
func unlock(conn *pgxpool.Conn, key int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var ok bool
	err := conn.QueryRow(ctx, `SELECT pg_advisory_unlock($1)`, key).Scan(&ok)
	if err == nil && ok {
		_, err = conn.Exec(ctx, `RESET idle_session_timeout; RESET idle_in_transaction_session_timeout`)
	}
	if err != nil || !ok {
		conn.Conn().Close(ctx)
	}
}
