package batchhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// heldBy returns how many slots of s caller holds.
func heldBy(s *callerSlots, caller string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[caller]
}

// waitHeld waits until caller holds n slots of s.
func waitHeld(t *testing.T, s *callerSlots, caller string, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); heldBy(s, caller) != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %d slots, want %d", caller, heldBy(s, caller), n)
		}
	}
}

// A caller holds at most MaxWaitsPerCaller long-polls and
// MaxStreamsPerCaller results streams at once: one more is 429 with its
// code and Retry-After, while another caller's are served, and a slot given
// back serves the next.
func TestHandler_HeldPerCaller(t *testing.T) {
	t.Parallel()
	f := func(t *testing.T, slots func(*Handler) *callerSlots, query string, wantMsg string) {
		t.Helper()
		fetch := batchtest.NewBlockingFetcher()
		r := batchtest.NewRunner(t, batch.Config{Fetch: fetch.Fetch})
		h := limitsHandler(t, r, HandlerConfig{MaxWaitsPerCaller: 2, MaxStreamsPerCaller: 2})
		mine, _, err := r.Submit(t.Context(), alice, batchtest.Targets("held-a", 1))
		if err != nil {
			t.Fatal(err)
		}
		bobs, _, err := r.Submit(t.Context(), batch.Caller{Name: "bob", Class: "agent"}, batchtest.Targets("held-b", 1))
		if err != nil {
			t.Fatal(err)
		}
		<-fetch.Started
		<-fetch.Started // both jobs run, and stay running
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		path := func(id string) string { return "/v1/batch/" + id + query }
		polls := []*poll{startPoll(ctx, h, path(mine.ID)), startPoll(ctx, h, path(mine.ID))}
		waitHeld(t, slots(h), "alice", 2)

		rec := serve(t, h, http.MethodGet, path(mine.ID), keyAlice, "")
		wantError(t, rec, http.StatusTooManyRequests, wantMsg)
		if got := rec.Header().Get("Retry-After"); got != "5" {
			t.Errorf("Retry-After %q, want 5", got)
		}
		// Another caller has slots of its own: bob's request is held (it
		// is not refused) while alice holds all of hers.
		bctx, bcancel := context.WithCancel(t.Context())
		req := httptest.NewRequestWithContext(bctx, http.MethodGet, path(bobs.ID), nil)
		req.Header.Set("Authorization", "Bearer "+keyBob)
		bobDone := make(chan int, 1)
		go func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			bobDone <- rec.Code
		}()
		waitHeld(t, slots(h), "bob", 1)
		bcancel()
		<-bobDone

		cancel() // alice's clients go away: their slots come back
		for _, p := range polls {
			<-p.done
		}
		waitHeld(t, slots(h), "alice", 0)
		fetch.Release() // a release frees one fetch, whichever: free both jobs'
		fetch.Release()
		batchtest.WaitFinished(t, r, alice, mine.ID, 10*time.Second)
		if rec := serve(t, h, http.MethodGet, path(mine.ID), keyAlice, ""); rec.Code != http.StatusOK {
			t.Errorf("after the slots came back: %d %s", rec.Code, rec.Body)
		}
	}
	t.Run("Streams", func(t *testing.T) {
		t.Parallel()
		f(t, func(h *Handler) *callerSlots { return h.streams }, "/results?follow=1", "too many results streams of yours at once")
	})
	t.Run("Waits", func(t *testing.T) {
		t.Parallel()
		f(t, func(h *Handler) *callerSlots { return h.waits }, "?wait=30s", "too many long-polls of yours at once")
	})
}

// A results line is written with its result as stored, not encoded into a
// buffer of its own: writing a line of a 1 MiB result allocates far less
// than the result (what a stream holds). Not
// parallel, so that other tests' allocations do not count.
func TestWriteTarget_DoesNotCopyResult(t *testing.T) {
	result := []byte(`{"content":"` + strings.Repeat("x", 1<<20) + `"}`)
	ts := TargetStatus{Idx: 3, URL: "https://example.com/", Status: batch.TargetDone, Result: result}
	var line bytes.Buffer
	if err := writeTarget(&line, []byte("["), ts, "\n"); err != nil {
		t.Fatal(err)
	}
	want, err := marshal(ts)
	if err != nil {
		t.Fatal(err)
	}
	if got := line.String(); got != "["+string(want) {
		t.Fatalf("line %.80q…, want %.80q…", got, "["+string(want))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const runs = 8
	for range runs {
		if err := writeTarget(io.Discard, nil, ts, "\n"); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	perLine := (after.TotalAlloc - before.TotalAlloc) / runs
	t.Logf("a line of a %d-byte result allocates %d bytes", len(result), perLine)
	if perLine > uint64(len(result))/4 {
		t.Errorf("a line of a %d-byte result allocates %d bytes: the result is copied", len(result), perLine)
	}
}

// A caller has at most MaxSubmitsPerCaller submits in flight at once: while
// two of alice's submits stall in their bodies, her third is 429
// submits_busy with Retry-After: 5 before its body is read, bob's submit is
// served, and once her stalled clients go away she submits again (the
// review saw one caller's parallel submits hold 1.4 GB).
func TestHandler_SubmitsPerCaller(t *testing.T) {
	t.Parallel()
	r := batchtest.NewRunner(t, batch.Config{})
	h := limitsHandler(t, r, HandlerConfig{MaxSubmitsPerCaller: 2, BodyTimeout: time.Minute})
	srv := checkedServer(t, h)
	head := "POST /v1/batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + keyAlice + "\r\nContent-Length: 1000\r\n\r\n"
	var stalled []net.Conn
	for range 2 {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		if _, err := io.WriteString(conn, head+`{"targets":[`); err != nil {
			t.Fatal(err)
		}
		stalled = append(stalled, conn)
	}
	waitHeld(t, h.submits, "alice", 2)

	post := func(key string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/batch", strings.NewReader(submitBody(t, batchtest.Targets("sub-"+key, 1))))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = resp.Body.Close() })
		return resp
	}
	resp := post(keyAlice)
	var er ErrorResponse
	if err := json.NewDecoder(resp.Body).Decode(&er); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTooManyRequests || er.Code != CodeSubmitsBusy || er.Error != "too many submits of yours at once" {
		t.Errorf("alice's third submit: %d %+v, want 429 %s", resp.StatusCode, er, CodeSubmitsBusy)
	}
	if got := resp.Header.Get("Retry-After"); got != "5" {
		t.Errorf("Retry-After %q, want 5", got)
	}
	if resp := post(keyBob); resp.StatusCode != http.StatusAccepted {
		t.Errorf("bob's submit while alice holds her cap: %d, want 202", resp.StatusCode)
	}
	for _, c := range stalled {
		_ = c.Close()
	}
	waitHeld(t, h.submits, "alice", 0)
	if resp := post(keyAlice); resp.StatusCode != http.StatusAccepted {
		t.Errorf("alice's submit after her stalled ones went away: %d, want 202", resp.StatusCode)
	}
}
