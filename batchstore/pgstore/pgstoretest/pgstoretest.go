// Package pgstoretest gives the tests that need PostgreSQL their database: the
// server BATCHKIT_PG_URL names (e.g.
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable), and a schema of
// each test's own, dropped when it ends, so that tests run in parallel on
// one database. Without the URL a test skips, except under CI=true, where
// it fails: CI must not pass by skipping them.
package pgstoretest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// URLEnv names the environment variable that holds the server's URL.
const URLEnv = "BATCHKIT_PG_URL"

// URL returns the server's URL. Without one it skips tb, or fails it
// under CI=true.
func URL(tb testing.TB) string {
	tb.Helper()
	url := os.Getenv(URLEnv)
	if url == "" {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("%s is not set, and CI=true: the PostgreSQL tests must run in CI, not skip", URLEnv)
		}
		tb.Skipf("%s is not set: no PostgreSQL to test against, e.g. %s=postgres://postgres@127.0.0.1:5432/test?sslmode=disable", URLEnv, URLEnv)
	}
	return url
}

// Schema returns the server's URL (see [URL]) and the name of a schema
// that does not exist yet, prefix and 12 random hex digits, which is
// dropped with everything in it when tb ends (after every cleanup
// registered later, such as a store's Close).
func Schema(tb testing.TB, prefix string) (url, schema string) {
	tb.Helper()
	url = URL(tb)
	var b [6]byte
	rand.Read(b[:])
	schema = prefix + "_" + hex.EncodeToString(b[:])
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := DropSchema(ctx, url, schema); err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return url, schema
}

// DropSchema drops the schema name, with everything in it, if it exists.
func DropSchema(ctx context.Context, url, name string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
	return err
}
