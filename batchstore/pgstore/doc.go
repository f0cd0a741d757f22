// Package pgstore is the PostgreSQL store of batchkit: several nodes share
// one database.
//
// Any node accepts, drains, reads and cancels any job. Caps and
// idempotency hold across the fleet. A node that dies has its jobs failed
// by another node. It is built on github.com/jackc/pgx/v5, and it is the
// only package that imports pgx. For one process, the SQLite store in
// batchstore is simpler.
//
// # Getting started
//
// Open a database URL, then give each node's runner a stable id:
//
//	store, err := pgstore.Open(ctx, "postgres://batch@db.internal/app", pgstore.Config{})
//	if err != nil { … }            // errors.Is(err, batch.ErrUnavailable): the server cannot serve now
//	defer store.Close()            // after the runner's Close
//	runner, err := batch.New(batch.Config{Store: store, Fetch: fetch, RunnerID: hostname})
//
// [Open] owns its pool. [New] takes a pool the host owns, for a host that
// keeps its own tables in the same database. PostgreSQL 14 or later is
// required.
//
// # What it needs from the server
//
//   - One schema ([Config.Schema], "batchkit" by default), created by
//     versioned migrations. Nodes may start at once: one migrates.
//   - A direct connection, or a pooler in session mode. A transaction pooler
//     breaks the migration lock and LISTEN.
//   - Connections: each node uses its pool ([Config.MaxConns]) plus one
//     for the change feed. Workers + 2 is enough for a node with few reads.
//   - synchronous_commit on, the default: a write has committed when its
//     method returns.
//
// Times use the database's clock, so the nodes' clocks need not agree.
// Long-polls on one node wake when another node changes the job, through
// LISTEN/NOTIFY; polling stays the fallback.
//
// # Errors
//
// Conditions of the job model are the batch package's sentinels, such as
// [batch.ErrNotFound] and [batch.ErrNotHeld]. Everything else is
// "pgstore: <operation>: …", with the driver's error in the chain. An error
// the server may recover from matches [batch.ErrUnavailable]: a lost
// connection, too many connections, a timeout, a shutdown. A closed store
// is [ErrClosed]; a schema the build cannot use is [ErrSchema]. No error
// carries a statement's parameters, so no target URL reaches one.
//
// # Design
//
// See docs/design/postgres-store.md in the repository for what each
// guarantee rests on: locks, fencing, the byte counter and the change feed.
package pgstore
