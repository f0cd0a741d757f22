package pgstore

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

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// The test binary doubles as a node that the crash test kills: with
// childEnv set, TestMain runs runChild instead of the tests.
const (
	childEnv       = "PGSTORE_TEST_CHILD"  // the child's mode
	childSchemaEnv = "PGSTORE_TEST_SCHEMA" // the schema it opens
)

// Timings of the crashed node and its survivor: short, so that the test
// waits seconds, not minutes.
const (
	crashHeartbeat = 200 * time.Millisecond
	crashStale     = 2 * time.Second
	crashSweep     = 500 * time.Millisecond
)

// runChild is a node: in mode "drain" it opens the store on the database's
// clock, starts a runner named crashed-node, stores target 0 of the job it
// claims and then blocks in target 1, reporting "inflight" on stdout. It
// never closes anything: the parent kills it.
func runChild(mode string) int {
	ctx := context.Background()
	s, err := Open(ctx, os.Getenv(urlEnv), Config{Schema: os.Getenv(childSchemaEnv), MaxConns: testMaxConns})
	if err != nil {
		fmt.Printf("error %v\n", err)
		return 3
	}
	switch mode {
	case "drain":
		fetch := func(ctx context.Context, _ batchdriver.Caller, t batchdriver.Target) (batch.Result, error) {
			if strings.HasSuffix(t.URL, "/0") {
				return batch.Result{Content: "kept"}, nil
			}
			fmt.Println("inflight")
			<-ctx.Done() // until the kill
			return batch.Result{}, ctx.Err()
		}
		r, err := batch.New(batch.Config{Store: s, Fetch: fetch, RunnerID: "crashed-node",
			HeartbeatInterval: batch.Duration(crashHeartbeat), StaleAfter: batch.Duration(crashStale), SweepInterval: batch.Duration(crashSweep)})
		if err != nil {
			fmt.Printf("error %v\n", err)
			return 4
		}
		if err := r.Start(ctx); err != nil {
			fmt.Printf("error %v\n", err)
			return 4
		}
		fmt.Println("ready")
		select {} // until killed
	}
	fmt.Printf("error unknown mode %q\n", mode)
	return 2
}

// child is a running node process: its stdout lines, closed when it exits.
type child struct {
	cmd   *exec.Cmd
	lines <-chan string
}

// startChild starts the test binary as a node in mode on schema. The
// test's cleanup kills it if it still runs.
func startChild(t *testing.T, mode, schema string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, childSchemaEnv+"="+schema)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		io.Copy(io.Discard, out)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return &child{cmd: cmd, lines: lines}
}

// waitLine waits for the line want from the child.
func (c *child) waitLine(t *testing.T, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("the child exited before %q", want)
			}
			if l == want {
				return
			}
			if strings.HasPrefix(l, "error") {
				t.Fatalf("child: %s", l)
			}
		case <-deadline:
			t.Fatalf("no %q from the child within %s", want, timeout)
		}
	}
}
