package batchrobots_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchnet"
	"github.com/siftfetch/batchkit/batchrobots"
)

// TestRunner_Robots runs a runner with a checker and a fetcher over the
// guarded client: a disallowed target ends robots without a request to
// it, the crawl delay spaces the fetch starts, and a 429 with Retry-After
// is fetched again, not failed.
func TestRunner_Robots(t *testing.T) {
	t.Parallel()
	const delay = 300 * time.Millisecond
	var (
		mu          sync.Mutex
		starts      = map[string]time.Time{}
		answered429 bool
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			fmt.Fprintf(w, "User-agent: *\nDisallow: /private\nCrawl-delay: %g\n", delay.Seconds())
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Path == "/private" {
			t.Errorf("request to /private, which robots.txt disallows")
		}
		if r.URL.Path == "/busy" && !answered429 {
			answered429 = true
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		starts[r.URL.Path] = time.Now()
		fmt.Fprint(w, "page")
	}))
	t.Cleanup(srv.Close)
	client, err := batchnet.NewClient(batchnet.ClientConfig{Allow: []string{srv.Listener.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.CloseIdleConnections)
	robots, err := batchrobots.New(batchrobots.Config{Client: client, UserAgent: "batchkit", Logger: batchtest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	fetch := func(ctx context.Context, _ batch.Caller, tg batch.Target) (batch.Result, error) {
		resp, err := client.Get(ctx, tg.URL)
		if err != nil {
			return batch.Result{}, err
		}
		defer resp.Body.Close()
		if err := batchnet.ResponseError(resp); err != nil {
			return batch.Result{}, err
		}
		body, err := io.ReadAll(resp.Body)
		return batch.Result{Content: string(body)}, err
	}
	r := batchtest.NewRunner(t, batch.Config{Fetch: fetch, Robots: robots.Check})
	caller := batch.Caller{Name: "agent"}
	job, _, err := r.Submit(t.Context(), caller, []batch.Target{
		{URL: srv.URL + "/a"}, {URL: srv.URL + "/private"}, {URL: srv.URL + "/busy"}, {URL: srv.URL + "/b"},
	})
	if err != nil {
		t.Fatal(err)
	}
	info := batchtest.WaitFinished(t, r, caller, job.ID, 30*time.Second)
	want := []struct {
		status  batch.TargetStatus
		outcome batch.Outcome
	}{{batch.TargetDone, batch.OutcomeOK}, {batch.TargetFailed, batch.OutcomeRobots}, {batch.TargetDone, batch.OutcomeOK}, {batch.TargetDone, batch.OutcomeOK}}
	for i, ti := range info.Targets {
		if ti.Status != want[i].status || ti.Outcome != want[i].outcome {
			t.Errorf("target %d: %s %q (%s), want %s %q", i, ti.Status, ti.Outcome, ti.Error, want[i].status, want[i].outcome)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if gap := starts["/busy"].Sub(starts["/a"]); gap < time.Second {
		t.Errorf("/busy fetched again %s after /a, want at least the Retry-After, 1s", gap)
	}
	if gap := starts["/b"].Sub(starts["/busy"]); gap < delay {
		t.Errorf("/b started %s after /busy, want at least the crawl delay, %s", gap, delay)
	}
}
