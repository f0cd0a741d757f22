package batchstore

import (
	"cmp"
	"context"
	"errors"
	"sync/atomic"
	"time"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"
)

// The writer. SQLite runs one write transaction at a time, and the drain
// makes one write per target, so the store's write throughput is its
// writers' throughput. One goroutine runs every write transaction, back to
// back, on one connection:
//
//   - The connection's page cache stays warm: no other connection writes,
//     so a commit never re-reads the pages it wrote last.
//   - Writes run in arrival order, and a caller waiting its turn holds no
//     connection a reader could use and gives up at its deadline. (SQLite's
//     own wait for the write lock hands the lock to whoever retries first,
//     so under contention one caller could starve until its deadline.)
//   - The next write starts the moment one commits: a caller that hands its
//     write over is woken with the result while the writer goes on, instead
//     of the next caller waiting to be scheduled after a handover of a lock
//     (only a group that expects more writers waits for them, briefly: see
//     Group commit below).
//
// A write's context cuts short its wait for the file's write lock (a
// host's own connection may hold it) through the connection's interrupt
// channel, which is armed once rather than per write (as a pool Take does),
// sparing every write a goroutine handoff.

// writeReq is one write transaction handed to the writer.
type writeReq struct {
	ctx   context.Context
	pages int // the WAL pages it is expected to write, for the checkpointer
	fn    func(*sqlite.Conn) error
	err   error // its outcome, set by the writer
	done  chan error
}

// startWriting makes conn the writer's connection and starts the writer and
// the checkpointer.
func (s *Store) startWriting(conn *sqlite.Conn) error {
	s.wconn, s.wdone = conn, make(chan struct{})
	conn.SetInterrupt(s.wdone)
	if err := s.startCheckpointer(); err != nil {
		return err
	}
	s.writeq = make(chan *writeReq)
	s.stopWriter = make(chan struct{})
	s.writerDone = make(chan struct{})
	go s.writer()
	return nil
}

// stopWriting ends the writer after the write in flight and gives its
// connection back to the pool. Writes after it return ErrClosed.
func (s *Store) stopWriting() {
	if s.wconn == nil {
		return
	}
	if s.writeq != nil {
		close(s.stopWriter)
		<-s.writerDone
	}
	s.stopCheckpointer()
	s.pool.Put(s.wconn)
	s.wconn = nil
}

// maxGroup caps the writes one commit carries.
const maxGroup = 16

// Group commit (docs/design/sqlite-store.md in the repository says why and
// why it is safe). The writer takes every write already waiting, runs each
// in a savepoint of one transaction, and commits once. Taking only what
// waits would split the writers that draining jobs keep sending: the
// writers a commit releases come back one by one, and the first would
// commit alone. So a group smaller than the expected writers (the last
// group's writes plus those that queued while it ran) waits for the rest,
// for at most the writer's recent commit time and never more than
// maxLinger. That wait is the linger. It comes before BEGIN: no
// transaction is open, no lock held, no write run or answered.
//
// The expected writers come back in time when their jobs' fetches are
// quick; when each writer comes back after a fetch of its own, most
// lingers end at the timer with nobody gained, and every write of the
// group paid for the wait. So a group lingers only while most recent
// lingers gathered every writer they waited for, and otherwise one group
// in probeEvery does, to notice when they would again.
const (
	maxLinger  = 2 * time.Millisecond
	probeEvery = 16
)

// grouper is the writer goroutine's record of the last cycle.
type grouper struct {
	size      int           // maxGroup, or 1 with group commit switched off
	maxLinger time.Duration // maxLinger, or 0 with the linger switched off
	last      int           // writes in the last group
	commit    time.Duration // moving average of the COMMIT statement's time
	hits      float64       // moving average of lingers that gathered every expected writer
	skipped   int           // groups that did not linger since the last probe
	timer     *time.Timer
}

// lingers reports whether a group short of its expected writers waits for
// them: while most recent lingers gathered them all, and once in
// probeEvery groups otherwise.
func (g *grouper) lingers() bool {
	if g.hits >= 0.5 {
		return true
	}
	if g.skipped++; g.skipped < probeEvery {
		return false
	}
	g.skipped = 0
	return true
}

