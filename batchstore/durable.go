package batchstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"
)

// Pipelined durability (the package documentation, "Group commit", says
// why it is what FULL means and why it is safe). Under SyncFull with a
// file, the writer's connection commits under synchronous=NORMAL, so a
// COMMIT writes its WAL frames and returns without waiting for the disk;
// the syncer goroutine then fsyncs the -wal file and only after that
// answers the writers of every group committed before the fsync began.
// While one fsync runs the writer commits the next groups, and the next
// fsync covers them all. Reads on other connections see a commit as soon
// as its COMMIT has run, so a read waits, before it answers, until every
// commit it may have seen is synced.
//
// Sequence numbers: visible counts the COMMIT statements begun (a reader's
// snapshot can hold none beyond it), committed the ones returned (their
// frames are written), synced the commits on stable storage. Each is only
// ever raised.
type durability struct {
	wal     *os.File // the -wal file, opened by the store
	visible atomic.Uint64
	commit  atomic.Uint64
	synced  atomic.Uint64
	syncs   atomic.Int64 // fsyncs run, for tests and benchmarks
	waiting atomic.Int64 // reads waiting for a sync, for tests

	// hook, if set (tests), runs in place of the fsync.
	hook atomic.Pointer[func(*os.File) error]

	mu      sync.Mutex
	pending []pendingGroup // groups committed, waiting for their sync
	err     error          // a failed sync: sticky, every later write and read fails with it
	changed chan struct{}  // closed and replaced when synced or err changes
	wake    chan struct{}  // (1) pending has groups
	stop    chan struct{}  // closed once the writer has ended
	done    chan struct{}  // closed when the syncer has ended
}

// pendingGroup is a group's writes and the commit they need synced.
type pendingGroup struct {
	need uint64
	reqs []*writeReq
}

