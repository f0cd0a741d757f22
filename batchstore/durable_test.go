package batchstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
)

// syncGate replaces the store's fsync of the WAL: each call reports on
// entered, then waits until release is closed and returns err.
type syncGate struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
	err     error
}

// open lets every held and later fsync through.
func (g *syncGate) open() { g.once.Do(func() { close(g.release) }) }

func gateSyncs(s *Store, err error) *syncGate {
	g := &syncGate{entered: make(chan struct{}, 64), release: make(chan struct{}), err: err}
	hook := func(f *os.File) error {
		g.entered <- struct{}{}
		<-g.release
		if g.err != nil {
			return g.err
		}
		return f.Sync()
	}
	s.dur.hook.Store(&hook)
	return g
}

// claimedJobs creates and claims n jobs of targets targets each.
func claimedJobs(t *testing.T, s *Store, prefix string, n, targets int) []batch.Claimed {
	t.Helper()
	ctx := t.Context()
	for j := range n {
		if _, _, err := s.Create(ctx, newJob(fmt.Sprintf("%s-%d", prefix, j), "alice", targets, time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	var held []batch.Claimed
	for range n {
		c, ok, err := s.Claim(ctx, batch.ClaimParams{Runner: "r"})
		if err != nil || !ok {
			t.Fatalf("claim: %v, %v", ok, err)
		}
		held = append(held, c)
	}
	return held
}

func finishAsync(ctx context.Context, s *Store, c batch.Claimed, idx int) chan error {
	ch := make(chan error, 1)
	go func() {
		_, err := s.FinishTarget(ctx, batch.FinishParams{JobID: c.Job.ID, Runner: "r",
			Target: batch.TargetFinish{Idx: idx, Status: batch.TargetDone, Outcome: batch.OutcomeOK, Result: groupResult(idx, idx)}})
		ch <- err
	}()
	return ch
}

func answered(ch chan error) bool {
	select {
	case err := <-ch:
		ch <- err
		return true
	default:
		return false
	}
}

// Under FULL the writer commits without waiting for the disk and the
// store fsyncs the WAL itself: while that fsync is held up, a write whose
// commit it covers, and one committed behind it, must both stay
// unanswered, and so must a read that saw them; once the fsync returns
// they are answered, stored. A store that answered at COMMIT (or before
// the fsync that covers the commit) fails this: the writer commits the
// second write only after it has dealt with the first, and the syncer
// enters the gate only after it has taken the first.
func TestStore_FullAnswersAfterSync(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "sync.db"), Options{Synchronous: SyncFull})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.dur == nil {
		t.Fatal("FULL on a file runs without the store's own WAL sync")
	}
	held := claimedJobs(t, s, "gate", 2, 3)
	gate := gateSyncs(s, nil)
	defer gate.open() // before Close, which waits for the syncer
	base := s.dur.commit.Load()

	first := finishAsync(t.Context(), s, held[0], held[0].Next)
	<-gate.entered // its commit is written; the fsync that covers it is held
	second := finishAsync(t.Context(), s, held[1], held[1].Next)
	for s.dur.commit.Load() < base+2 { // the second commits behind the held fsync
		runtime.Gosched()
	}
	read := make(chan error, 1)
	go func() {
		_, trs, err := s.Get(t.Context(), batch.GetParams{Caller: "alice", JobID: held[0].Job.ID})
		if err == nil && trs[held[0].Next].Status != batch.TargetDone {
			err = fmt.Errorf("target %d is %s after the sync", held[0].Next, trs[held[0].Next].Status)
		}
		read <- err
	}()
	for s.dur.waiting.Load() == 0 { // the read has seen the commits and waits
		if answered(read) {
			t.Fatalf("a read answered while the fsync of what it saw was held: %v", <-read)
		}
		runtime.Gosched()
	}
	if answered(first) || answered(second) {
		t.Fatal("a write was answered before the fsync of its commit returned")
	}
	gate.open()
	for name, ch := range map[string]chan error{"first": first, "second": second, "read": read} {
		if err := <-ch; err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if n := s.dur.syncs.Load(); n < 1 {
		t.Errorf("%d syncs", n)
	}
}

// A failed fsync fails the writes it was to vouch for, and every write and
// read after it: the kernel may have dropped the pages it could not write,
// so no later fsync can vouch for them.
func TestStore_FullSyncFailureSticks(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "syncfail.db"), Options{Synchronous: SyncFull})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	held := claimedJobs(t, s, "fail", 2, 3)
	gate := gateSyncs(s, errors.New("EIO"))
	gate.open()
	if err := <-finishAsync(t.Context(), s, held[0], held[0].Next); !errors.Is(err, ErrSync) {
		t.Fatalf("write whose fsync failed = %v, want ErrSync", err)
	}
	if err := <-finishAsync(t.Context(), s, held[1], held[1].Next); !errors.Is(err, ErrSync) {
		t.Errorf("write after a failed fsync = %v, want ErrSync", err)
	}
	if _, _, err := s.Get(t.Context(), batch.GetParams{Caller: "alice", JobID: held[0].Job.ID}); !errors.Is(err, ErrSync) {
		t.Errorf("read after a failed fsync = %v, want ErrSync", err)
	}
}