// lingered records whether a linger gathered every expected writer, in
// a moving average of weight 1/8.
func (g *grouper) lingered(all bool) {
	v := 0.0
	if all {
		v = 1
	}
	g.hits += (v - g.hits) / 8
}

// linger is how long a group may wait for expected writers.
func (g *grouper) linger() time.Duration { return min(g.commit, g.maxLinger) }

// observe records a commit's time in the moving average (weight 1/8).
func (g *grouper) observe(d time.Duration) {
	if g.commit == 0 {
		g.commit = d
		return
	}
	g.commit += (d - g.commit) / 8
}

// writer runs the writes handed to it until Close, in groups (see Group
// commit).
func (s *Store) writer() {
	defer close(s.writerDone)
	g := &grouper{size: maxGroup, maxLinger: maxLinger, hits: 1, timer: time.NewTimer(time.Hour)}
	g.timer.Stop()
	if s.off.SQLiteGroupCommit {
		g.size = 1
	}
	if s.off.SQLiteLinger {
		g.maxLinger = 0
	}
	group := make([]*writeReq, 0, g.size)
	for {
		group = s.gather(group[:0], g)
		if len(group) == 0 {
			return // Close
		}
		g.last = len(group)
		s.runGroup(group, g)
		for _, req := range group {
			req.done <- req.err
		}
	}
}

// gather forms the next group: the writes that queued while the last group
// ran, or else the next one to arrive, then, if fewer than the writers
// expected (the last group plus those that queued behind it), those that
// arrive within the linger. It returns no writes when the
// store closes while none waits.
func (s *Store) gather(group []*writeReq, g *grouper) []*writeReq {
	take := func(req *writeReq) { s.handing.Add(-1); group = append(group, req) }
	waiting := func() bool { // takes what waits already
		for len(group) < g.size {
			select {
			case req := <-s.writeq:
				take(req)
			default:
				return len(group) > 0
			}
		}
		return true
	}
	late := 0
	if waiting() {
		late = len(group)
	} else {
		select {
		case req := <-s.writeq:
			take(req)
			waiting()
		case <-s.stopWriter:
			return group
		}
	}
	expect := min(g.last+late, g.size)
	if len(group) >= expect {
		return group
	}
	d := g.linger()
	if d <= 0 || !g.lingers() {
		return group
	}
	g.timer.Reset(d)
	defer g.timer.Stop()
	for len(group) < expect {
		select {
		case req := <-s.writeq:
			take(req)
		case <-g.timer.C:
			g.lingered(false)
			return group
		case <-s.stopWriter:
			return group
		}
	}
	g.lingered(true)
	return group
}

// write runs fn in an immediate transaction on the writer: the write lock
// is taken at BEGIN, so a read inside fn can never go stale under another
// writer (the SQLITE_BUSY trap of deferred transactions). fn's error rolls
// back.
func (s *Store) write(ctx context.Context, op string, fn func(*sqlite.Conn) error) error {
	return s.writeSized(ctx, op, 0, fn)
}

// writeSized is write for a transaction that stores about n bytes of
// results, errors or rows, so that the checkpointer keeps up with it.
func (s *Store) writeSized(ctx context.Context, op string, n int, fn func(*sqlite.Conn) error) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return wrapErr(ctx, op, s.writeTx(ctx, pagesOf(n), fn))
}

