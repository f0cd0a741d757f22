package batchhttp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// streamLines reads a results stream through a real server and returns its
// lines and trailer status.
func streamLines(t *testing.T, srv *httptest.Server, key, path string) (*http.Response, []TargetStatus) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var lines []TargetStatus
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var ts TargetStatus
		decodeJSON(t, sc.Bytes(), &ts)
		lines = append(lines, ts)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read stream: %v", err)
	}
	return resp, lines
}

func idxs(lines []TargetStatus) []int {
	out := make([]int, len(lines))
	for i, l := range lines {
		out[i] = l.Idx
	}
	return out
}

func TestHandler_ResultsStream(t *testing.T) {
	t.Parallel()
	targets := batchtest.Targets("st", 4)
	script := map[string]batchtest.Step{
		targets[1].URL: {Err: batch.NewFetchError(batch.OutcomeUpstream5xx, "", errors.New("upstream: status 502"))},
		targets[3].URL: {Err: batch.NewFetchError(batch.OutcomeUpstream4xx, "login", errors.New("upstream: status 403"))},
	}
	b := setup(t, setupOpts{fetch: batchtest.ScriptFetcher(script)})
	srv := checkedServer(t, b.handler)
	id := b.submit(t, keyAlice, targets, http.StatusAccepted).JobID
	batchtest.WaitFinished(t, b.runner, alice, id, 10*time.Second)

	t.Run("Order", func(t *testing.T) {
		resp, lines := streamLines(t, srv, keyAlice, "/v1/batch/"+id+"/results")
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != NDJSONType {
			t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if got := fmt.Sprint(idxs(lines)); got != "[0 1 2 3]" {
			t.Fatalf("lines idx %s, want [0 1 2 3]", got)
		}
		if got := resp.Trailer.Get(StatusTrailer); got != string(batch.JobPartial) {
			t.Errorf("trailer %s = %q, want partial", StatusTrailer, got)
		}
		for _, l := range lines {
			if l.URL != targets[l.Idx].URL || l.Retryable == nil {
				t.Errorf("line %d: url %q retryable %v", l.Idx, l.URL, l.Retryable)
			}
		}
		if l := lines[0]; l.Status != batch.TargetDone || l.Outcome != batch.OutcomeOK || *l.Retryable || l.Result == nil || l.Error != "" {
			t.Errorf("done line: %+v", l)
		}
		if l := lines[1]; l.Status != batch.TargetFailed || l.Outcome != batch.OutcomeUpstream5xx || !*l.Retryable || l.Result != nil || l.Error != "upstream: status 502" {
			t.Errorf("5xx line: %+v", l)
		}
		if l := lines[3]; l.Outcome != batch.OutcomeUpstream4xx || *l.Retryable || l.Hint != "login" {
			t.Errorf("4xx line: %+v", l)
		}
		var env map[string]any
		decodeJSON(t, lines[2].Result, &env)
		if env["content"] != "ok" {
			t.Errorf("result of target 2: %s", lines[2].Result)
		}
	})

	t.Run("After", func(t *testing.T) {
		_, lines := streamLines(t, srv, keyAlice, "/v1/batch/"+id+"/results?after=1")
		if got := fmt.Sprint(idxs(lines)); got != "[2 3]" {
			t.Errorf("after=1: lines %s, want [2 3]", got)
		}
		_, lines = streamLines(t, srv, keyAlice, "/v1/batch/"+id+"/results?after=99&follow=1")
		if len(lines) != 0 {
			t.Errorf("after=99: lines %v, want none", idxs(lines))
		}
		for _, q := range []string{"after=-1", "after=x", "after=1&after=2", "follow=maybe"} {
			rec := b.do(t, http.MethodGet, "/v1/batch/"+id+"/results?"+q, keyAlice, "")
			wantError(t, rec, http.StatusBadRequest, map[string]string{
				"after=-1": "invalid request: after must be a target index", "after=x": "invalid request: after must be a target index",
				"after=1&after=2": "invalid request: after given more than once", "follow=maybe": "invalid request: follow must be 1, true, 0 or false",
			}[q])
		}
	})

	t.Run("Ownership", func(t *testing.T) {
		foreign := b.do(t, http.MethodGet, "/v1/batch/"+id+"/results", keyBob, "")
		unknown := b.do(t, http.MethodGet, "/v1/batch/00000000-0000-0000-0000-000000000000/results", keyBob, "")
		wantError(t, foreign, http.StatusNotFound, "not found")
		if foreign.Body.String() != unknown.Body.String() {
			t.Errorf("foreign %q, unknown %q: want the same bytes", foreign.Body, unknown.Body)
		}
		rec := b.do(t, http.MethodPost, "/v1/batch/"+id+"/results", keyAlice, "")
		wantError(t, rec, http.StatusMethodNotAllowed, "method not allowed")
	})
}

func TestHandler_ResultsFollow(t *testing.T) {
	t.Parallel()
	f := batchtest.NewBlockingFetcher()
	b := setup(t, setupOpts{fetch: f.Fetch})
	c := newClientServer(t, b.handler, keyAlice)
	targets := batchtest.Targets("fo", 3)
	id := b.submit(t, keyAlice, targets, http.StatusAccepted).JobID

	got := make(chan TargetStatus)
	errc := make(chan error, 1)
	go func() {
		for ts, err := range c.Results(t.Context(), id, ResultsQuery{Follow: true}) {
			if err != nil {
				errc <- err
				return
			}
			got <- ts
		}
		close(got)
	}()
	// Each target reaches the stream as it finishes, before the next one
	// is released.
	for i := range targets {
		<-f.Started
		f.Release()
		select {
		case ts := <-got:
			if ts.Idx != i || ts.Status != batch.TargetDone || ts.Result == nil {
				t.Fatalf("line %d: %+v", i, ts)
			}
		case err := <-errc:
			t.Fatal(err)
		case <-time.After(10 * time.Second):
			t.Fatalf("target %d did not reach the stream", i)
		}
	}
	select {
	case _, open := <-got:
		if open {
			t.Fatal("a line after the last target")
		}
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end with the job")
	}
}

func TestHandler_ResultsClientGone(t *testing.T) {
	t.Parallel()
	f := batchtest.NewBlockingFetcher()
	b := setup(t, setupOpts{fetch: f.Fetch})
	c := newClientServer(t, b.handler, keyAlice)
	id := b.submit(t, keyAlice, batchtest.Targets("gone", 2), http.StatusAccepted).JobID
	<-f.Started
	f.Release()

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var n int
	var err error
	for ts, e := range c.Results(ctx, id, ResultsQuery{Follow: true}) {
		if e != nil {
			err = e
			break
		}
		n++
		if ts.Idx == 0 {
			cancel() // leave while the stream waits for target 1
		}
	}
	if n != 1 || !errors.Is(err, context.Canceled) {
		t.Fatalf("%d lines, err %v; want 1 line, then context.Canceled", n, err)
	}
	// The handler noticed: its request ended (an observation is made when
	// it returns) while the job still waits on target 1, long before the
	// follow cap of a minute.
	deadline := time.Now().Add(10 * time.Second)
	for !hasObservation(b.obs, RouteResults) {
		if time.Now().After(deadline) {
			t.Fatalf("no observation for %s: the stream outlived its client: %v", RouteResults, b.obs.all())
		}
		time.Sleep(5 * time.Millisecond)
	}
	f.Release()
}

func TestClient_ResultsResumes(t *testing.T) {
	t.Parallel()
	// A server that cuts each stream after one line, as the cap does, with
	// the job still running until the last target.
	var afters []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		after := r.URL.Query().Get("after")
		afters = append(afters, after)
		next := 0
		if after != "" {
			fmt.Sscan(after, &next)
			next++
		}
		w.Header().Set("Trailer", StatusTrailer)
		w.Header().Set("Content-Type", NDJSONType)
		fmt.Fprintf(w, `{"idx":%d,"url":"u","status":"done","outcome":"ok","retryable":false,"result":{}}`+"\n", next)
		status := "running"
		if next == 2 {
			status = "done"
		}
		w.Header().Set(StatusTrailer, status)
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient(srv.URL, "k", srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for ts, err := range c.Results(t.Context(), "j", ResultsQuery{Follow: true}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ts.Idx)
	}
	if fmt.Sprint(got) != "[0 1 2]" || fmt.Sprint(afters) != "[ 0 1]" {
		t.Errorf("lines %v after %q, want [0 1 2] after [\"\" 0 1]", got, afters)
	}

	// Without follow, one stream is read and the sequence ends.
	afters, got = nil, nil
	for ts, err := range c.Results(t.Context(), "j", ResultsQuery{}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ts.Idx)
	}
	if fmt.Sprint(got) != "[0]" || len(afters) != 1 {
		t.Errorf("no follow: lines %v in %d requests", got, len(afters))
	}
}

