package batchstore

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// The test binary doubles as the child process of the crash and lock
// tests: with childEnv set, TestMain runs the child instead of the tests.
const (
	childEnv     = "BATCHSTORE_TEST_CHILD" // the child's mode
	childPathEnv = "BATCHSTORE_TEST_PATH"  // the database it opens
	childSyncEnv = "BATCHSTORE_TEST_SYNC"  // its Config.Synchronous
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(runChild(mode, os.Getenv(childPathEnv), Synchronous(os.Getenv(childSyncEnv))))
	}
	code := m.Run()
	removeBenchTemplates()
	if code == 0 { // no goroutine outlives the tests
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// runChild is the child process. It reports on stdout, one line per fact,
// each written only after the fact is committed.
func runChild(mode, path string, sync Synchronous) int {
	ctx := context.Background()
	s, err := Open(ctx, path, Config{Synchronous: sync})
	if err != nil {
		fmt.Printf("open-error %v\n", err)
		return 3
	}
	fmt.Println("ready")
	switch mode {
	case "hold": // keep the store open until stdin closes
		bufio.NewReader(os.Stdin).ReadString('\n')
	case "write": // the restart hook, as a runner's Start runs it, then jobs and results until killed
		n, err := s.Reap(ctx, batchdriver.ReapParams{AllLive: true, Reason: "restart"})
		if err != nil {
			fmt.Printf("error %v\n", err)
			return 4
		}
		fmt.Printf("recovered %d\n", n)
		if err := crashWriter(ctx, s); err != nil {
			fmt.Printf("error %v\n", err)
			return 4
		}
	}
	if err := s.Close(); err != nil {
		fmt.Printf("close-error %v\n", err)
		return 5
	}
	return 0
}

// childProc is a running child: its stdout lines (closed when it exits),
// and its stdin, whose closing lets a "hold" child close its store and exit.
type childProc struct {
	cmd   *exec.Cmd
	lines <-chan string
	stdin io.WriteCloser
}

// startChild starts the test binary as a child in mode on path. The test's
// cleanup kills it if it is still running.
func startChild(t *testing.T, mode, path string, sync Synchronous) *childProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, childPathEnv+"="+path, childSyncEnv+"="+string(sync))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1<<16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return &childProc{cmd: cmd, lines: lines, stdin: stdin}
}

// waitLine waits for a line with the given prefix, failing on timeout or
// on the child's exit.
func waitLine(t *testing.T, lines <-chan string, prefix string, timeout time.Duration) string {
	t.Helper()
	seen := waitLines(t, lines, prefix, timeout)
	return seen[len(seen)-1]
}

// waitLines waits for a line with the given prefix and returns every line
// read up to and including it.
func waitLines(t *testing.T, lines <-chan string, prefix string, timeout time.Duration) []string {
	t.Helper()
	deadline := time.After(timeout)
	var seen []string
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("child exited before %q", prefix)
			}
			seen = append(seen, l)
			if strings.HasPrefix(l, prefix) {
				return seen
			}
			if strings.HasPrefix(l, "open-error") || strings.HasPrefix(l, "error") {
				t.Fatalf("child: %s", l)
			}
		case <-deadline:
			t.Fatalf("no %q from the child within %s", prefix, timeout)
		}
	}
}