func (s *Store) writeTx(ctx context.Context, pages int, fn func(*sqlite.Conn) error) error {
	if s.closed.Load() || s.writeq == nil {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	req := &writeReq{ctx: ctx, pages: pages, fn: fn, done: make(chan error, 1)}
	s.handing.Add(1)
	select {
	case s.writeq <- req: // the writer took it (and counted it off)
		return <-req.done
	case <-ctx.Done():
		s.handing.Add(-1)
		return context.Cause(ctx)
	case <-s.stopWriter:
		s.handing.Add(-1)
		return ErrClosed
	}
}

// runGroup runs the writes of a group in one immediate transaction and
// sets each one's err. A write whose context ended while it waited is not
// run. The write lock (the only wait: the file's lock may be held by a
// host's connection) is waited for until every write of the group has
// given up, so that one write's context cannot fail the others; a write
// whose context ended during that wait is then left out. The statements
// themselves are short and run to the end, so that no write's context can
// roll back another's. Each write of a group of several runs
// in a savepoint, so its error undoes only its own changes; an error that
// made SQLite roll back the whole transaction (a full disk) fails every
// write of the group, and so does a failed commit.
func (s *Store) runGroup(group []*writeReq, g *grouper) {
	live := group[:0:0]
	for _, req := range group {
		if req.err = req.ctx.Err(); req.err == nil {
			live = append(live, req)
		}
	}
	if len(live) == 0 {
		return
	}
	conn := s.wconn
	fail := func(err error) {
		for _, req := range live {
			if req.err == nil {
				req.err = err
			}
		}
	}
	bctx, stop := groupContext(live)
	err := s.begin(bctx, conn)
	stop()
	if err != nil {
		fail(err)
		return
	}
	if len(live) > 1 {
		kept := live[:0:0]
		for _, req := range live {
			if req.err = req.ctx.Err(); req.err == nil {
				kept = append(kept, req)
			}
		}
		if live = kept; len(live) == 0 {
			s.rollback(conn)
			return
		}
	}
	pages := 0
	if len(live) == 1 {
		req := live[0]
		if req.err = req.fn(conn); req.err != nil {
			s.rollback(conn)
			return
		}
		pages = req.pages
	} else {
		for _, req := range live {
			if err := inSavepoint(conn, req); err != nil { // the transaction is lost
				s.rollback(conn)
				fail(err)
				return
			}
			if req.err == nil {
				pages += req.pages
			}
		}
	}
	start := time.Now()
	if err := sqlitex.Execute(conn, "COMMIT", nil); err != nil {
		s.rollback(conn)
		fail(err)
		return
	}
	g.observe(time.Since(start))
	s.committed(pages)
}

// groupContext returns the context a group waits for the write lock under:
// a write's own context for a group of one; for several, one that ends
// when the last of their contexts does, with its cause. stop releases it.
func groupContext(live []*writeReq) (ctx context.Context, stop func()) {
	if len(live) == 1 {
		return live[0].ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	var left atomic.Int32
	left.Store(int32(len(live)))
	stops := make([]func() bool, len(live))
	for i, req := range live {
		stops[i] = context.AfterFunc(req.ctx, func() {
			if left.Add(-1) == 0 {
				cancel(context.Cause(req.ctx))
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel(nil)
	}
}

// inSavepoint runs one write of a group in a savepoint and sets its err; a
// failed write's changes are undone. It returns an error if the
// transaction itself is lost.
func inSavepoint(conn *sqlite.Conn, req *writeReq) error {
	if err := sqlitex.Execute(conn, "SAVEPOINT batch_write", nil); err != nil {
		return err
	}
	req.err = req.fn(conn)
	if conn.AutocommitEnabled() { // SQLite rolled back the whole transaction
		return cmp.Or(req.err, errRolledBack)
	}
	if req.err != nil {
		if err := sqlitex.Execute(conn, "ROLLBACK TO batch_write", nil); err != nil {
			return err
		}
	}
	return sqlitex.Execute(conn, "RELEASE batch_write", nil)
}

// errRolledBack: SQLite rolled back a group's transaction for another
// write's error.
var errRolledBack = errors.New("batchstore: write rolled back with its group")

// begin starts the immediate transaction, its wait for the write lock cut
// short when ctx ends.
func (s *Store) begin(ctx context.Context, conn *sqlite.Conn) error {
	done := s.wdone
	stop := context.AfterFunc(ctx, func() { close(done) })
	err := sqlitex.Execute(conn, "BEGIN IMMEDIATE", nil)
	if !stop() { // the context ended during the wait: arm a new channel
		s.wdone = make(chan struct{})
		conn.SetInterrupt(s.wdone)
	}
	return err
}

// rollback ends a transaction that failed, if SQLite has not already.
func (s *Store) rollback(conn *sqlite.Conn) {
	if !conn.AutocommitEnabled() {
		_ = sqlitex.Execute(conn, "ROLLBACK", nil)
	}
}
