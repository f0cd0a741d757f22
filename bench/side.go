package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite" // the database/sql driver River's and goqite's SQLite setups get: pure Go, the engine zombiezen builds on
)

// A peer's side tables: River and goqite store no results of their own
// (River's job rows hold args and metadata, goqite's messages a body), so
// each peer stores them as a user would, in tables beside the queue's in
// the same database: a job row with its done counter and one item row per
// item, made in the transaction that enqueues the job, and per item the
// raw twin's work: the item's result and its job's counter, in the
// handler's transaction.
type sideStore[TTx any] interface {
	begin(ctx context.Context) (TTx, error)
	commit(ctx context.Context, tx TTx) error
	rollback(ctx context.Context, tx TTx)
	// submitJob inserts job j and its items.
	submitJob(ctx context.Context, tx TTx, j int, urls []string) error
	// storeItem stores item idx's result and bumps job j's counter.
	storeItem(ctx context.Context, tx TTx, j, idx int, body []byte) error
	// check fails unless every item's result is stored.
	check(ctx context.Context, w drainWork) error
}

// openPeerSQLite opens the database/sql pool a peer gets: modernc's
// driver on path with WAL, a 5 s busy timeout, foreign keys and the round's
// synchronous setting (goqite's README sets the first three through
// mattn's DSN keys, `_journal=WAL&_timeout=5000&_fk=true`), and one
// connection, as riversqlite's package documentation and goqite's README
// both advise.
// withPeerSQLite runs one round of a peer on a new SQLite file named file
// in a directory of the round's own, opened as openPeerSQLite opens it,
// and removes both after.
func (e *drainEnv) withPeerSQLite(file, sync string, round func(*sql.DB) (time.Duration, error)) (time.Duration, error) {
	dir, remove, err := e.roundDir()
	if err != nil {
		return 0, err
	}
	defer remove()
	db, err := openPeerSQLite(filepath.Join(dir, file), sync)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	return round(db)
}

func openPeerSQLite(path, sync string) (*sql.DB, error) {
	q := url.Values{}
	for _, p := range []string{"journal_mode(WAL)", "busy_timeout(5000)", "foreign_keys(1)", "synchronous(" + sync + ")"} {
		q.Add("_pragma", p)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	return db, nil
}

// sqliteSide is the side tables in a peer's SQLite database.
type sqliteSide struct{ db *sql.DB }

func newSQLiteSide(ctx context.Context, db *sql.DB) (*sqliteSide, error) {
	for _, q := range []string{
		`CREATE TABLE bench_job (id INTEGER PRIMARY KEY, done INTEGER NOT NULL DEFAULT 0)`,
		`CREATE TABLE bench_item (job INTEGER NOT NULL REFERENCES bench_job (id), idx INTEGER NOT NULL,
			url TEXT NOT NULL, body BLOB, PRIMARY KEY (job, idx))`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("%s: %w", q, err)
		}
	}
	return &sqliteSide{db}, nil
}

func (s *sqliteSide) begin(ctx context.Context) (*sql.Tx, error) { return s.db.BeginTx(ctx, nil) }
func (s *sqliteSide) commit(_ context.Context, tx *sql.Tx) error { return tx.Commit() }
func (s *sqliteSide) rollback(_ context.Context, tx *sql.Tx)     { _ = tx.Rollback() }

func (s *sqliteSide) submitJob(ctx context.Context, tx *sql.Tx, j int, urls []string) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO bench_job (id) VALUES (?)`, j); err != nil {
		return err
	}
	for i, u := range urls {
		if _, err := tx.ExecContext(ctx, `INSERT INTO bench_item (job, idx, url) VALUES (?, ?, ?)`, j, i, u); err != nil {
			return err
		}
	}
	return nil
}

func (s *sqliteSide) storeItem(ctx context.Context, tx *sql.Tx, j, idx int, body []byte) error {
	if _, err := tx.ExecContext(ctx, `UPDATE bench_item SET body = ? WHERE job = ? AND idx = ?`, body, j, idx); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `UPDATE bench_job SET done = done + 1 WHERE id = ?`, j)
	return err
}

func (s *sqliteSide) check(ctx context.Context, w drainWork) error {
	var results, full int
	err := s.db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM bench_item WHERE body IS NOT NULL),
		(SELECT count(*) FROM bench_job WHERE done = ?)`, w.Items).Scan(&results, &full)
	if err != nil {
		return err
	}
	return checkCounts(w, results, full)
}

// pgSide is the side tables in a peer's PostgreSQL schema, with the raw
// twin's lz4 result column; the per-item statements go in one round trip.
type pgSide struct {
	pool *pgxpool.Pool
	sch  string // quoted schema name
}

func newPGSide(ctx context.Context, pool *pgxpool.Pool, schema string) (*pgSide, error) {
	sch := pgx.Identifier{schema}.Sanitize()
	for _, q := range []string{
		`CREATE TABLE ` + sch + `.bench_job (id integer PRIMARY KEY, done integer NOT NULL DEFAULT 0)`,
		`CREATE TABLE ` + sch + `.bench_item (job integer NOT NULL REFERENCES ` + sch + `.bench_job (id), idx integer NOT NULL,
			url text NOT NULL, body bytea COMPRESSION lz4, PRIMARY KEY (job, idx))`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return nil, fmt.Errorf("%s: %w", q, err)
		}
	}
	return &pgSide{pool: pool, sch: sch}, nil
}

func (s *pgSide) begin(ctx context.Context) (pgx.Tx, error)   { return s.pool.Begin(ctx) }
func (s *pgSide) commit(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) }
func (s *pgSide) rollback(ctx context.Context, tx pgx.Tx) {
	_ = tx.Rollback(context.WithoutCancel(ctx))
}
func (s *pgSide) exec(ctx context.Context, tx pgx.Tx, b *pgx.Batch) error {
	return tx.SendBatch(ctx, b).Close()
}

func (s *pgSide) submitJob(ctx context.Context, tx pgx.Tx, j int, urls []string) error {
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO `+s.sch+`.bench_job (id) VALUES ($1)`, j)
	b.Queue(`INSERT INTO `+s.sch+`.bench_item (job, idx, url)
		SELECT $1, i - 1, u FROM unnest($2::text[]) WITH ORDINALITY AS x (u, i)`, j, urls)
	return s.exec(ctx, tx, b)
}

func (s *pgSide) storeItem(ctx context.Context, tx pgx.Tx, j, idx int, body []byte) error {
	b := &pgx.Batch{}
	b.Queue(`UPDATE `+s.sch+`.bench_item SET body = $1 WHERE job = $2 AND idx = $3`, body, j, idx)
	b.Queue(`UPDATE `+s.sch+`.bench_job SET done = done + 1 WHERE id = $1`, j)
	return s.exec(ctx, tx, b)
}

func (s *pgSide) check(ctx context.Context, w drainWork) error {
	var results, full int
	err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+s.sch+`.bench_item WHERE body IS NOT NULL),
		(SELECT count(*) FROM `+s.sch+`.bench_job WHERE done = $1)`, w.Items).Scan(&results, &full)
	if err != nil {
		return err
	}
	return checkCounts(w, results, full)
}

// jobURLs returns job j's item URLs.
func jobURLs(j, items int) []string {
	urls := make([]string, items)
	for i := range urls {
		urls[i] = itemURL(j, i)
	}
	return urls
}
