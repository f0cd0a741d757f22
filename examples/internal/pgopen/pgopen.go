// Package pgopen opens the example daemon's PostgreSQL store: the
// daemon.Config.OpenPostgres of batchd and of the reliability tests, apart
// from the daemon so that a program that runs it on SQLite alone compiles
// no PostgreSQL driver.
package pgopen

import (
	"context"
	"log/slog"

	"github.com/siftfetch/batchkit/batchstore/pgstore"
	"github.com/siftfetch/batchkit/examples/internal/daemon"
)

// Open opens the PostgreSQL store at db, in schema ("" for pgstore's
// default), logging to log.
func Open(ctx context.Context, db, schema string, log *slog.Logger) (daemon.Store, error) {
	return pgstore.Open(ctx, db, pgstore.Config{Schema: schema, Logger: log})
}
