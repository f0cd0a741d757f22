package pgstore

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchdriver/batchdrivertest"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// subscribe subscribes to s's feed and returns the ids it delivers.
func subscribe(t *testing.T, s *Store) <-chan string {
	t.Helper()
	got := make(chan string, 1024)
	stop := s.Subscribe(func(id string) {
		select {
		case got <- id:
		default:
			t.Errorf("feed delivery channel full")
		}
	})
	t.Cleanup(stop)
	return got
}

// pair opens two nodes on one schema; a listens, and got is what its
// feed delivers. listener is its listener backend's pid.
func pair(t *testing.T) (a, b *Store, got <-chan string, listener uint32) {
	t.Helper()
	stores := cluster(t, 2)
	a, b = stores[0], stores[1]
	got = subscribe(t, a)
	return a, b, got, listening(t, a, 0)
}

// listening waits until s's listener has a connection other than old, and
// returns its backend's pid.
func listening(t testing.TB, s *Store, old uint32) uint32 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if pid := s.feed.listenerPID.Load(); pid != 0 && pid != old {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("the listener did not connect (old pid %d)", old)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// expect waits for id on got, skipping others.
func expect(t *testing.T, got <-chan string, id string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case g := <-got:
			if g == id {
				return
			}
		case <-deadline:
			t.Fatalf("the feed did not deliver %q", id)
		}
	}
}

func create(t *testing.T, s *Store, id string) {
	t.Helper()
	ts := batchtest.Targets(id, 1)
	_, _, err := s.Create(t.Context(), batchdriver.CreateParams{ID: id, Caller: batchdriver.Caller{Name: "alice"},
		IdemKey: batchdrivertest.IdemKey(id, ts), Targets: ts, Limits: testLimits})
	if err != nil {
		t.Fatalf("Create(%s): %v", id, err)
	}
}

