package batchtest

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/siftfetch/batchkit/batch"
)

// StaticFetcher returns a fetcher whose result for every target is content,
// with the target's URL and its "mode" option (or "") in Meta.
func StaticFetcher(content string) batch.FetchFunc {
	return func(ctx context.Context, _ batch.Caller, t batch.Target) (batch.Result, error) {
		var o struct{ Mode string }
		_ = json.Unmarshal(t.Options, &o) // no options, or none named mode: ""
		return batch.Result{Content: content, Meta: map[string]any{"url": t.URL, "mode": o.Mode}}, nil
	}
}

// Step is one scripted answer of a [ScriptFetcher].
type Step struct {
	Result batch.Result
	Err    error
}

// ScriptFetcher answers each URL with its scripted [Step] and every other URL
// with content "ok". Build errors with [batch.NewFetchError] to give them an
// outcome and a hint.
func ScriptFetcher(script map[string]Step) batch.FetchFunc {
	return func(ctx context.Context, _ batch.Caller, t batch.Target) (batch.Result, error) {
		if s, ok := script[t.URL]; ok {
			return s.Result, s.Err
		}
		return batch.Result{Content: "ok"}, nil
	}
}

// FailingFetcher fails every target with err.
func FailingFetcher(err error) batch.FetchFunc {
	return func(context.Context, batch.Caller, batch.Target) (batch.Result, error) {
		return batch.Result{}, err
	}
}

// PanickingFetcher panics with value for the URL panicURL and returns "ok"
// for every other target.
func PanickingFetcher(panicURL string, value any) batch.FetchFunc {
	return func(ctx context.Context, _ batch.Caller, t batch.Target) (batch.Result, error) {
		if t.URL == panicURL {
			panic(value)
		}
		return batch.Result{Content: "ok"}, nil
	}
}

// HangingFetcher ignores its context and blocks until release is closed,
// then returns "late". It models a fetcher that does not honour deadlines.
func HangingFetcher(release <-chan struct{}) batch.FetchFunc {
	return func(context.Context, batch.Caller, batch.Target) (batch.Result, error) {
		<-release
		return batch.Result{Content: "late"}, nil
	}
}

// BusyThenOK returns a fetcher that reports [batch.ErrFetchBusy] for the
// first n calls and then succeeds, and a counter of its calls.
func BusyThenOK(n int) (batch.FetchFunc, *atomic.Int64) {
	var calls atomic.Int64
	return func(context.Context, batch.Caller, batch.Target) (batch.Result, error) {
		if calls.Add(1) <= int64(n) {
			return batch.Result{}, batch.ErrFetchBusy
		}
		return batch.Result{Content: "ok"}, nil
	}, &calls
}

// BlockingFetcher holds every fetch until the test releases it, and records
// what it was called with. It honours its context. Use [BlockingFetcher.Fetch]
// as the FetchFunc.
type BlockingFetcher struct {
	// Started receives each target's URL as its fetch begins.
	Started chan string
	release chan struct{}

	mu       sync.Mutex
	calls    []string
	inflight int
	peak     int
}

// NewBlockingFetcher returns a fetcher whose calls block until [Release].
func NewBlockingFetcher() *BlockingFetcher {
	return &BlockingFetcher{Started: make(chan string, 1024), release: make(chan struct{}, 1024)}
}

// Release lets one blocked (or future) fetch return.
func (f *BlockingFetcher) Release() { f.release <- struct{}{} }

// Fetch is the FetchFunc.
func (f *BlockingFetcher) Fetch(ctx context.Context, _ batch.Caller, t batch.Target) (batch.Result, error) {
	f.mu.Lock()
	f.calls = append(f.calls, t.URL)
	f.inflight++
	f.peak = max(f.peak, f.inflight)
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inflight--
		f.mu.Unlock()
	}()
	f.Started <- t.URL
	select {
	case <-f.release:
		return batch.Result{Content: "released:" + t.URL}, nil
	case <-ctx.Done():
		return batch.Result{}, context.Cause(ctx)
	}
}

// Calls returns the URLs fetched so far, in call order.
func (f *BlockingFetcher) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// Peak returns the highest number of fetches that were in flight at once.
func (f *BlockingFetcher) Peak() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.peak
}

// RecordingFetcher wraps next and counts calls per URL.
type RecordingFetcher struct {
	next  batch.FetchFunc
	mu    sync.Mutex
	calls map[string]int
	order []string
}

// NewRecordingFetcher wraps next; a nil next answers "ok".
func NewRecordingFetcher(next batch.FetchFunc) *RecordingFetcher {
	if next == nil {
		next = StaticFetcher("ok")
	}
	return &RecordingFetcher{next: next, calls: make(map[string]int)}
}

// Fetch is the FetchFunc.
func (f *RecordingFetcher) Fetch(ctx context.Context, c batch.Caller, t batch.Target) (batch.Result, error) {
	f.mu.Lock()
	f.calls[t.URL]++
	f.order = append(f.order, t.URL)
	f.mu.Unlock()
	return f.next(ctx, c, t)
}

// Count returns how often url was fetched.
func (f *RecordingFetcher) Count(url string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[url]
}

// Order returns every fetched URL in call order.
func (f *RecordingFetcher) Order() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.order...)
}

// ErrScripted is a plain error for scripted failures.
var ErrScripted = errors.New("scripted failure")
