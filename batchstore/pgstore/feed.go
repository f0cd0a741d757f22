package pgstore

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// The change feed (see docs/design/postgres-store.md in the repository):
// every change the store commits is delivered at once to this store's
// subscribers and, batched, to the other nodes through NOTIFY on one
// channel; a listener connection per store delivers the other nodes'
// changes. A job's changes go to the other nodes only while one of them
// watches the job (a row in the watch table, migrations/017), and a queued
// job ("") only if it is still queued after notifySettle: every listener
// gets every payload, and every node's idle worker tries to claim a queued
// job, so sending every change would make a target's cost grow with the
// nodes. A node tells the others when it starts and ends a watch, so that
// a store whose listener is connected knows which jobs another node
// watches and runs no statement for a change that nobody else waits on.
// Polling stays the runner's way to be correct, so everything here may
// drop what it cannot deliver.
const (
	// notifyEvery is the least time between two NOTIFY transactions of one
	// store: the changes of that window share one. It bounds the feed's
	// cost (a notifying commit takes a database-wide lock, and every node's
	// listener gets every payload, so the work grows with the nodes) and
	// adds at most this much to a remote wake-up: the first change after a
	// quiet window goes at once, those of a busy drain wait for the window.
	// At 40 ms a draining store sends at most 25 NOTIFY a second, and a
	// remote long-poll still meets the goal of waking within 100 ms of the
	// change (TestCluster_LongPollWakesAcrossNodes and BenchmarkLongPollWake
	// measure it).
	notifyEvery = 40 * time.Millisecond
	// notifySettle is how long a queued job ("") waits before its NOTIFY,
	// so that an idle worker of this store can claim it first: a job still
	// queued then wakes an idle worker on every node, and all but one find
	// nothing, so a wake-up that is not needed costs a claim per node.
	notifySettle = 10 * time.Millisecond
	// watchLinger is how long a job's watch row outlives its last wait,
	// so that the next long-poll on the job (an agent polls one wait after
	// another) finds it and writes nothing.
	watchLinger = 5 * time.Second
	// maxPayload is below PostgreSQL's 8000-byte limit on a payload.
	maxPayload = 7900
	// maxID is the longest job id a payload carries.
	maxID = 512
	// recentKeep is how long a change that no other node watched is kept,
	// so that a watch whose news reaches this store after the change was
	// dropped still gets it. It is far longer than a notification takes.
	recentKeep = 2 * time.Second
	// watchMaxAge is the age of a watch that the sweep deletes as its
	// node's (hostSweep): no wait lasts that long.
	watchMaxAge = time.Hour
	// listenPing is how long the listener waits for a notification before
	// it pings its connection, so that a connection lost without a word
	// (a dead peer, a dropped route) is found and replaced.
	listenPing = 15 * time.Second
	// The listener's reconnect back-off: doubled from min to max, jittered.
	reconnectMin = 100 * time.Millisecond
	reconnectMax = 5 * time.Second
	// feedTimeout bounds one NOTIFY, connect or ping.
	feedTimeout = 5 * time.Second
)

// feed is a store's change feed: its subscribers, the changes waiting for
// the next NOTIFY, and the listener.
type feed struct {
	s       *Store
	channel string // the NOTIFY channel: the schema plus "_changes"
	tag     string // this store's mark on its payloads
	log     *slog.Logger

	subMu   sync.Mutex
	subs    map[int]func(string)
	nextSub int
	closed  bool

	pendMu  sync.Mutex
	pending map[string]struct{} // changed job ids; "" for a queued job
	kick    chan struct{}
	every   time.Duration // notifyEvery, or 0 with the window switched off

	// The jobs this store's runners watch: refs counts the watches of each,
	// gen numbers the rows written, rowless holds the watched jobs whose
	// row could not be written, and unwatched holds the jobs whose last
	// watch ended, with the gen of their row and the end, for the notifier
	// to delete once they have stayed unwatched for watchLinger.
	watchMu   sync.Mutex
	refs      map[string]int
	gen       int64
	rowless   map[string]bool
	unwatched map[string]endedWatch

	// What this store knows of the other nodes' watches, from their news
	// (dispatch) and the watch table read as the listener connects: while
	// known holds, a change of a job no other node watches costs no
	// statement. elsewhere maps a job to the watching nodes' tags and when
	// each was heard of; recent holds the changes dropped for want of a
	// watch, with when, for a watch heard of just after.
	peerMu    sync.Mutex
	known     bool
	elsewhere map[string]map[string]time.Time
	recent    map[string]time.Time
	pruned    time.Time // elsewhere's last pruning

	notifies atomic.Int64 // notify statements run, for tests

	ctx         context.Context // cancelled by close
	cancel      context.CancelFunc
	listenOnce  sync.Once
	wg          sync.WaitGroup
	listenerPID atomic.Uint32 // the listener's backend, for tests
}

