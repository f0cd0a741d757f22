package main

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgreSQL: every round works in a schema of its own, created here and
// dropped with everything in it when the round ends, so that rounds do
// not see each other's rows and a run leaves nothing behind. The names
// start with schemaPrefix.

const (
	pgURLEnv     = "BATCHKIT_PG_URL"
	schemaPrefix = "bkbench_"
)

// pgURLFromEnv returns the server's URL, or "" when it is not set or the
// server does not answer (then the PostgreSQL contenders are left out and
// the report says why).
func pgURLFromEnv(ctx context.Context) (url, why string) {
	url = os.Getenv(pgURLEnv)
	if url == "" {
		return "", pgURLEnv + " is not set"
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", fmt.Sprintf("the server at %s does not answer: %v", pgURLEnv, err)
	}
	conn.Close(ctx)
	return url, ""
}

// liveSchemas are the schemas made and not yet dropped, dropped at exit if
// a run fails half way.
var liveSchemas struct {
	sync.Mutex
	url   string
	names map[string]bool
}

// newPGSchema creates a new schema and returns its name and a function
// that drops it.
func newPGSchema(ctx context.Context, url string) (string, func(), error) {
	var b [6]byte
	crand.Read(b[:])
	name := schemaPrefix + hex.EncodeToString(b[:])
	if err := pgExec(ctx, url, `CREATE SCHEMA `+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, err
	}
	liveSchemas.Lock()
	if liveSchemas.names == nil {
		liveSchemas.names = map[string]bool{}
	}
	liveSchemas.url = url
	liveSchemas.names[name] = true
	liveSchemas.Unlock()
	return name, func() { dropPGSchema(url, name) }, nil
}

func dropPGSchema(url, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := pgExec(ctx, url, `DROP SCHEMA IF EXISTS `+pgx.Identifier{name}.Sanitize()+` CASCADE`); err != nil {
		fmt.Fprintf(os.Stderr, "bench: drop schema %s: %v\n", name, err)
		return
	}
	liveSchemas.Lock()
	delete(liveSchemas.names, name)
	liveSchemas.Unlock()
}

// dropLiveSchemas drops every schema this run made and has not dropped.
func dropLiveSchemas() {
	liveSchemas.Lock()
	var names []string
	for n := range liveSchemas.names {
		names = append(names, n)
	}
	url := liveSchemas.url
	liveSchemas.Unlock()
	for _, n := range names {
		dropPGSchema(url, n)
	}
}

func pgExec(ctx context.Context, url, sql string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// pgVersion returns the server's version string.
func pgVersion(ctx context.Context, url string) (string, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var v string
	err = conn.QueryRow(ctx, `SHOW server_version`).Scan(&v)
	return v, err
}

// vacuumPGSchema vacuums and analyzes every table of schema, as a server's
// autovacuum would in time.
func vacuumPGSchema(ctx context.Context, url, schema string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = $1`, schema)
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var t string
		err := r.Scan(&t)
		return pgx.Identifier{schema, t}.Sanitize(), err
	})
	if err != nil || len(names) == 0 {
		return err
	}
	// VACUUM takes its tables in one statement, outside a transaction.
	_, err = conn.Exec(ctx, `VACUUM (ANALYZE) `+strings.Join(names, ", "))
	return err
}
