package main

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// One caller's slow /v1/fetch requests hold at most fetchesPerCaller
// fetches: the next is 429 fetch_busy, another caller is served, and once
// one of the slow ones ends the first caller is served again.
func TestEmbed_FetchesPerCaller(t *testing.T) {
	t.Parallel()
	h := startHost(t)
	const alice, bob = "alice-key-0123456789", "bob-key-0123456789"
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan struct{}, fetchesPerCaller)
	for range fetchesPerCaller {
		go func() {
			defer func() { done <- struct{}{} }()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.url+"/v1/fetch?url="+h.page("slow"), nil)
			req.Header.Set("Authorization", "Bearer "+alice)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	for range fetchesPerCaller {
		select {
		case <-h.slow:
		case <-time.After(10 * time.Second):
			t.Fatal("the slow fetches did not reach the upstream")
		}
	}
	if code, body := h.do(t, http.MethodGet, "/v1/fetch?url="+h.page("1"), alice, ""); code != http.StatusTooManyRequests {
		t.Errorf("alice's fetch with %d in flight: %d %s, want 429 fetch_busy", fetchesPerCaller, code, body)
	}
	if code, body := h.do(t, http.MethodGet, "/v1/fetch?url="+h.page("2"), bob, ""); code != http.StatusOK || body != "page 2" {
		t.Errorf("bob's fetch while alice's are held: %d %q, want the page", code, body)
	}
	cancel() // alice's slow clients go away, and their fetches with them
	for range fetchesPerCaller {
		<-done
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := h.do(t, http.MethodGet, "/v1/fetch?url="+h.page("3"), alice, "")
		if code == http.StatusOK && body == "page 3" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice's fetch after hers ended: %d %q", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
