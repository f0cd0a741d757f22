package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batchstore"
)

// The memory phase. Each measurement runs in a child process of its own
// (this binary, re-run with -child), so that no earlier phase's heap or
// resident pages are counted.
//
//   - live: a runner on the SQLite store at its defaults, caps raised to
//     N, whose fetcher blocks: N jobs of 32 targets are submitted and
//     stay live (the workers' jobs running, the rest queued). Heap
//     (live objects after a GC), goroutines and RSS are read before and
//     after; the difference over N is the cost of a live job, results
//     excluded (none exist).
//   - peak: the runner at every default (8 jobs at most, one per caller
//     here) drains 8 jobs × 32 targets whose fetcher returns 256 KiB pages
//     at once; the heap is sampled every millisecond, and the peak over
//     the drain is set beside the bytes of all results, to show that a
//     result is not held beyond the target in flight.

const childFlag = "-child"

// memoryReport is the memory phase's outcome.
type memoryReport struct {
	Live liveMemory
	Peak peakMemory
}

type liveMemory struct {
	Jobs, Targets        int
	HeapBefore, HeapLive int64 // live heap objects after a GC, bytes
	RSSBefore, RSSLive   int64
	Goroutines           int // more than before
}

func (m liveMemory) heapPerJob() float64 { return float64(m.HeapLive-m.HeapBefore) / float64(m.Jobs) }
func (m liveMemory) rssPerJob() float64  { return float64(m.RSSLive-m.RSSBefore) / float64(m.Jobs) }

type peakMemory struct {
	Jobs, Targets, ResultBytes int
	HeapBefore, HeapPeak       int64 // heap objects (live and not yet swept), bytes
	HeapAfter                  int64 // live heap after the drain and a GC
	RSSBefore, RSSPeak         int64 // RSSPeak is the process's high-water mark
	Elapsed                    time.Duration
	GOGC                       string
}

func (m peakMemory) allResults() int64 { return int64(m.Jobs * m.Targets * m.ResultBytes) }

func memoryPhase(ctx context.Context, sz sizes, tmp string) (*memoryReport, error) {
	rep := &memoryReport{}
	if err := runChildJSON(ctx, tmp, &rep.Live, "live", strconv.Itoa(sz.memJobs)); err != nil {
		return nil, err
	}
	logf("memory live: %d jobs: heap %s/job, RSS %s/job, %d goroutines", rep.Live.Jobs,
		fmtBytes(rep.Live.heapPerJob()), fmtBytes(rep.Live.rssPerJob()), rep.Live.Goroutines)
	err := runChildJSON(ctx, tmp, &rep.Peak, "peak", strconv.Itoa(sz.memPeakJobs), strconv.Itoa(sz.memPeakItem), strconv.Itoa(sz.memPeakSize))
	if err != nil {
		return nil, err
	}
	logf("memory peak: heap %s over %s before, results %s in all", fmtBytes(float64(rep.Peak.HeapPeak-rep.Peak.HeapBefore)),
		fmtBytes(float64(rep.Peak.HeapBefore)), fmtBytes(float64(rep.Peak.allResults())))
	return rep, nil
}

// runChildJSON runs this binary as a child doing mode and decodes the
// JSON it prints into v.
func runChildJSON(ctx context.Context, tmp string, v any, mode string, args ...string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, exe, append([]string{childFlag, mode, tmp}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("memory %s: %w", mode, err)
	}
	return json.Unmarshal(out.Bytes(), v)
}

// runChild is the child's main: mode, a directory, then the mode's numbers.
func runChild(args []string) int {
	ctx := context.Background()
	var v any
	var err error
	n := func(i int) int {
		x, _ := strconv.Atoi(args[min(i, len(args)-1)])
		return x
	}
	if len(args) >= 1 && args[0] == "agentday" {
		return childAgentDay(args[1:])
	}
	switch {
	case len(args) >= 3 && args[0] == "live":
		v, err = childLive(ctx, args[1], n(2))
	case len(args) >= 5 && args[0] == "peak":
		v, err = childPeak(ctx, args[1], n(2), n(3), n(4))
	default:
		err = fmt.Errorf("unknown child %q", args)
	}
	if err == nil {
		err = json.NewEncoder(os.Stdout).Encode(v)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench child:", err)
		return 1
	}
	return 0
}