// startDurability sets up pipelined durability on the writer's connection,
// if the store runs SyncFull on a file: it opens the -wal file, syncs its
// directory (SQLite created the file, and under NORMAL it may not sync the
// directory entry before our first fsync does not cover it), switches the
// writer's connection to synchronous=NORMAL and starts the syncer. Without
// a file (an in-memory database) the store keeps SQLite's FULL.
func (s *Store) startDurability(conn *sqlite.Conn) error {
	if s.opts.Synchronous != SyncFull || s.opts.inlineSync {
		return nil
	}
	name, err := connFile(conn)
	if err != nil || name == "" {
		return err
	}
	mode, err := queryText(conn, "PRAGMA journal_mode")
	if err != nil {
		return err
	}
	if mode != "wal" {
		return nil
	}
	wal, err := os.OpenFile(name+"-wal", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open the WAL to sync it: %w", err)
	}
	if err := syncDir(filepath.Dir(name)); err != nil {
		wal.Close()
		return fmt.Errorf("sync the WAL's directory: %w", err)
	}
	if err := sqlitex.ExecuteTransient(conn, "PRAGMA synchronous = NORMAL", nil); err != nil {
		wal.Close()
		return err
	}
	d := &durability{
		wal:     wal,
		changed: make(chan struct{}),
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	s.dur = d
	go d.syncer()
	return nil
}

// stopDurability answers the writes still waiting for a sync (after one
// last fsync), ends the syncer and gives the writer's connection the
// store's synchronous setting back. It runs once the writer has ended.
func (s *Store) stopDurability() {
	d := s.dur
	if d == nil {
		return
	}
	close(d.stop)
	<-d.done
	_ = d.wal.Close()
	_ = sqlitex.ExecuteTransient(s.wconn, "PRAGMA synchronous = "+string(s.opts.Synchronous), nil)
}

// connFile returns the file of conn's main database, or "".
func connFile(conn *sqlite.Conn) (string, error) {
	var name string
	err := sqlitex.ExecuteTransient(conn, "PRAGMA database_list", &sqlitex.ExecOptions{
		ResultFunc: func(stmt *sqlite.Stmt) error {
			if stmt.ColumnText(1) == "main" {
				name = stmt.ColumnText(2)
			}
			return nil
		},
	})
	return name, err
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// beginCommit is called by the writer just before a COMMIT statement: from
// here on a reader may see the commit. It returns the commit's number.
func (d *durability) beginCommit() uint64 { return d.visible.Add(1) }

// endCommit is called by the writer once COMMIT has returned, whatever its
// outcome: the commit's frames, if any, are written.
func (d *durability) endCommit(n uint64) { d.commit.Store(n) }

// failed returns the sticky sync error, if any.
func (d *durability) failed() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// answer answers a group's writes once every commit up to the last one
// begun is synced: at once if it is already (or the group committed
// nothing new and read nothing unsynced), or by the syncer. The writer
// calls it after the group ran, so need covers the group's own commit and
// every commit whose effects its writes may have read.
func (d *durability) answer(group []*writeReq) {
	need := d.visible.Load()
	if d.synced.Load() >= need {
		for _, req := range group {
			req.done <- req.err
		}
		return
	}
	d.mu.Lock()
	if err := d.err; err != nil {
		d.mu.Unlock()
		for _, req := range group {
			req.done <- stickyErr(req.err, err)
		}
		return
	}
	d.pending = append(d.pending, pendingGroup{need: need, reqs: append([]*writeReq(nil), group...)})
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// stickyErr is a write's answer once a sync failed: its own error if it
// had one, else the sync's.
func stickyErr(own, sync error) error {
	if own != nil {
		return own
	}
	return sync
}

// syncer fsyncs the WAL whenever groups wait and answers every group whose
// commits the fsync covers: those that had returned before it began.
func (d *durability) syncer() {
	defer close(d.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var last int           // writes the last fsync answered, and those that waited behind it
	var took time.Duration // moving average of the fsync's time
	for {
		stopping := false
		select {
		case <-d.wake:
		case <-d.stop:
			stopping = true // the writer has ended: one last round
		}
		if !stopping && last > 1 && d.waitingWrites() < last {
			// As the writer does for its groups: the writers the last
			// fsync released come back one by one, and an fsync for the
			// first would split them; wait for the rest (the last crowd:
			// those it answered and those that queued while it ran), at
			// most one fsync's time.
			timer.Reset(min(took, maxLinger))
		wait:
			for d.waitingWrites() < last {
				select {
				case <-d.wake:
				case <-timer.C:
					break wait
				case <-d.stop:
					stopping = true
					break wait
				}
			}
			timer.Stop()
		}
		d.mu.Lock()
		batch := d.pending
		d.pending = nil
		d.mu.Unlock()
		if len(batch) > 0 {
			start := time.Now()
			last = d.syncAndAnswer(batch) + d.waitingWrites()
			if el := time.Since(start); took == 0 {
				took = el
			} else {
				took += (el - took) / 8
			}
		}
		if stopping {
			return
		}
	}
}

// waitingWrites counts the writes of the pending groups.
func (d *durability) waitingWrites() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, g := range d.pending {
		n += len(g.reqs)
	}
	return n
}

// syncAndAnswer runs one fsync for batch and answers it. A group whose
// commit returned after the fsync began waits for the next round.
func (d *durability) syncAndAnswer(batch []pendingGroup) (answered int) {
	upTo := d.commit.Load() // every commit ≤ upTo has written its frames
	err := d.failed()
	if err == nil && d.synced.Load() < upTo {
		d.syncs.Add(1)
		if hook := d.hook.Load(); hook != nil {
			err = (*hook)(d.wal)
		} else {
			err = d.wal.Sync()
		}
		d.mu.Lock()
		if err != nil {
			// After a failed fsync the kernel may have dropped the dirty
			// pages it could not write: no later fsync can vouch for them,
			// so the store stops answering "stored" until it is reopened.
			d.err = fmt.Errorf("%w: sync the WAL: %w", ErrSync, err)
			err = d.err
		} else if d.synced.Load() < upTo {
			d.synced.Store(upTo)
		}
		close(d.changed)
		d.changed = make(chan struct{})
		d.mu.Unlock()
	}
	var later []pendingGroup
	for _, g := range batch {
		switch {
		case err != nil:
			for _, req := range g.reqs {
				req.done <- stickyErr(req.err, err)
			}
		case g.need <= d.synced.Load():
			for _, req := range g.reqs {
				req.done <- req.err
			}
			answered += len(g.reqs)
		default:
			later = append(later, g)
		}
	}
	if len(later) > 0 {
		d.mu.Lock()
		d.pending = append(later, d.pending...)
		d.mu.Unlock()
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
	return answered
}

// ErrSync: syncing the WAL failed, so the store cannot promise that a
// commit is on stable storage. Every write and read fails with it until
// the store is closed and opened again (which recovers from the file).
var ErrSync = errors.New("batchstore: WAL sync failed")

// awaitSynced waits until every commit a read that has just ended may have
// seen is synced: a reader is never shown what a power loss could undo.
func (d *durability) awaitSynced(ctx context.Context) error {
	need := d.visible.Load()
	for {
		if d.synced.Load() >= need {
			return nil
		}
		d.mu.Lock()
		err, ch := d.err, d.changed
		synced := d.synced.Load()
		d.mu.Unlock()
		if err != nil {
			return err
		}
		if synced >= need {
			return nil
		}
		d.waiting.Add(1)
		select {
		case <-ch:
			d.waiting.Add(-1)
		case <-ctx.Done():
			d.waiting.Add(-1)
			return context.Cause(ctx)
		}
	}
}
