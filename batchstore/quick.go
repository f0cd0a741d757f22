package batchstore

import (
	"context"

	"zombiezen.com/go/sqlite"
)

// Quick readers are reader connections kept out of the pool for point
// reads. A status poll reads one small row, which costs SQLite less than
// the pool's bookkeeping: a pool Take arms the connection's interrupt with a
// fresh goroutine and the Put hands it back, two goroutine handoffs per
// read, which on a loaded 2-core server cost more than the read. A store
// that owns its pool ([Open]) therefore keeps a few of its reader
// connections out of the pool for such point reads, each armed once, as
// the writer's is: until Close.
//
// A quick read does not wait: when every quick reader is busy it runs on
// the pool as any read does. Its context is checked before it starts but
// cannot cut the statement short (a quick reader has no interrupt channel
// at all); the connection's busy timeout ([Config.Timeout]) bounds a lock
// wait instead, and Close waits for it. Close must not interrupt it: the
// interrupt would stay set on an idle connection and cut short the
// checkpoint that closing the last connection runs, leaving the WAL behind.

// maxQuickReaders caps the quick readers at one per core of a 2-core
// server: enough for reads this short.
const maxQuickReaders = 2

// quickReaders returns how many quick readers a pool of size n spares: it
// keeps the writer and at least two readers for everything else.
func quickReaders(n int) int { return max(0, min(maxQuickReaders, n-3)) }

// startQuick takes n reader connections out of the pool for quick reads.
func (s *Store) startQuick(ctx context.Context, n int) error {
	s.quick = make(chan *sqlite.Conn, n)
	for range n {
		conn, err := s.take(ctx)
		if err != nil {
			return err
		}
		conn.SetInterrupt(nil)
		conn.SetBusyTimeout(s.opts.Timeout)
		s.quick <- conn
		s.nquick++
	}
	return nil
}

// stopQuick waits for the quick reads in flight and gives their
// connections back to the pool.
func (s *Store) stopQuick() {
	if s.quick == nil {
		return
	}
	for range s.nquick {
		conn := <-s.quick
		conn.SetBlockOnBusy()
		s.pool.Put(conn)
	}
	s.nquick = 0
}

// quickRead runs fn, one read statement of a row or a few, on a quick
// reader if one is free and on the pool (see [Store.read]) if not.
func (s *Store) quickRead(ctx context.Context, op string, fn func(*sqlite.Conn) error) error {
	var conn *sqlite.Conn
	select {
	case conn = <-s.quick: // never ready when s.quick is nil
	default:
		return s.read(ctx, op, fn)
	}
	defer func() { s.quick <- conn }()
	if s.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return wrapErr(ctx, op, err)
	}
	return wrapErr(ctx, op, fn(conn))
}