func childLive(ctx context.Context, dir string, jobs int) (liveMemory, error) {
	m := liveMemory{Jobs: jobs, Targets: 32}
	d, err := os.MkdirTemp(dir, "live-")
	if err != nil {
		return m, err
	}
	defer os.RemoveAll(d)
	s, err := batchstore.Open(ctx, filepath.Join(d, "live.db"), batchstore.Config{})
	if err != nil {
		return m, err
	}
	defer s.Close()
	release := make(chan struct{})
	fetch := func(ctx context.Context, _ batch.Caller, _ batch.Target) (batch.Result, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return batch.Result{}, errors.New("bench: released")
	}
	r, err := batch.New(batch.Config{Store: s, Fetch: fetch, Options: batchsift.Options, JobsPerCaller: jobs + 1, JobsTotal: jobs + 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return m, err
	}
	if err := r.Start(ctx); err != nil {
		return m, err
	}
	defer func() {
		close(release)
		r.Close(ctx)
	}()
	caller := batch.Caller{Name: "agent"}
	// One job first, so that the connections, statements and workers
	// exist before the baseline.
	if _, _, err := r.Submit(ctx, caller, liveTargets(-1, m.Targets)); err != nil {
		return m, err
	}
	time.Sleep(100 * time.Millisecond)
	g0 := runtime.NumGoroutine()
	m.HeapBefore, m.RSSBefore = liveHeap(), rss()
	for j := range jobs {
		if _, _, err := r.Submit(ctx, caller, liveTargets(j, m.Targets)); err != nil {
			return m, err
		}
	}
	time.Sleep(100 * time.Millisecond)
	m.HeapLive, m.RSSLive = liveHeap(), rss()
	m.Goroutines = runtime.NumGoroutine() - g0
	return m, nil
}

func liveTargets(j, n int) []batch.Target {
	ts := make([]batch.Target, n)
	for i := range ts {
		ts[i] = batch.Target{URL: fmt.Sprintf("https://www.example-news-site.test/articles/2026/%d/story-%d.html", j, i),
			Options: json.RawMessage(`{"mode":"clean"}`)}
	}
	return ts
}

func childPeak(ctx context.Context, dir string, jobs, items, size int) (peakMemory, error) {
	m := peakMemory{Jobs: jobs, Targets: items, ResultBytes: size, GOGC: os.Getenv("GOGC")}
	if m.GOGC == "" {
		m.GOGC = "100 (default)"
	}
	d, err := os.MkdirTemp(dir, "peak-")
	if err != nil {
		return m, err
	}
	defer os.RemoveAll(d)
	s, err := batchstore.Open(ctx, filepath.Join(d, "peak.db"), batchstore.Config{})
	if err != nil {
		return m, err
	}
	defer s.Close()
	content := pageText(size - len(`{"content":""}`))
	fetch := func(context.Context, batch.Caller, batch.Target) (batch.Result, error) {
		return batch.Result{Content: content}, nil
	}
	r, err := batch.New(batch.Config{Store: s, Fetch: fetch, Options: batchsift.Options, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return m, err
	}
	if err := r.Start(ctx); err != nil {
		return m, err
	}
	defer r.Close(ctx)
	done := r.Metrics().GetOrCreateCounter(`batch_jobs_total{outcome="done"}`)
	m.HeapBefore, m.RSSBefore = liveHeap(), rss()
	stop := make(chan struct{})
	peak := make(chan int64)
	go func() { peak <- samplePeak(stop) }()
	start := time.Now()
	for j := range jobs {
		caller := batch.Caller{Name: fmt.Sprint("agent-", j)} // the default caps: one live job per caller, 8 in all
		if _, _, err := r.Submit(ctx, caller, liveTargets(j, items)); err != nil {
			return m, err
		}
	}
	for done.Get() < uint64(jobs) {
		time.Sleep(time.Millisecond)
		if time.Since(start) > roundTimeout {
			return m, fmt.Errorf("peak drain: %d of %d jobs done", done.Get(), jobs)
		}
	}
	m.Elapsed = time.Since(start)
	close(stop)
	m.HeapPeak = <-peak
	m.RSSPeak = rssPeak()
	m.HeapAfter = liveHeap()
	return m, nil
}

const heapObjects = "/memory/classes/heap/objects:bytes"

// samplePeak reads the heap's object bytes every millisecond until stop
// and returns the highest.
func samplePeak(stop chan struct{}) int64 {
	s := []metrics.Sample{{Name: heapObjects}}
	var peak int64
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		metrics.Read(s)
		peak = max(peak, int64(s[0].Value.Uint64()))
		select {
		case <-stop:
			return peak
		case <-t.C:
		}
	}
}

// liveHeap is the heap's live objects after a full GC.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{{Name: heapObjects}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// rss and rssPeak read VmRSS and VmHWM from /proc/self/status.
func rss() int64     { return procStatus("VmRSS:") }
func rssPeak() int64 { return procStatus("VmHWM:") }

func procStatus(key string) int64 { return procField("/proc/self/status", key, 1<<10) }

// procField reads the number after key in a /proc file of "key value"
// lines, times unit; 0 where it cannot.
func procField(path, key string, unit int64) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, key); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n * unit
			}
		}
	}
	return 0
}