func newFeed(s *Store) *feed {
	var b [8]byte
	crand.Read(b[:])
	ctx, cancel := context.WithCancel(context.Background())
	f := &feed{
		s:         s,
		channel:   s.opts.Schema + "_changes",
		tag:       hex.EncodeToString(b[:]),
		log:       s.opts.Logger,
		subs:      make(map[int]func(string)),
		pending:   make(map[string]struct{}),
		refs:      make(map[string]int),
		rowless:   make(map[string]bool),
		unwatched: make(map[string]endedWatch),
		elsewhere: make(map[string]map[string]time.Time),
		recent:    make(map[string]time.Time),
		kick:      make(chan struct{}, 1),
		every:     notifyEvery,
		ctx:       ctx,
		cancel:    cancel,
	}
	if s.off.PGNotifyWindow {
		f.every = 0
	}
	f.wg.Add(1)
	go f.notifier()
	return f
}

var _ batchdriver.WatchFeed = (*Store)(nil)

// Subscribe implements [batch.ChangeFeed]. fn gets the id of every job
// that changed through this store at once, and through other stores on the
// same schema as their notifications arrive; "" means a job was queued.
// The first Subscribe starts the listener, which runs until [Store.Close].
func (s *Store) Subscribe(fn func(jobID string)) (stop func()) {
	return s.feed.subscribe(fn)
}

func (f *feed) subscribe(fn func(string)) (stop func()) {
	f.subMu.Lock()
	defer f.subMu.Unlock()
	if f.closed {
		return func() {}
	}
	id := f.nextSub
	f.nextSub++
	f.subs[id] = fn
	f.listenOnce.Do(func() {
		f.wg.Add(1)
		go f.listen()
	})
	return func() {
		f.subMu.Lock()
		defer f.subMu.Unlock()
		delete(f.subs, id)
	}
}

// Watch implements [batchdriver.WatchFeed]: it records that this store
// waits on jobID, so that the other nodes send its changes, and returns
// once the record is committed. A watch that cannot be recorded leaves the
// wait to its polls.
func (s *Store) Watch(ctx context.Context, jobID string) (stop func()) {
	return s.feed.watch(ctx, jobID)
}

// endedWatch is a job whose last watch ended.
type endedWatch struct {
	gen int64 // the newest gen its row may have
	at  time.Time
}

func (f *feed) watch(ctx context.Context, id string) (stop func()) {
	f.watchMu.Lock()
	f.refs[id]++
	write := false
	var gen int64
	if !travels(id) {
		f.rowless[id] = true // its changes cannot be sent: no row
	} else if f.refs[id] == 1 {
		if _, ok := f.unwatched[id]; ok {
			delete(f.unwatched, id) // its row lingers: watched again
		} else {
			f.gen++
			gen, write = f.gen, true
		}
	}
	f.watchMu.Unlock()
	if write {
		ctx, cancel := context.WithTimeout(ctx, feedTimeout)
		if _, err := f.s.pool.Exec(ctx, f.s.q.watch, id, f.tag, gen, f.channel); err != nil {
			f.watchMu.Lock()
			f.rowless[id] = true // this watch holds id: its end leaves no row to linger
			f.watchMu.Unlock()
			if !f.s.closed.Load() {
				f.log.LogAttrs(ctx, slog.LevelDebug, "pgstore change feed: cannot watch a job; its wait polls",
					feedErrClass(err))
			}
		}
		cancel()
	}
	var once sync.Once
	return func() { once.Do(func() { f.unwatch(id) }) }
}

