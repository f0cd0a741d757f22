package batchhttp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// poll is one long-poll served in the background.
type poll struct {
	done    chan struct{}
	req     *http.Request
	rec     *httptest.ResponseRecorder
	elapsed time.Duration
}

// startPoll serves GET target as alice in the background, with ctx as the
// request's context.
func startPoll(ctx context.Context, h http.Handler, target string) *poll {
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	req.Header.Set("Authorization", "Bearer "+keyAlice)
	p := &poll{done: make(chan struct{}), req: req, rec: httptest.NewRecorder()}
	go func() {
		defer close(p.done)
		start := time.Now()
		h.ServeHTTP(p.rec, req)
		p.elapsed = time.Since(start)
	}()
	return p
}

// answer waits for the poll's answer, at most limit.
func (p *poll) answer(t *testing.T, limit time.Duration) StatusResponse {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(limit):
		t.Fatalf("no answer within %s", limit)
	}
	checkRecorded(t, p.req, p.rec)
	if p.rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", p.rec.Code, p.rec.Body)
	}
	var st StatusResponse
	decodeJSON(t, p.rec.Body.Bytes(), &st)
	return st
}

// pending fails the test if the poll answers within d.
func (p *poll) pending(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-p.done:
		t.Fatalf("answered early (after %s): %d %s", p.elapsed, p.rec.Code, p.rec.Body)
	case <-time.After(d):
	}
}