// A node hears another node's changes; its own changes reach it once,
// at the commit, and not again through the database.
func TestFeed_DeliversOtherNodesChanges(t *testing.T) {
	t.Parallel()
	a, b, got, _ := pair(t)
	create(t, b, "from-b")
	expect(t, got, "") // queued
	defer a.Watch(t.Context(), "from-b")()
	if err := b.Cancel(t.Context(), batchdriver.CancelParams{Caller: "alice", JobID: "from-b"}); err != nil {
		t.Fatal(err)
	}
	expect(t, got, "from-b")

	create(t, a, "from-a")
	expect(t, got, "")
	if err := a.Cancel(t.Context(), batchdriver.CancelParams{Caller: "alice", JobID: "from-a"}); err != nil {
		t.Fatal(err)
	}
	expect(t, got, "from-a")
	// b's marker: whatever a sent has reached the listeners by now.
	create(t, b, "marker")
	defer a.Watch(t.Context(), "marker")()
	if err := b.Cancel(t.Context(), batchdriver.CancelParams{Caller: "alice", JobID: "marker"}); err != nil {
		t.Fatal(err)
	}
	for g := ""; g != "marker"; {
		select {
		case g = <-got:
			if g == "from-a" {
				t.Fatal("a's own change came back through the database")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no marker")
		}
	}
}

// A node sends another a job's changes only while that node watches the
// job; an ended watch's row is deleted once it has lingered, a watch that
// starts while it lingers reuses it, and a newer watch of the same job
// keeps its row however the two interleave. b has no listener, so it
// knows nothing of a's watches and leaves the check to the statement.
func TestFeed_SendsWatchedJobsOnly(t *testing.T) {
	t.Parallel()
	a, b, got, _ := pair(t)
	cancel := func(id string) {
		t.Helper()
		if err := b.Cancel(t.Context(), batchdriver.CancelParams{Caller: "alice", JobID: id}); err != nil {
			t.Fatal(err)
		}
	}
	// until reads got until id, and fails on any of not.
	until := func(id string, not ...string) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case g := <-got:
				if slices.Contains(not, g) {
					t.Fatalf("a got %q, which it does not watch", g)
				}
				if g == id {
					return
				}
			case <-deadline:
				t.Fatalf("a did not get %q", id)
			}
		}
	}
	for _, id := range []string{"unwatched", "watched", "ended", "marker"} {
		create(t, b, id)
	}
	stop := a.Watch(t.Context(), "watched")
	cancel("unwatched")
	cancel("watched")
	until("watched", "unwatched")
	stop()
	stop() // a second call does nothing
	a.Watch(t.Context(), "ended")()
	rows := func(id string) int {
		t.Helper()
		var n int
		if err := a.pool.QueryRow(t.Context(), `SELECT count(*) FROM `+pgx.Identifier{a.opts.Schema}.Sanitize()+`.watch WHERE job_id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	eventually(t, "the ended watches' rows are deleted", func() bool { return rows("watched")+rows("ended") == 0 })
	defer a.Watch(t.Context(), "marker")()
	cancel("ended")
	cancel("marker")
	until("marker", "ended")

	gen := func(id string) (g int64) {
		t.Helper()
		if err := a.pool.QueryRow(t.Context(), `SELECT gen FROM `+pgx.Identifier{a.opts.Schema}.Sanitize()+`.watch WHERE job_id = $1`, id).Scan(&g); err != nil {
			t.Fatal(err)
		}
		return g
	}
	// A wait after a wait finds the row lingering and writes nothing.
	a.Watch(t.Context(), "again")()
	first := gen("again")
	stop = a.Watch(t.Context(), "again")
	if g := gen("again"); g != first {
		t.Fatalf("a watch while the row lingers wrote gen %d over %d", g, first)
	}
	stop()
	time.Sleep(2 * notifyEvery)
	if n := rows("again"); n != 1 {
		t.Fatalf("right after its last wait a job has %d watch rows, want 1 lingering", n)
	}
	// The delete of an ended watch spares a row that a newer watch wrote
	// after the end.
	a.feed.watchMu.Lock()
	a.feed.unwatched["again"] = endedWatch{gen: first} // lingered long enough
	a.feed.watchMu.Unlock()
	if _, err := a.pool.Exec(t.Context(), a.q.watch, "again", a.feed.tag, first+1000, a.feed.channel); err != nil {
		t.Fatal(err)
	}
	a.feed.flush()
	if g := gen("again"); g != first+1000 {
		t.Fatalf("after the delete of the ended watch the row has gen %d, want the newer %d", g, first+1000)
	}
	a.Watch(t.Context(), "again")() // the newer watch ends too
	eventually(t, "the last watch's row is deleted", func() bool { return rows("again") == 0 })

	// A watch whose row could not be written leaves none to linger: the
	// next one writes it.
	gone, cancelGone := context.WithCancel(t.Context())
	cancelGone()
	a.Watch(gone, "rowless")()
	defer a.Watch(t.Context(), "rowless")()
	if n := rows("rowless"); n != 1 {
		t.Fatalf("a watch after one that wrote no row left %d rows, want 1", n)
	}
}

// knows reports whether s has heard that another node watches id.
func knows(s *Store, id string) bool {
	s.feed.peerMu.Lock()
	defer s.feed.peerMu.Unlock()
	return len(s.feed.elsewhere[id]) > 0
}

// A node whose listener is connected hears of the other nodes' watches:
// a change that no other node watches costs it no statement, a watch
// heard of just after a change still gets that change, an ended watch is
// heard of too, and after a reconnect the node reads the watches anew.
func TestFeed_HearsOfWatches(t *testing.T) {
	t.Parallel()
	a, b, got, _ := pair(t)
	subscribe(t, b)
	bpid := listening(t, b, 0)

	before := b.feed.notifies.Load()
	b.feed.changed("nobody")
	time.Sleep(3 * notifyEvery)
	if n := b.feed.notifies.Load() - before; n != 0 {
		t.Fatalf("a change nobody else watches cost %d notify statements, want 0", n)
	}

	stop := a.Watch(t.Context(), "watched")
	eventually(t, "b hears of a's watch", func() bool { return knows(b, "watched") })
	b.feed.changed("watched")
	expect(t, got, "watched")

	// Dropped, then watched: the change is sent when the news arrives.
	b.feed.changed("late")
	eventually(t, "b drops the change nobody watches", func() bool {
		b.feed.peerMu.Lock()
		defer b.feed.peerMu.Unlock()
		_, ok := b.feed.recent["late"]
		return ok
	})
	defer a.Watch(t.Context(), "late")()
	expect(t, got, "late")

	stop()
	eventually(t, "b hears that a's watch ended", func() bool { return !knows(b, "watched") })

	// Ended watches too many for one payload are all heard of.
	var many []string
	for i := range 40 {
		id := fmt.Sprintf("%02d-%s", i, strings.Repeat("m", maxID-3))
		a.Watch(t.Context(), id)()
		many = append(many, id)
	}
	eventually(t, "b hears of the many watches", func() bool { return knows(b, many[0]) && knows(b, many[len(many)-1]) })
	a.feed.watchMu.Lock()
	for id, u := range a.feed.unwatched {
		a.feed.unwatched[id] = endedWatch{gen: u.gen} // lingered long enough
	}
	a.feed.watchMu.Unlock()
	a.feed.flush()
	eventually(t, "b hears that the many watches ended", func() bool {
		return !slices.ContainsFunc(many, func(id string) bool { return knows(b, id) })
	})

	// A watch b could not hear of, a row written while its listener is
	// away: b reads it as it reconnects.
	if _, err := a.pool.Exec(t.Context(), `INSERT INTO `+pgx.Identifier{a.opts.Schema}.Sanitize()+`.watch (job_id, tag, gen) VALUES ('unheard', 'gone-node', 1)`); err != nil {
		t.Fatal(err)
	}
	if knows(b, "unheard") {
		t.Fatal("b knows of a watch nobody told it of")
	}
	var ok bool
	if err := b.pool.QueryRow(t.Context(), `SELECT pg_terminate_backend($1)`, bpid).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", bpid, ok, err)
	}
	listening(t, b, bpid)
	if !knows(b, "unheard") {
		t.Fatal("after a reconnect b does not know the watch the table holds")
	}
}

// Watched changes too many for one payload all arrive, in several.
func TestFeed_SendsManyWatchedJobs(t *testing.T) {
	t.Parallel()
	a, b, got, _ := pair(t)
	want := map[string]bool{}
	var ids []string
	for i := range 300 {
		id := fmt.Sprintf("%03d-%s", i, strings.Repeat("j", 96))
		defer a.Watch(t.Context(), id)()
		want[id] = true
		ids = append(ids, id, "unwatched-"+id)
	}
	b.feed.changed(ids...)
	deadline := time.After(10 * time.Second)
	for len(want) > 0 {
		select {
		case g := <-got:
			if strings.HasPrefix(g, "unwatched-") {
				t.Fatalf("a got %q, which it does not watch", g)
			}
			delete(want, g)
		case <-deadline:
			t.Fatalf("%d watched changes did not arrive", len(want))
		}
	}
}

// The sweep deletes the watches of a node that died, once no wait can
// still be under way.
func TestFeed_SweepDeletesStaleWatches(t *testing.T) {
	t.Parallel()
	s := cluster(t, 1)[0]
	q := `INSERT INTO ` + pgx.Identifier{s.opts.Schema}.Sanitize() + `.watch (job_id, tag, gen, since) VALUES ($1, 'dead', 1, now() - $2::interval)`
	for id, age := range map[string]string{"stale": "2 hours", "recent": "1 minute"} {
		if _, err := s.pool.Exec(t.Context(), q, id, age); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Sweep(t.Context(), batchdriver.SweepParams{TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	var left []string
	rows, err := s.pool.Query(t.Context(), `SELECT job_id FROM `+pgx.Identifier{s.opts.Schema}.Sanitize()+`.watch ORDER BY job_id`)
	if err != nil {
		t.Fatal(err)
	}
	if left, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(left, []string{"recent"}) {
		t.Fatalf("after the sweep the watches are %q, want [recent]", left)
	}
}

// after the listener's backend is terminated, the listener
// reconnects, wakes its subscribers once (what was sent meanwhile is
// lost), and notifications resume.
func TestFeed_ReconnectsAfterTerminate(t *testing.T) {
	t.Parallel()
	a, b, got, pid := pair(t)
	for round := range 3 {
		var ok bool
		if err := b.pool.QueryRow(t.Context(), `SELECT pg_terminate_backend($1)`, pid).Scan(&ok); err != nil || !ok {
			t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
		}
		pid = listening(t, a, pid)
		expect(t, got, "") // the catch-up wake-up
		id := fmt.Sprintf("after-%d", round)
		create(t, b, id)
		defer a.Watch(t.Context(), id)()
		if err := b.Cancel(t.Context(), batchdriver.CancelParams{Caller: "alice", JobID: id}); err != nil {
			t.Fatal(err)
		}
		expect(t, got, id)
	}
}

// A runner's wait does not hang while its node's listener is down: its
// poll finds the other node's progress, and once the listener is back the
// feed wakes it again.
func TestFeed_WaitSurvivesListenerLoss(t *testing.T) {
	t.Parallel()
	stores := cluster(t, 2)
	f := batchtest.NewBlockingFetcher()
	t.Cleanup(func() {
		for range 3 {
			f.Release()
		}
	})
	const poll = 300 * time.Millisecond
	a := node(t, acceptOnly{stores[0]}, batch.Config{PollInterval: batch.Duration(poll)})
	node(t, stores[1], batch.Config{Fetch: f.Fetch})
	caller := batchdriver.Caller{Name: "alice"}
	job, _, err := a.Submit(t.Context(), caller, batchtest.Targets("lost", 3))
	if err != nil {
		t.Fatal(err)
	}
	<-f.Started
	pid := listening(t, stores[0], 0)
	for done := range 2 {
		if done == 0 { // the first store happens while a's listener is down
			if _, err := stores[1].pool.Exec(t.Context(), `SELECT pg_terminate_backend($1)`, pid); err != nil {
				t.Fatal(err)
			}
		}
		waited := make(chan batch.JobInfo, 1)
		start := time.Now()
		go func() {
			info, err := a.Wait(context.Background(), caller, job.ID, batch.WaitOptions{Since: &done, Timeout: 30 * time.Second})
			if err != nil {
				t.Error(err)
			}
			waited <- info
		}()
		time.Sleep(20 * time.Millisecond)
		f.Release()
		select {
		case info := <-waited:
			if info.TargetsDone != done+1 {
				t.Fatalf("wait answered %d done, want %d", info.TargetsDone, done+1)
			}
			t.Logf("wait %d returned after %v", done, time.Since(start))
		case <-time.After(10 * time.Second):
			t.Fatalf("wait %d hung", done)
		}
		<-f.Started
		if done == 0 {
			listening(t, stores[0], pid)
		}
	}
}

// The payloads stay under PostgreSQL's limit, carry the store's tag first,
// and leave out ids that cannot travel.
func TestFeed_Pack(t *testing.T) {
	t.Parallel()
	f := &feed{tag: "0123456789abcdef"}
	ids := map[string]struct{}{"": {}, "bad\nid": {}, "nul\x00": {}, "\xff": {}, strings.Repeat("x", 600): {}}
	for i := range 1000 {
		ids[fmt.Sprintf("%08d-aaaa-bbbb-cccc-dddddddddddd", i)] = struct{}{}
	}
	got := map[string]bool{}
	list, payload := f.pack(ids)
	if len(list) != len(payload) {
		t.Fatalf("%d ids in %d payload numbers", len(list), len(payload))
	}
	sizes := map[int32]int{}
	for i, id := range list {
		if got[id] {
			t.Errorf("id %q packed twice", id)
		}
		got[id] = true
		sizes[payload[i]] += 1 + len(id)
	}
	if len(sizes) < 2 {
		t.Fatalf("%d payloads for 1000 ids, want several", len(sizes))
	}
	for k, n := range sizes {
		if n += len(f.tag); n > maxPayload {
			t.Errorf("payload %d of %d bytes", k, n)
		}
	}
	if len(got) != 1001 || !got[""] || got["bad\nid"] || got["nul\x00"] || got["\xff"] {
		t.Errorf("%d ids packed (queued %v), want the 1000 and the queued mark", len(got), got[""])
	}
}

// feedGoroutines counts goroutines running the feed or the pool.
func feedGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "pgstore.(*feed)") || strings.Contains(g, "pgxpool.") || strings.Contains(g, "puddle") {
			n++
		}
	}
	return n
}

// Close leaves no goroutine behind: not the listener, not the notifier,
// not the pool's. Not parallel: it counts the goroutines of the process.
func TestStore_CloseLeavesNoGoroutine(t *testing.T) {
	schema := newSchema(t)
	s, err := Open(t.Context(), pgURL(t), Config{Schema: schema, MaxConns: testMaxConns})
	if err != nil {
		t.Fatal(err)
	}
	got := subscribe(t, s)
	listening(t, s, 0)
	create(t, s, "job")
	expect(t, got, "")
	if feedGoroutines() == 0 {
		t.Fatal("no feed goroutines while open: the check below would prove nothing")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for feedGoroutines() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := feedGoroutines(); n != 0 {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d feed or pool goroutines after Close:\n%s", n, buf[:runtime.Stack(buf, true)])
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if stop := s.Subscribe(func(string) {}); stop == nil {
		t.Fatal("Subscribe after Close returned nil")
	}
}

// eventually polls cond for up to 3 times watchLinger.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(3 * watchLinger); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
	}
}
