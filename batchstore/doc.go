// Package batchstore is the SQLite store of batchkit: one process, one file.
//
// It is the embedded default, built on zombiezen.com/go/sqlite. For several
// nodes on one database, use the PostgreSQL store in batchstore/pgstore.
// Both pass the same conformance suites.
//
// # Getting started
//
// Open a file, then give the store to the runner:
//
//	store, err := batchstore.Open(ctx, "/var/lib/sift/batch.db", batchstore.Config{})
//	if err != nil { … }         // ErrLocked, ErrCorrupt, ErrReadOnly, …
//	defer store.Close()         // after the runner's Close
//	runner, err := batch.New(batch.Config{Store: store, Fetch: fetch})
//
// [Open] owns its connection pool. [New] takes a pool the host owns, for a
// host that keeps its own tables in the same file. That pool must outlive
// the store, and should keep a fixed set of connections.
//
// # What it promises
//
//   - A write has committed when its method returns. Under [SyncFull], the
//     default, a commit survives a power loss. Under [SyncNormal] it
//     survives a process crash; a power loss may undo the last commits.
//   - A fetched target costs one write transaction. Jobs draining at once
//     share commits.
//   - Status reads never read result bodies, and never write.
//   - Every operation costs the same at 1k and at 100k stored jobs.
//   - A file the store creates stays near the byte budget: freed pages go
//     back to the file system.
//   - The store serves one process. A second store on the same file fails
//     at once with [ErrLocked], naming the holder's pid.
//   - A corrupt or non-database file is [ErrCorrupt], and left untouched. A
//     file that cannot be written is [ErrReadOnly] at open.
//
// Every call is bounded: a context without a deadline gets
// [Config.Timeout]. Migrations are tracked in the store's own table, not
// in PRAGMA user_version, so a host may share the file.
//
// # Errors
//
// Conditions of the job model are the batch package's sentinels, such as
// [batch.ErrNotFound] and [batch.ErrNotHeld]. Conditions of the database
// are this package's: [ErrLocked], [ErrCorrupt], [ErrReadOnly], [ErrFull],
// [ErrSchema] and [ErrClosed]. Each matches with [errors.Is] and wraps the
// driver error. Anything else is wrapped as "batchstore: <operation>: …".
//
// # Design
//
// See docs/design/sqlite-store.md in the repository for the schema, group
// commit, checkpoints, file size and the checks at open. A rejected
// alternative to group commit is in docs/design/sqlite-pipelined-sync.md.
package batchstore