func TestHandler_LongPoll(t *testing.T) {
	t.Parallel()

	// running submits a job of n targets as alice and waits until its first
	// fetch has started.
	running := func(t *testing.T, b *testBundle, f *batchtest.BlockingFetcher, n int) string {
		t.Helper()
		id := b.submit(t, keyAlice, batchtest.Targets("poll", n), http.StatusAccepted).JobID
		<-f.Started
		return id
	}

	t.Run("ClientGone", func(t *testing.T) {
		t.Parallel()
		f := batchtest.NewBlockingFetcher()
		b := setup(t, setupOpts{fetch: f.Fetch})
		id := running(t, b, f, 2)
		ctx, cancel := context.WithCancel(t.Context())
		p := startPoll(ctx, b.handler, "/v1/batch/"+id+"?wait=60s")
		p.pending(t, 100*time.Millisecond)
		cancel()
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			t.Fatal("the long-poll went on after the client went away")
		}
		obs := b.obs.all()
		if last := obs[len(obs)-1]; last.route != RouteJob || last.status != statusClientGone {
			t.Fatalf("observed %+v, want %s with %d", last, RouteJob, statusClientGone)
		}
	})

	t.Run("Deadline", func(t *testing.T) {
		t.Parallel()
		f := batchtest.NewBlockingFetcher()
		b := setup(t, setupOpts{fetch: f.Fetch})
		id := running(t, b, f, 2)
		p := startPoll(t.Context(), b.handler, "/v1/batch/"+id+"?wait=300ms&since=0")
		st := p.answer(t, 10*time.Second)
		if p.elapsed < 300*time.Millisecond || st.Status != batch.JobRunning || st.TargetsDone != 0 {
			t.Fatalf("answered after %s with %s, %d done; want the running job at the 300ms deadline", p.elapsed, st.Status, st.TargetsDone)
		}
	})

	t.Run("Finished", func(t *testing.T) {
		t.Parallel()
		f := batchtest.NewBlockingFetcher()
		b := setup(t, setupOpts{fetch: f.Fetch})
		id := running(t, b, f, 2)
		p := startPoll(t.Context(), b.handler, "/v1/batch/"+id+"?wait=30&results=1")
		f.Release()
		<-f.Started
		p.pending(t, 100*time.Millisecond) // a target finished, but no since: wait for the job
		f.Release()
		st := p.answer(t, 10*time.Second)
		if st.Status != batch.JobDone || st.Targets[1].Result == nil {
			t.Fatalf("answered %+v, want the done job with results", st)
		}
	})

	t.Run("HoldsNoStoreCall", func(t *testing.T) {
		t.Parallel()
		f := batchtest.NewBlockingFetcher()
		probe := &probeStore{Store: batchtest.NewStore()}
		b := setup(t, setupOpts{fetch: f.Fetch, store: probe})
		id := running(t, b, f, 2)
		before := probe.stats()
		p := startPoll(t.Context(), b.handler, "/v1/batch/"+id+"?wait=2s&since=0")
		p.answer(t, 10*time.Second)
		after := probe.stats()
		if reads := after.reads - before.reads; reads < 3 {
			t.Errorf("%d store reads during a 2s wait, want it to re-read the store", reads)
		}
		// A call held for the wait would last about 2s; the margin allows
		// for a loaded machine.
		if after.longest > time.Second {
			t.Errorf("a store call lasted %s during the wait, want none held", after.longest)
		}
	})

	t.Run("OtherRunner", func(t *testing.T) {
		t.Parallel()
		// A drains; B only serves HTTP. B is never started, so it never
		// claims a job: its fetcher fails the test if ever called.
		f := batchtest.NewBlockingFetcher()
		a := setup(t, setupOpts{fetch: f.Fetch})
		b := setup(t, setupOpts{store: a.store, noStart: true, config: func(c *batch.Config) {
			c.PollInterval = batch.Duration(20 * time.Millisecond)
			c.Fetch = func(context.Context, batch.Caller, batch.Target) (batch.Result, error) {
				t.Error("runner B fetched a target")
				return batch.Result{}, nil
			}
		}})
		id := running(t, a, f, 2)
		p := startPoll(t.Context(), b.handler, "/v1/batch/"+id+"?wait=30s&since=0")
		p.pending(t, 100*time.Millisecond)
		released := time.Now()
		f.Release()
		st := p.answer(t, 10*time.Second)
		if st.TargetsDone != 1 || time.Since(released) > 5*time.Second {
			t.Fatalf("B answered %d done after %s, want 1 soon after A stored a target", st.TargetsDone, time.Since(released))
		}
	})

	t.Run("SinceDiffers", func(t *testing.T) {
		t.Parallel()
		f := batchtest.NewBlockingFetcher()
		b := setup(t, setupOpts{fetch: f.Fetch})
		id := running(t, b, f, 2)
		p := startPoll(t.Context(), b.handler, "/v1/batch/"+id+"?wait=30s&since=5")
		if st := p.answer(t, 5*time.Second); st.TargetsDone != 0 {
			t.Fatalf("answered %d done, want 0 at once", st.TargetsDone)
		}
	})

	t.Run("Transition", func(t *testing.T) {
		t.Parallel()
		f := batchtest.NewBlockingFetcher()
		b := setup(t, setupOpts{fetch: f.Fetch})
		id := running(t, b, f, 3)
		p := startPoll(t.Context(), b.handler, "/v1/batch/"+id+"?wait=30s&since=0")
		p.pending(t, 100*time.Millisecond)
		released := time.Now()
		f.Release()
		st := p.answer(t, 10*time.Second)
		if st.TargetsDone != 1 || st.Status != batch.JobRunning || time.Since(released) > 5*time.Second {
			t.Fatalf("answered %s with %d done after %s; want running, 1 done, promptly", st.Status, st.TargetsDone, time.Since(released))
		}
	})
}

// probeStore records the store reads made through it and the longest call.
type probeStore struct {
	batchdriver.Store
	mu      sync.Mutex
	reads   int
	longest time.Duration
}

type probeStats struct {
	reads   int
	longest time.Duration
}

func (s *probeStore) stats() probeStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return probeStats{s.reads, s.longest}
}

func (s *probeStore) record(start time.Time) {
	d := time.Since(start)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	s.longest = max(s.longest, d)
}

func (s *probeStore) Get(ctx context.Context, p batchdriver.GetParams) (batchdriver.Job, []batchdriver.TargetRecord, error) {
	defer s.record(time.Now())
	return s.Store.Get(ctx, p)
}

func (s *probeStore) Touch(ctx context.Context, p batchdriver.TouchParams) error {
	defer s.record(time.Now())
	return s.Store.Touch(ctx, p)
}
