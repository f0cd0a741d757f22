package pgstore

import (
	"context"
	"embed"
	"fmt"
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
	if v, err := s.schemaVersion(ctx, conn); err != nil {
		return err
	} else if v == len(migs) {
		return nil
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, s.migrateKey); err != nil {
		return err
	}
	defer unlock(conn, s.migrateKey)
	if err := s.createSchema(ctx, conn); err != nil {
		return err
	}
	v, err := s.schemaVersion(ctx, conn)
	switch {
	case err != nil:
		return err
	case v > len(migs):
		return fmt.Errorf("%w: schema %s is at version %d, this build knows %d", ErrSchema, s.opts.Schema, v, len(migs))
	}
	schema := pgx.Identifier{s.opts.Schema}.Sanitize()
	for _, m := range migs[v:] {
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

// schemaVersion returns the newest applied migration, 0 for a schema (or
// migrations table) that does not exist yet.
func (s *Store) schemaVersion(ctx context.Context, conn *pgxpool.Conn) (int, error) {
	var table *string
	name := pgx.Identifier{s.opts.Schema, "schema_migrations"}.Sanitize()
	if err := conn.QueryRow(ctx, `SELECT to_regclass($1)::text`, name).Scan(&table); err != nil || table == nil {
		return 0, err
	}
	var v int
	err := conn.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+name).Scan(&v)
	return v, err
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

// unlock releases the migration lock on the connection that took it. If
// that fails, the connection is closed, which releases it too.
func unlock(conn *pgxpool.Conn, key int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var ok bool
	err := conn.QueryRow(ctx, `SELECT pg_advisory_unlock($1)`, key).Scan(&ok)
	if err != nil || !ok {
		conn.Conn().Close(ctx)
	}
}