// unwatch ends a watch of id; the last one's row is deleted by the first
// NOTIFY statement after watchLinger.
func (f *feed) unwatch(id string) {
	f.watchMu.Lock()
	defer f.watchMu.Unlock()
	if f.refs[id]--; f.refs[id] > 0 {
		return
	}
	delete(f.refs, id)
	if f.rowless[id] {
		delete(f.rowless, id) // no row to reuse or delete
		return
	}
	f.unwatched[id] = endedWatch{gen: f.gen, at: time.Now()}
}

// deliver calls every subscriber with each id. Subscribers never block.
func (f *feed) deliver(ids ...string) {
	f.subMu.Lock()
	defer f.subMu.Unlock()
	for _, fn := range f.subs {
		for _, id := range ids {
			fn(id)
		}
	}
}

// changed reports changes the store committed: to this store's subscribers
// now, to the other nodes with the next NOTIFY.
func (f *feed) changed(ids ...string) {
	if len(ids) == 0 {
		return
	}
	f.deliver(ids...)
	f.queue(ids...)
}

// queue adds ids to the next NOTIFY.
func (f *feed) queue(ids ...string) {
	f.pendMu.Lock()
	for _, id := range ids {
		f.pending[id] = struct{}{}
	}
	f.pendMu.Unlock()
	select {
	case f.kick <- struct{}{}:
	default: // a NOTIFY is due already
	}
}

// close stops the listener and the notifier, which first sends what is
// pending, and waits for both.
func (f *feed) close() {
	f.subMu.Lock()
	f.closed = true
	f.subs = map[int]func(string){}
	f.subMu.Unlock()
	f.listenOnce.Do(func() {}) // no listener may start from now on
	f.cancel()
	f.wg.Wait()
}

// notifier sends the pending changes, at most once per f.every
// (notifyEvery), until the feed closes.
func (f *feed) notifier() {
	defer f.wg.Done()
	linger := time.NewTicker(watchLinger) // for the lingering watch rows
	defer linger.Stop()
	for {
		select {
		case <-f.ctx.Done():
			f.flush() // a last NOTIFY, on a context of its own
			return
		case <-f.kick:
		case <-linger.C:
		}
		f.pendMu.Lock()
		_, queued := f.pending[""]
		f.pendMu.Unlock()
		if queued {
			select {
			case <-f.ctx.Done():
				f.flush()
				return
			case <-time.After(notifySettle):
			}
		}
		f.flush()
		select {
		case <-f.ctx.Done():
			f.flush()
			return
		case <-time.After(f.every):
		}
	}
}

// flush sends the pending changes that another node watches, and a
// queued job, and deletes the rows of the watches that ended watchLinger
// ago (all of them when the feed closes) unless a newer watch of the job
// has written its row since: one statement, one NOTIFY per payload. A
// change that cannot be sent is dropped (the other nodes' polls find it);
// a row that cannot be deleted costs the other nodes a few notifications,
// until the sweep deletes it.
func (f *feed) flush() {
	f.pendMu.Lock()
	ids := f.pending
	if len(ids) > 0 {
		f.pending = make(map[string]struct{}, len(ids))
	} else {
		ids = nil // f.pending stays the store's
	}
	f.pendMu.Unlock()
	f.watchMu.Lock()
	var ended []string
	var gens []int64
	closing := f.ctx.Err() != nil
	for id, u := range f.unwatched {
		if closing || time.Since(u.at) >= watchLinger {
			ended, gens = append(ended, id), append(gens, u.gen)
			delete(f.unwatched, id)
		}
	}
	f.watchMu.Unlock()
	ids = f.watched(ids)
	if len(ids) == 0 && len(ended) == 0 {
		return
	}
	f.notifies.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), feedTimeout)
	defer cancel()
	var err error
	if _, queued := ids[""]; queued && len(ids) == 1 && len(ended) == 0 {
		_, err = f.s.pool.Exec(ctx, f.s.q.notifyQueued, f.channel, f.tag)
	} else {
		changed, payload := f.pack(ids)
		_, err = f.s.pool.Exec(ctx, f.s.q.notify, f.channel, changed, payload, f.tag, ended, gens)
	}
	if err != nil && !f.s.closed.Load() {
		f.log.LogAttrs(ctx, slog.LevelDebug, "pgstore change feed: notify failed; other nodes will poll",
			feedErrClass(err))
	}
}

