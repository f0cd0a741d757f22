package reliability

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchstore"
	"github.com/siftfetch/batchkit/examples/internal/daemon"
)

// smallDisk mounts a tmpfs of size bytes for the test and returns its
// path; it is unmounted when the test ends. Where the machine does not
// allow it (no root) the test skips, except under CI=true, where it fails:
// the check must run in CI.
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0700", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		msg := fmt.Sprintf("cannot mount a tmpfs here: %v: %s", err, strings.TrimSpace(string(out)))
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fill writes a file in dir until the file system is full, and returns its
// path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	name := filepath.Join(dir, "filler")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 16<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return name
		}
	}
}

// The disk fills up under the daemon (a small tmpfs): submits answer 503
// with Retry-After and no storage text, reads go on, targets whose result
// cannot be stored fail once StoreWait has passed and that small write
// succeeds, and once space is free again the same daemon, not restarted,
// takes submits and finishes every job; the file passes quick_check.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	dir := smallDisk(t, 8<<20)
	up := newUpstream(t, time.Millisecond)
	cfg := childConfig{
		DB: filepath.Join(dir, "full.db"), Allow: []string{up.addr()}, Callers: []string{"df"},
		Batch: batch.Config{JobsPerCaller: 50, JobsTotal: 50, Workers: 2, TTL: batch.Duration(time.Hour), StoreWait: batch.Duration(2 * time.Second)},
	}
	logs := &logSink{}
	_, addr, stop := serveStoppable(t, cfg, logs)
	counts := newCounts()
	counts.allow503 = true
	c := newClient(addr, "df", counts)
	defer c.close()
	ctx := t.Context()
	ledger := newLedger()
	submit := func() answer {
		t.Helper()
		urls := []string{up.url(fmt.Sprintf("f%d", ledger.nextURL.Add(1))), up.url(fmt.Sprintf("f%d", ledger.nextURL.Add(1)))}
		sr, a, err := c.submit(ctx, urls)
		if err != nil {
			t.Fatal(err)
		}
		if a.code == http.StatusAccepted {
			ledger.ack(ackedJob{id: sr.JobID, caller: "df", urls: urls})
		}
		return a
	}
	if a := submit(); a.code != http.StatusAccepted {
		t.Fatalf("submit before the disk filled: %d %s", a.code, a.errorText())
	}
	// A job whose first page answers only once the disk is full: its
	// result meets the full disk.
	gated := []string{up.url("fgate0-a"), up.url("f-after-gate")}
	sr, a, err := c.submit(ctx, gated)
	if err != nil || a.code != http.StatusAccepted {
		t.Fatalf("submit of the gated job: %v %d", err, a.code)
	}
	ledger.ack(ackedJob{id: sr.JobID, caller: "df", urls: gated})
	for st, _, _ := c.status(ctx, sr.JobID, ""); st.Status != batch.JobRunning; st, _, _ = c.status(ctx, sr.JobID, "?wait=1s") {
	}
	filler := fill(t, dir)
	up.openGate(0)

	// Submits until one meets the full disk (the WAL may have room for a
	// few first).
	var full answer
	for range 200 {
		if full = submit(); full.code != http.StatusAccepted {
			break
		}
	}
	if full.code != http.StatusServiceUnavailable || full.retryAfter == "" {
		t.Fatalf("submit on a full disk: %d (Retry-After %q) %s; want 503 with Retry-After", full.code, full.retryAfter, full.errorText())
	}
	// Reads still answer.
	for _, j := range ledger.byCaller["df"] {
		if _, a, err := c.status(ctx, j, ""); err != nil || a.code != http.StatusOK {
			t.Fatalf("status read on a full disk: %v %d %s", err, a.code, a.errorText())
		}
	}
	// Past StoreWait the runner gives the result up; the failure it
	// stores instead waits for room too.
	if !logs.waitFor("batch result given up", 30*time.Second) {
		t.Fatal("the runner never gave up the result that met the full disk")
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// The same daemon takes submits again.
	deadline := time.Now().Add(30 * time.Second)
	for a := submit(); a.code != http.StatusAccepted; a = submit() {
		if a.code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("submit after space came back: %d %s", a.code, a.errorText())
		}
		time.Sleep(100 * time.Millisecond)
	}
	w := &workload{ledger: ledger, up: up, counts: counts}
	w.verify(t, addr, 0, true, time.Minute)
	failed, notStored := 0, 0
	for _, id := range ledger.byCaller["df"] {
		st, _, _ := c.status(ctx, id, "")
		for _, tg := range st.Targets {
			if tg.Status == batch.TargetFailed {
				failed++
				if strings.HasPrefix(tg.Error, "not stored") {
					notStored++
				}
			}
		}
	}
	if notStored == 0 {
		t.Error("no target failed as not stored: the result that met the full disk was stored after all")
	}
	counts.check(t)
	checkLogs(t, logs, up)
	stop()
	s, err := batchstore.Open(t.Context(), cfg.DB, batchstore.Config{})
	if err != nil {
		t.Fatalf("the file after a full disk: %v", err)
	}
	s.Close()
	jobs, results := ledger.counts()
	t.Logf("disk full: %d jobs acknowledged, %d results seen, %d targets failed (%d as not stored); %s", jobs, results, failed, notStored, counts)
}

// serveStoppable serves a daemon on cfg in this process (so that -race
// sees its code) on a loopback port, logging into logs unless it is nil,
// and returns it, its address and a function that shuts it down (closing
// its store); the test's end does that too.
func serveStoppable(t *testing.T, cfg childConfig, logs *logSink) (*daemon.Daemon, string, func()) {
	t.Helper()
	var log *slog.Logger
	if logs != nil {
		log = logs.logger()
	}
	d, err := daemon.Open(t.Context(), cfg.daemonConfig(log))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.Serve(ctx, ln, 10*time.Second) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
	t.Cleanup(stop)
	return d, ln.Addr().String(), stop
}
