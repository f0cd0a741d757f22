package pgstore

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

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
	stores := cluster(t, 2)
	a, b := stores[0], stores[1]
	got := subscribe(t, a)
	listening(t, a, 0)
	create(t, b, "from-b")
	expect(t, got, "") // queued
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

// after the listener's backend is terminated, the listener
// reconnects, wakes its subscribers once (what was sent meanwhile is
// lost), and notifications resume.
func TestFeed_ReconnectsAfterTerminate(t *testing.T) {
	t.Parallel()
	stores := cluster(t, 2)
	a, b := stores[0], stores[1]
	got := subscribe(t, a)
	pid := listening(t, a, 0)
	for round := range 3 {
		var ok bool
		if err := b.pool.QueryRow(t.Context(), `SELECT pg_terminate_backend($1)`, pid).Scan(&ok); err != nil || !ok {
			t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
		}
		pid = listening(t, a, pid)
		expect(t, got, "") // the catch-up wake-up
		id := fmt.Sprintf("after-%d", round)
		create(t, b, id)
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
func TestFeed_Payloads(t *testing.T) {
	t.Parallel()
	f := &feed{tag: "0123456789abcdef"}
	ids := map[string]struct{}{"": {}, "bad\nid": {}, "nul\x00": {}, "\xff": {}, strings.Repeat("x", 600): {}}
	for i := range 1000 {
		ids[fmt.Sprintf("%08d-aaaa-bbbb-cccc-dddddddddddd", i)] = struct{}{}
	}
	got := map[string]bool{}
	ps := f.payloads(ids)
	if len(ps) < 2 {
		t.Fatalf("%d payloads for 1000 ids, want several", len(ps))
	}
	for _, p := range ps {
		if len(p) > maxPayload {
			t.Errorf("payload of %d bytes", len(p))
		}
		tag, rest, _ := strings.Cut(p, "\n")
		if tag != f.tag {
			t.Errorf("payload starts with %q, want the tag", tag)
		}
		for _, id := range strings.Split(rest, "\n") {
			got[id] = true
		}
	}
	if len(got) != 1001 || !got[""] || got["bad"] || got["nul\x00"] {
		t.Errorf("%d ids delivered (queued %v), want the 1000 and the queued mark", len(got), got[""])
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
