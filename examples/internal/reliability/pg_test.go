package reliability

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgEnv names the PostgreSQL database of the cluster tests, as for
// batchstore/pgstore.
const pgEnv = "BATCHKIT_PG_URL"

// pgSchema returns the database URL and a fresh schema name for the
// test, dropped when it ends. Without the URL the test skips, except under
// CI=true, where it fails: CI must not pass by skipping.
func pgSchema(t *testing.T) (url, schema string) {
	t.Helper()
	url = os.Getenv(pgEnv)
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set, and CI=true", pgEnv)
		}
		t.Skipf("%s is not set: no PostgreSQL to test against", pgEnv)
	}
	b := make([]byte, 6)
	rand.Read(b)
	schema = "rel_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return url, schema
}