func TestClient_ResultsCutShort(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", NDJSONType)
		fmt.Fprintln(w, `{"idx":0,"url":"u","status":"done"}`)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}))
	srv.Config.ErrorLog = nil
	t.Cleanup(srv.Close)
	c, _ := NewClient(srv.URL, "k", srv.Client())
	var n int
	var err error
	for _, e := range c.Results(t.Context(), "j", ResultsQuery{}) {
		if e != nil {
			err = e
			break
		}
		n++
	}
	if n != 1 || err == nil {
		t.Errorf("%d lines, err %v; want 1 line and an error for the cut", n, err)
	}
}

// TestHandler_ResultsStreamMemory drains a job of 32 results of 1 MiB
// through the stream and samples the live heap after each line: the
// handler holds one result at a time, so the peak stays near a few MiB
// however large the job.
func TestHandler_ResultsStreamMemory(t *testing.T) {
	// Not parallel: the heap is the process's.
	const n, size = 32, 1 << 20
	content := strings.Repeat("x", size-4096)
	b := setup(t, setupOpts{fetch: batchtest.StaticFetcher(content), config: func(c *batch.Config) {
		c.MaxResultBytes = size
	}})
	// Not a checkedServer, and no check of the lines: a recorded copy of
	// the answer, or a checker's decoded copy of each 1 MiB line, would
	// count against the handler (the latter doubled the peak). The other
	// stream tests have their lines checked against openapi.json.
	srv := httptest.NewServer(b.handler)
	t.Cleanup(srv.Close)
	id := b.submit(t, keyAlice, batchtest.Targets("mem", n), http.StatusAccepted).JobID
	if info := batchtest.WaitFinished(t, b.runner, alice, id, 30*time.Second); info.Status != batch.JobDone {
		t.Fatalf("job %s", info.Status)
	}

	live := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/v1/batch/"+id+"/results", nil)
	req.Header.Set("Authorization", "Bearer "+keyAlice)
	base := live()
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReaderSize(resp.Body, 64<<10)
	var peak uint64
	var lines, bytes int
	var line []byte
	for {
		chunk, err := rd.ReadSlice('\n')
		bytes += len(chunk)
		line = append(line, chunk...)
		if err == bufio.ErrBufferFull {
			continue // a long line: read on
		}
		if err != nil {
			break
		}
		lines++
		line = line[:0]
		peak = max(peak, live())
	}
	over := int64(peak) - int64(base)
	t.Logf("streamed %d lines, %.1f MiB; live heap peak %.1f MiB over the %.1f MiB before the stream",
		lines, float64(bytes)/(1<<20), float64(over)/(1<<20), float64(base)/(1<<20))
	if lines != n || bytes < n*(size-4096) {
		t.Fatalf("%d lines, %d bytes; want %d lines of about 1 MiB", lines, bytes, n)
	}
	// All results at once would be 32 MiB and more; one at a time is a
	// few MiB: on the server the result read from the store, its line and
	// the write buffer, on the client the line being read (about 4 MiB
	// measured). 8 MiB leaves room for the noise of a shared heap and still
	// fails a handler that keeps a quarter of the job.
	if over > 8<<20 {
		t.Errorf("live heap rose by %.1f MiB while streaming: the handler holds more than one result", float64(over)/(1<<20))
	}
}

func hasObservation(o *observations, route string) bool {
	for _, ob := range o.all() {
		if ob.route == route {
			return true
		}
	}
	return false
}