// watched returns, of the changed ids, a queued job ("") and those that
// another node watches, while the listener knows the other nodes' watches,
// and keeps the others in f.recent; it returns them all otherwise, for the
// statement to check.
func (f *feed) watched(ids map[string]struct{}) map[string]struct{} {
	f.peerMu.Lock()
	defer f.peerMu.Unlock()
	now := time.Now()
	for id, at := range f.recent {
		if now.Sub(at) > recentKeep {
			delete(f.recent, id)
		}
	}
	if now.Sub(f.pruned) > watchLinger {
		f.pruned = now
		for id, tags := range f.elsewhere {
			for tag, at := range tags {
				if now.Sub(at) > watchMaxAge {
					delete(tags, tag)
				}
			}
			if len(tags) == 0 {
				delete(f.elsewhere, id)
			}
		}
	}
	if !f.known {
		return ids
	}
	for id := range ids {
		if id != "" && len(f.elsewhere[id]) == 0 {
			delete(ids, id)
			f.recent[id] = now
		}
	}
	return ids
}

// heard records another node's news of its watches: started (w) or ended
// (u). A job that started to be watched and changed here lately, its
// change dropped, is sent again.
func (f *feed) heard(kind, tag string, ids []string) {
	now := time.Now()
	var late []string
	f.peerMu.Lock()
	for _, id := range ids {
		tags := f.elsewhere[id]
		switch kind {
		case "w":
			if tags == nil {
				tags = make(map[string]time.Time, 1)
				f.elsewhere[id] = tags
			}
			tags[tag] = now
			if _, ok := f.recent[id]; ok {
				delete(f.recent, id)
				late = append(late, id)
			}
		case "u":
			delete(tags, tag)
			if len(tags) == 0 {
				delete(f.elsewhere, id)
			}
		}
	}
	f.peerMu.Unlock()
	if len(late) > 0 {
		f.queue(late...)
	}
}

// learn replaces what the store knows of the other nodes' watches with
// what the watch table holds, read on the listener's connection after its
// LISTEN, so that no news is missed between the two.
func (f *feed) learn(ctx context.Context, conn *pgx.Conn) error {
	rows, err := conn.Query(ctx, f.s.q.watchers, f.tag)
	if err != nil {
		return err
	}
	now := time.Now()
	elsewhere := make(map[string]map[string]time.Time)
	var id, tag string
	_, err = pgx.ForEachRow(rows, []any{&id, &tag}, func() error {
		if elsewhere[id] == nil {
			elsewhere[id] = make(map[string]time.Time, 1)
		}
		elsewhere[id][tag] = now
		return nil
	})
	if err != nil {
		return err
	}
	f.peerMu.Lock()
	f.elsewhere, f.known = elsewhere, true
	f.peerMu.Unlock()
	return nil
}

// forget marks what the store knows of the other nodes' watches as out of
// date, while its listener is away: its changes are all sent for the
// statement to check.
func (f *feed) forget() {
	f.peerMu.Lock()
	f.known = false
	f.elsewhere = make(map[string]map[string]time.Time)
	f.peerMu.Unlock()
}

// travels reports whether id can travel in a payload: not too long, valid
// UTF-8, and no newline or NUL.
func travels(id string) bool {
	return len(id) <= maxID && !strings.ContainsAny(id, "\n\x00") && utf8.ValidString(id)
}

