package batchstore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"zombiezen.com/go/sqlite"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// A poll's point read sees every write that returned before it, whichever
// connection serves it: the quick readers (pools of 5 and more) hold no
// snapshot between reads, and pools too small for them read on the pool.
// Readers beyond the quick ones fall back to the pool.
func TestStore_PointReadsSeeEveryWrite(t *testing.T) {
	t.Parallel()
	for _, size := range []int{2, 4, 5, 8} {
		t.Run(fmt.Sprintf("pool=%d", size), func(t *testing.T) {
			t.Parallel()
			s := openTest(t, Config{PoolSize: size})
			ctx := t.Context()
			const n = 24
			if _, _, err := s.Create(ctx, newJob("poll", "alice", n, time.Now())); err != nil {
				t.Fatal(err)
			}
			c, ok, err := s.Claim(ctx, batchdriver.ClaimParams{Runner: "r"})
			if err != nil || !ok {
				t.Fatalf("claim: %v, %v", ok, err)
			}
			// Pollers beside the writes, more than there are readers.
			stop := make(chan struct{})
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for range 8 {
				wg.Go(func() {
					last := 0
					for {
						select {
						case <-stop:
							return
						default:
						}
						job, _, err := s.Get(ctx, batchdriver.GetParams{Caller: "alice", JobID: "poll", JobOnly: true})
						if err != nil {
							errs <- err
							return
						}
						if job.TargetsDone < last {
							errs <- fmt.Errorf("progress went back from %d to %d", last, job.TargetsDone)
							return
						}
						last = job.TargetsDone
					}
				})
			}
			next := c.Next
			for done := 1; next >= 0; done++ {
				st, err := s.FinishTarget(ctx, batchdriver.FinishParams{JobID: "poll", Runner: "r",
					Target: batchdriver.TargetFinish{Idx: next, Status: batchdriver.TargetDone, Outcome: batchdriver.OutcomeOK, Result: []byte("x")}})
				if err != nil {
					t.Fatal(err)
				}
				job, _, err := s.Get(ctx, batchdriver.GetParams{Caller: "alice", JobID: "poll", JobOnly: true})
				if err != nil {
					t.Fatal(err)
				}
				if job.TargetsDone != done {
					t.Fatalf("after %d finished targets a point read says %d", done, job.TargetsDone)
				}
				next = st.Next
			}
			close(stop)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			job, _, err := s.Get(ctx, batchdriver.GetParams{Caller: "alice", JobID: "poll", JobOnly: true})
			if err != nil || job.Status != batchdriver.JobDone {
				t.Fatalf("finished job reads %s, %v", job.Status, err)
			}
			if _, _, err := s.Get(ctx, batchdriver.GetParams{Caller: "bob", JobID: "poll", JobOnly: true}); !errors.Is(err, batchdriver.ErrNotFound) {
				t.Fatalf("another caller's point read: %v, want ErrNotFound", err)
			}
		})
	}
}

// Close while point reads run: each read answers or fails with ErrClosed,
// Close returns (it waits for the reads in flight and gives the quick
// readers back to the pool before closing it), and reads after it fail
// with ErrClosed.
func TestStore_CloseDuringPointReads(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "close.db"), Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Create(t.Context(), newJob("j", "alice", 2, time.Now())); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	served := 0
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			for {
				job, _, err := s.Get(context.Background(), batchdriver.GetParams{Caller: "alice", JobID: "j", JobOnly: true})
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil || job.ID != "j" {
					errs <- fmt.Errorf("point read during Close: %q, %v", job.ID, err)
					return
				}
				mu.Lock()
				served++
				mu.Unlock()
			}
		})
	}
	for {
		mu.Lock()
		n := served
		mu.Unlock()
		if n >= 200 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if _, _, err := s.Get(context.Background(), batchdriver.GetParams{Caller: "alice", JobID: "j", JobOnly: true}); !errors.Is(err, ErrClosed) {
		t.Fatalf("point read after Close: %v, want ErrClosed", err)
	}
}

// holdReaders takes every reader connection of s, the pool's and the quick
// readers, and returns them with a function that gives them back.
func holdReaders(tb testing.TB, s *Store) ([]*sqlite.Conn, func()) {
	tb.Helper()
	var pooled, quick []*sqlite.Conn
	for range s.opts.PoolSize - 1 - s.nquick { // the writer is not in the pool
		conn, err := s.take(tb.Context())
		if err != nil {
			tb.Fatal(err)
		}
		pooled = append(pooled, conn)
	}
	for range s.nquick {
		quick = append(quick, <-s.quick)
	}
	return append(pooled, quick...), func() {
		for _, c := range pooled {
			s.pool.Put(c)
		}
		for _, c := range quick {
			s.quick <- c
		}
	}
}
