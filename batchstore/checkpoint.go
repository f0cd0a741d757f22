package batchstore

import (
	"context"
	"fmt"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"
)

// Checkpoints off the write path. SQLite checkpoints the WAL inside the
// commit that takes it past wal_autocheckpoint pages (1000 by default), so
// about one target write in a hundred would also copy a thousand pages into
// the database file and sync it. The store moves that work to a goroutine
// of its own: once its writes since the last signal come to about
// checkpointPages pages (each write brings its own estimate), the writer
// signals it, and it runs a PASSIVE checkpoint on a reader connection,
// which proceeds alongside later writes and never waits for them. The writer's own
// threshold is raised to checkpointCeiling, a safety net that only a
// checkpointer falling far behind (readers pinning old snapshots, say)
// reaches. What a commit promises is unchanged: see the package
// documentation on synchronous.
const (
	checkpointPages   = 512  // WAL pages (2 MiB), estimated, between signals
	checkpointCeiling = 4096 // WAL pages (16 MiB) before the writer checkpoints itself
	defaultCeiling    = 1000 // SQLite's default, restored on a host's connection
)

// startCheckpointer arms the writer connection and starts the goroutine,
// under synchronous=NORMAL. Under FULL every commit waits for the disk, and
// a checkpoint beside it would compete for that same disk and slow the
// drain (BenchmarkDrain shows it), so SQLite's own checkpoints stay.
func (s *Store) startCheckpointer() error {
	if s.opts.Synchronous != SyncNormal || s.off.SQLiteCheckpointer {
		return nil
	}
	if err := setAutoCheckpoint(s.wconn, checkpointCeiling); err != nil {
		return err
	}
	s.ckpt = make(chan struct{}, 1)
	s.ckptDone = make(chan struct{})
	go s.checkpointer()
	return nil
}

// committed adds a commit's estimated pages and signals the checkpointer
// when they reach checkpointPages. Only the writer goroutine calls it.
func (s *Store) committed(pages int) {
	if s.walPages += pages; s.walPages < checkpointPages {
		return
	}
	s.walPages = 0
	select {
	case s.ckpt <- struct{}{}:
	default: // one is pending already
	}
}

// pagesOf estimates the WAL pages a write of n stored bytes adds: the bytes
// themselves and a few pages of rows, indexes and file header.
func pagesOf(n int) int { return n/4096 + 4 }

// checkpointer runs a PASSIVE checkpoint at every signal until Close
// closes the channel. A checkpoint that fails (the store is busy or full)
// is left to the next signal, or to the writer's ceiling.
func (s *Store) checkpointer() {
	defer close(s.ckptDone)
	for range s.ckpt {
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
		_ = s.checkpoint(ctx)
		cancel()
	}
}

// checkpoint runs a PASSIVE checkpoint on a reader connection. Checkpoints
// take turns: SQLite lets one run at a time and answers a second with
// "busy", copying nothing, so a reclaim after a sweep waits for a
// background checkpoint rather than silently leaving the file untruncated.
func (s *Store) checkpoint(ctx context.Context) error {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	return s.read(ctx, "checkpoint", func(conn *sqlite.Conn) error {
		return sqlitex.ExecuteTransient(conn, "PRAGMA wal_checkpoint(PASSIVE)", nil)
	})
}

// stopCheckpointer ends the goroutine and gives the writer connection
// SQLite's default threshold back (it may be a host's). It runs on the
// writer goroutine, or once that has ended; later commits signal no one.
func (s *Store) stopCheckpointer() {
	if s.ckpt == nil {
		return
	}
	close(s.ckpt)
	<-s.ckptDone
	s.ckpt = nil
	_ = setAutoCheckpoint(s.wconn, defaultCeiling)
}

func setAutoCheckpoint(conn *sqlite.Conn, pages int) error {
	return sqlitex.ExecuteTransient(conn, fmt.Sprintf("PRAGMA wal_autocheckpoint = %d", pages), nil)
}
