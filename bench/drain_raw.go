package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"
)

// The raw-engine twins: the least work that stores the same results, the
// ceiling each library is held against. They follow batchstore's and
// pgstore's own drain benchmarks (drain_bench_test.go in each).

// rawSQLite: one zombiezen connection with the store's file settings
// inserts the jobs and their items (one transaction per job), then, for
// each item, runs one immediate transaction that stores new result bytes
// in the item's row and bumps its job's counter.
func rawSQLite(sync, group string) *contender {
	return &contender{
		Key: "sqlite-" + sync + "/raw", Group: group, Name: "raw twin (zombiezen, one connection)", Peer: "raw",
		Model:    "one immediate transaction per item: UPDATE the item's result, UPDATE its job's counter",
		Settings: "WAL, the table's `synchronous`, `auto_vacuum=INCREMENTAL`, `foreign_keys=ON`, `journal_size_limit=4 MiB`, as batchstore sets them",
		Run: func(ctx context.Context, e *drainEnv) (time.Duration, error) {
			dir, remove, err := e.roundDir()
			if err != nil {
				return 0, err
			}
			defer remove()
			return rawSQLiteRound(ctx, e, filepath.Join(dir, "raw.db"), sync)
		},
	}
}

func rawSQLiteRound(ctx context.Context, e *drainEnv, path, sync string) (_ time.Duration, err error) {
	conn, err := sqlite.OpenConn(path, sqlite.OpenReadWrite|sqlite.OpenCreate)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	conn.SetInterrupt(ctx.Done())
	for _, q := range []string{
		"PRAGMA auto_vacuum = INCREMENTAL",
		"PRAGMA journal_mode = WAL",
		"PRAGMA foreign_keys = ON",
		"PRAGMA synchronous = " + sync,
		"PRAGMA journal_size_limit = 4194304",
		`CREATE TABLE job (id INTEGER PRIMARY KEY, done INTEGER NOT NULL DEFAULT 0)`,
		`CREATE TABLE item (job INTEGER NOT NULL REFERENCES job (id), idx INTEGER NOT NULL,
			url TEXT NOT NULL, body BLOB, PRIMARY KEY (job, idx))`,
	} {
		if err := sqlitex.ExecuteTransient(conn, q, nil); err != nil {
			return 0, fmt.Errorf("%s: %w", q, err)
		}
	}
	tx := func(fn func() error) error {
		end, err := sqlitex.ImmediateTransaction(conn)
		if err != nil {
			return err
		}
		err = fn()
		end(&err)
		return err
	}
	w := e.work
	body := slices.Clone(e.envelope)
	start := time.Now()
	for j := range w.Jobs {
		err := tx(func() error {
			if err := sqlitex.Execute(conn, `INSERT INTO job (id) VALUES (?)`, &sqlitex.ExecOptions{Args: []any{j}}); err != nil {
				return err
			}
			for i := range w.Items {
				if err := sqlitex.Execute(conn, `INSERT INTO item (job, idx, url) VALUES (?, ?, ?)`,
					&sqlitex.ExecOptions{Args: []any{j, i, itemURL(j, i)}}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
	}
	for j := range w.Jobs {
		for i := range w.Items {
			for off := 0; off+8 <= len(body); off += 512 { // new bytes on every page
				binary.LittleEndian.PutUint64(body[off:], uint64(j<<16|i))
			}
			err := tx(func() error {
				if err := sqlitex.Execute(conn, `UPDATE item SET body = ? WHERE job = ? AND idx = ?`,
					&sqlitex.ExecOptions{Args: []any{body, j, i}}); err != nil {
					return err
				}
				return sqlitex.Execute(conn, `UPDATE job SET done = done + 1 WHERE id = ?`, &sqlitex.ExecOptions{Args: []any{j}})
			})
			if err != nil {
				return 0, err
			}
		}
	}
	elapsed := time.Since(start)
	var results, full int
	err = sqlitex.Execute(conn, `SELECT (SELECT count(*) FROM item WHERE body IS NOT NULL), (SELECT count(*) FROM job WHERE done = ?)`,
		&sqlitex.ExecOptions{Args: []any{w.Items}, ResultFunc: func(s *sqlite.Stmt) error {
			results, full = s.ColumnInt(0), s.ColumnInt(1)
			return nil
		}})
	if err != nil {
		return 0, err
	}
	return elapsed, checkCounts(w, results, full)
}

// rawPG: a pgx pool of as many connections as batchkit has workers
// inserts the jobs and items (one transaction per job), then each
// connection takes whole jobs and stores each item in one transaction
// that writes its result and bumps its job's counter, both statements in
// one pgx.Batch: one round trip.
func rawPG(group string, conns int) *contender {
	return &contender{
		Key: pgKey(group) + "/raw", Group: group, Name: fmt.Sprintf("raw twin (pgx, %d connections)", conns), Peer: "raw",
		Model:    "one transaction per item in one round trip (pgx.Batch): UPDATE the item's result, UPDATE its job's counter",
		Settings: fmt.Sprintf("a schema of its own, `bytea COMPRESSION lz4` as pgstore's; %d connections, one job at a time each", conns),
		Run: func(ctx context.Context, e *drainEnv) (time.Duration, error) {
			schema, drop, err := newPGSchema(ctx, e.pgURL)
			if err != nil {
				return 0, err
			}
			defer drop()
			return rawPGRound(ctx, e, schema, conns, nil)
		},
	}
}

// rawPGRound runs the twin on conns connections. hook, if not nil, sees
// the pool's configuration before the pool is made (the cost phase adds
// its tracer), and is called with the pool once the jobs are inserted,
// just before the timed drain (the cost phase takes its first snapshot
// there); its return is called when the drain ends.
func rawPGRound(ctx context.Context, e *drainEnv, schema string, conns int, hook *poolHook) (time.Duration, error) {
	cfg, err := pgxpool.ParseConfig(e.pgURL)
	if err != nil {
		return 0, err
	}
	cfg.MaxConns = int32(conns)
	cfg.MinConns = int32(conns)
	if hook != nil && hook.config != nil {
		hook.config(cfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	sch := pgx.Identifier{schema}.Sanitize()
	for _, q := range []string{
		`CREATE TABLE ` + sch + `.job (id integer PRIMARY KEY, done integer NOT NULL DEFAULT 0)`,
		`CREATE TABLE ` + sch + `.item (job integer NOT NULL REFERENCES ` + sch + `.job (id), idx integer NOT NULL,
			url text NOT NULL, body bytea COMPRESSION lz4, PRIMARY KEY (job, idx))`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return 0, fmt.Errorf("%s: %w", q, err)
		}
	}
	w := e.work
	stop := func() {}
	if hook != nil && hook.start != nil {
		if stop, err = hook.start(pool); err != nil {
			return 0, err
		}
		defer stop() // idempotent: the drain's end calls it first
	}
	start := time.Now()
	for j := range w.Jobs {
		urls := make([]string, w.Items)
		for i := range urls {
			urls[i] = itemURL(j, i)
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO `+sch+`.job (id) VALUES ($1)`, j); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO `+sch+`.item (job, idx, url)
				SELECT $1, i - 1, u FROM unnest($2::text[]) WITH ORDINALITY AS x (u, i)`, j, urls)
			return err
		})
		if err != nil {
			return 0, err
		}
	}
	jobs := make(chan int, w.Jobs)
	for j := range w.Jobs {
		jobs <- j
	}
	close(jobs)
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for range conns {
		wg.Go(func() {
			for j := range jobs {
				for i := range w.Items {
					b := &pgx.Batch{}
					b.Queue(`UPDATE `+sch+`.item SET body = $1 WHERE job = $2 AND idx = $3`, e.envelope, j, i)
					b.Queue(`UPDATE `+sch+`.job SET done = done + 1 WHERE id = $1`, j)
					if err := pool.SendBatch(ctx, b).Close(); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	stop()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	var results, full int
	err = pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+sch+`.item WHERE body IS NOT NULL),
		(SELECT count(*) FROM `+sch+`.job WHERE done = $1)`, w.Items).Scan(&results, &full)
	if err != nil {
		return 0, err
	}
	return elapsed, checkCounts(w, results, full)
}
