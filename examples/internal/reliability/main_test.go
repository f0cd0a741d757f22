package reliability

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp/batchserver"
	"github.com/siftfetch/batchkit/examples/internal/daemon"
	"github.com/siftfetch/batchkit/examples/internal/pgopen"
)

// The test binary doubles as the daemon process of the tests that kill it
// or read its memory: with childEnv set to the JSON of a childConfig,
// TestMain serves the daemon instead of running the tests.
const childEnv = "BATCHKIT_RELIABILITY_CHILD"

// longEnv selects the long form of the suite.
const longEnv = "BATCHKIT_RELIABILITY"

// long reports whether the long form runs.
func long() bool { return os.Getenv(longEnv) == "long" }

func TestMain(m *testing.M) {
	if cfg := os.Getenv(childEnv); cfg != "" {
		os.Exit(runChild(cfg))
	}
	goleak.VerifyTestMain(m)
}

// childConfig is what a daemon child serves.
type childConfig struct {
	DB               string // an SQLite file or a PostgreSQL URL
	Schema           string // the PostgreSQL store's schema
	Allow            []string
	Callers          []string // each caller's key is keyOf(name)
	Batch            batch.Config
	MaxResponseBytes int64
	WebhookSecret    string // the master secret; "" lets the daemon generate one
	UserAgent        string // of the daemon's fetches; "" for the fetcher's
}

// keyOf is the bearer key of a test caller.
func keyOf(caller string) string { return caller + "-secret-key" }

func (c childConfig) daemonConfig(log *slog.Logger) daemon.Config {
	keys := make([]batchserver.Key, len(c.Callers))
	for i, name := range c.Callers {
		keys[i] = batchserver.Key{Name: name, Secret: keyOf(name)}
	}
	return daemon.Config{
		DB: c.DB, Schema: c.Schema, OpenPostgres: pgopen.Open, Keys: keys, Allow: c.Allow, Batch: c.Batch,
		MaxResponseBytes: c.MaxResponseBytes, Logger: log, WebhookSecret: c.WebhookSecret,
		UserAgent: c.UserAgent,
	}
}

// runChild serves the daemon until SIGTERM (a graceful stop) or SIGKILL.
// It logs at debug level, as JSON, to stderr, and prints "listening
// <addr>" on stdout once it serves.
func runChild(raw string) int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "child config:", err)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	return daemon.ServeChild(ctx, cfg.daemonConfig(log), os.Stdout, os.Stderr)
}

// daemonProc is a daemon child.
type daemonProc struct {
	cmd  *exec.Cmd
	addr string
	logs *logSink
	done chan struct{} // closed when the process has exited
	err  error         // its exit, once done is closed
}

// logSink keeps a child's log lines.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (l *logSink) add(line string) {
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
}

// Write takes one or more whole lines, as a slog handler writes them.
func (l *logSink) Write(p []byte) (int, error) {
	for line := range strings.SplitSeq(strings.TrimRight(string(p), "\n"), "\n") {
		l.add(line)
	}
	return len(p), nil
}

// logger returns a debug-level JSON logger into l.
func (l *logSink) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// waitFor waits until a line contains s, for at most d.
func (l *logSink) waitFor(s string, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, line := range l.all() {
			if strings.Contains(line, s) {
				return true
			}
		}
	}
	return false
}

// all returns the lines so far.
func (l *logSink) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// startDaemon starts a daemon child on cfg and waits until it serves. Its
// log lines go to logs (a new sink if nil). The test's cleanup kills it if
// it still runs.
func startDaemon(t *testing.T, cfg childConfig, logs *logSink) *daemonProc {
	t.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if logs == nil {
		logs = &logSink{}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &daemonProc{cmd: cmd, logs: logs, done: make(chan struct{})}
	var readers sync.WaitGroup
	readers.Go(func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			logs.add(sc.Text())
		}
	})
	first := make(chan string, 1)
	readers.Go(func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case first <- sc.Text():
			default:
			}
		}
	})
	go func() {
		readers.Wait() // the pipes are read to the end before Wait closes them
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.kill)
	select {
	case line := <-first:
		addr, ok := strings.CutPrefix(line, "listening ")
		if !ok {
			t.Fatalf("daemon child: %s", line)
		}
		p.addr = addr
	case <-p.done:
		t.Fatalf("daemon child exited before serving: %v; log:\n%s", p.err, strings.Join(logs.all(), "\n"))
	case <-time.After(30 * time.Second):
		t.Fatal("daemon child did not serve within 30s")
	}
	return p
}

// kill kills the child with SIGKILL and waits for it.
func (p *daemonProc) kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop stops the child with SIGTERM (a graceful shutdown) and returns its
// exit error.
func (p *daemonProc) stop() error {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(30 * time.Second):
		p.kill()
		return fmt.Errorf("no exit within 30s of SIGTERM")
	}
}

// memory returns the child's resident set now and at its peak, in bytes,
// from /proc.
func (p *daemonProc) memory() (rss, peak int64, err error) {
	return procMemory(p.cmd.Process.Pid)
}

// procMemory returns the resident set of process pid now (VmRSS) and at
// its peak (VmHWM), in bytes, from /proc.
func procMemory(pid int) (rss, peak int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		switch name {
		case "VmRSS":
			rss = kb << 10
		case "VmHWM":
			peak = kb << 10
		}
	}
	if rss == 0 || peak == 0 {
		return 0, 0, fmt.Errorf("no VmRSS or VmHWM in /proc/%d/status", pid)
	}
	return rss, peak, nil
}