// pack assigns job ids to NOTIFY payloads: a payload is this store's tag,
// then one id per line, an empty line for a queued job, and the ids of one
// payload, with the tag, stay below maxPayload however many of them the
// statement leaves out. An id that cannot travel (a newline, a NUL,
// invalid UTF-8, or too long) is left out here.
func (f *feed) pack(ids map[string]struct{}) (out []string, payload []int32) {
	var k int32
	size := len(f.tag)
	for id := range ids {
		if !travels(id) {
			continue
		}
		if size > len(f.tag) && size+1+len(id) > maxPayload {
			k++
			size = len(f.tag)
		}
		size += 1 + len(id)
		out, payload = append(out, id), append(payload, k)
	}
	return out, payload
}

// dispatch handles a notification from another store: its changes, or,
// after "w:" or "u:" before its tag, news of its watches.
func (f *feed) dispatch(payload string) {
	head, rest, ok := strings.Cut(payload, "\n")
	if !ok {
		return
	}
	kind, tag, news := strings.Cut(head, ":")
	if !news {
		kind, tag = "", head
	}
	if tag == f.tag { // ours: delivered when it was committed
		return
	}
	switch ids := strings.Split(rest, "\n"); kind {
	case "":
		f.deliver(ids...)
	case "w", "u":
		f.heard(kind, tag, ids)
	}
}

// listen keeps a connection that LISTENs on the channel until the feed
// closes, reconnecting with back-off. After a reconnect it wakes an idle
// worker of each subscriber, since what was sent meanwhile is lost; waits
// catch up at their next poll.
func (f *feed) listen() {
	defer f.wg.Done()
	backoff := reconnectMin
	connected := false
	for f.ctx.Err() == nil {
		conn, err := f.connect()
		if err != nil {
			if f.ctx.Err() != nil {
				return
			}
			sleep := backoff/2 + rand.N(backoff/2+1)
			f.log.LogAttrs(f.ctx, slog.LevelDebug, "pgstore change feed: cannot listen; retrying",
				feedErrClass(err), slog.Duration("retry_in", sleep))
			select {
			case <-f.ctx.Done():
				return
			case <-time.After(sleep):
			}
			backoff = min(2*backoff, reconnectMax)
			continue
		}
		backoff = reconnectMin
		if connected {
			f.log.LogAttrs(f.ctx, slog.LevelInfo, "pgstore change feed: listening again")
			f.deliver("")
		}
		connected = true
		err = f.wait(conn)
		f.forget()
		ctx, cancel := context.WithTimeout(context.Background(), feedTimeout)
		conn.Close(ctx)
		cancel()
		f.listenerPID.Store(0)
		if f.ctx.Err() == nil {
			f.log.LogAttrs(f.ctx, slog.LevelInfo, "pgstore change feed: connection lost; reconnecting",
				feedErrClass(err))
		}
	}
}

// connect opens the listener's connection, with the pool's settings but
// outside the pool, LISTENs, and reads the other nodes' watches.
func (f *feed) connect() (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(f.ctx, feedTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, f.s.pool.Config().ConnConfig)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{f.channel}.Sanitize()); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	if err := f.learn(ctx, conn); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	f.listenerPID.Store(conn.PgConn().PID())
	return conn, nil
}

// wait delivers notifications until the connection fails or the feed
// closes. A quiet connection is pinged every listenPing.
func (f *feed) wait(conn *pgx.Conn) error {
	for {
		ctx, cancel := context.WithTimeout(f.ctx, listenPing)
		n, err := conn.WaitForNotification(ctx)
		cancel()
		if n != nil {
			f.dispatch(n.Payload)
		}
		switch {
		case err == nil:
		case f.ctx.Err() != nil:
			return f.ctx.Err()
		case errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
			ctx, cancel := context.WithTimeout(f.ctx, feedTimeout)
			err := conn.Ping(ctx)
			cancel()
			if err != nil {
				return err
			}
		default:
			return err
		}
	}
}

// feedErrClass names the class of a change feed's connection error for a
// log line, never its text: a driver's error names the database's user,
// database, host and port. An outage is logged by the runner, once as it
// starts and once as it ends; the feed's retries are DEBUG lines.
func feedErrClass(err error) slog.Attr {
	if errors.Is(err, context.DeadlineExceeded) {
		return slog.String("class", "timeout")
	}
	return slog.String("class", "unavailable")
}
