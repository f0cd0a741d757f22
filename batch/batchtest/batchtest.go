package batchtest

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
)

// Clock is a fake clock for Config.Now. Its zero value is not usable; see
// [NewClock].
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock stopped at a fixed instant.
func NewClock() *Clock {
	return &Clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Logger returns a logger that writes every record to tb's log.
func Logger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tbWriter{tb}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Helper()
	w.tb.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// NewRunner builds a runner from cfg, filling a nil Store with [NewStore], a
// nil Fetch with [StaticFetcher]("ok") and a nil Logger with [Logger](tb),
// starts it, and closes it when the test ends. It fails the test at once on
// any error.
func NewRunner(tb testing.TB, cfg batch.Config) *batch.Runner {
	tb.Helper()
	if cfg.Store == nil {
		cfg.Store = NewStore()
	}
	if cfg.Fetch == nil {
		cfg.Fetch = StaticFetcher("ok")
	}
	if cfg.Logger == nil {
		cfg.Logger = Logger(tb)
	}
	r, err := batch.New(cfg)
	if err != nil {
		tb.Fatalf("batch.New: %v", err)
	}
	if err := r.Start(context.Background()); err != nil {
		tb.Fatalf("Runner.Start: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Close(ctx); err != nil {
			tb.Errorf("Runner.Close: %v", err)
		}
	})
	return r
}

// WaitFinished polls the runner until the caller's job is finished or
// timeout passes, and returns its last status (with results).
func WaitFinished(tb testing.TB, r *batch.Runner, caller batch.Caller, id string, timeout time.Duration) batch.JobInfo {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		info, err := r.Wait(ctx, caller, id, batch.WaitOptions{
			StatusOptions: batch.StatusOptions{Results: true}, Timeout: timeout,
		})
		if err != nil {
			tb.Fatalf("waiting for job %s: %v", id, err)
		}
		if info.Status.Finished() {
			return info
		}
	}
}

// Targets returns n targets with URLs https://example.test/<prefix>/<i>.
func Targets(prefix string, n int) []batch.Target {
	ts := make([]batch.Target, n)
	for i := range ts {
		ts[i] = batch.Target{URL: "https://example.test/" + prefix + "/" + strconv.Itoa(i)}
	}
	return ts
}

// Buffer is a bytes.Buffer that is safe for concurrent writes, for capturing
// log output in tests: slog.New(slog.NewJSONHandler(&buf, nil)).
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p to the buffer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
