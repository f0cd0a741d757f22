package reliability

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batchhttp/batchserver"
	"github.com/siftfetch/batchkit/examples/internal/testbin"
	"github.com/siftfetch/batchkit/internal/conntest"
)

// raceEnabled reports whether the test binary was built with -race: the
// batchd it builds is too (see race_test.go).
var raceEnabled bool

// A client with no key cannot hold every connection of the built batchd
// . With -max-conns 8 and 8 connections held, and with the
// default limits and 256 held, by either variant, a legitimate GET
// /healthz on a new connection is answered within 1s, three times in a
// row:
//
//   - partial: after one GET /healthz on a kept-alive connection, "GET"
//     (3 bytes) and nothing more, held past the header timeout (5s);
//   - unread body: GET /healthz announcing Content-Length: 10 and sending
//     no body.
//
// Each held connection is opened again (100ms later) once the server
// closes it, as an attacker would.
func TestHeldConnections(t *testing.T) {
	t.Parallel()
	bin := testbin.BuildPackage(t, "batchd", "../../batchd", raceEnabled)
	for _, limits := range []struct {
		name  string
		args  []string
		holds int
	}{
		{"max-conns-8", []string{"-max-conns", "8"}, 8},
		{"default-limits", nil, batchserver.DefaultMaxConns},
	} {
		for _, variant := range []string{"partial", "unread-body"} {
			t.Run(limits.name+"/"+variant, func(t *testing.T) {
				t.Parallel()
				d := startBatchd(t, bin, limits.args...)
				ctx, stop := context.WithCancel(t.Context())
				var holders sync.WaitGroup
				var placed, reopened atomic.Int64
				for range limits.holds {
					holders.Go(func() { holdConn(ctx, d.addr, variant, &placed, &reopened) })
				}
				defer func() {
					stop()
					holders.Wait()
					d.stop(t)
				}()
				for deadline := time.Now().Add(10 * time.Second); placed.Load() < int64(limits.holds); time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("%d of %d connections held after 10s", placed.Load(), limits.holds)
					}
				}
				hold := time.Second
				if variant == "partial" {
					hold = batchserver.DefaultHeaderTimeout + 500*time.Millisecond
				}
				sleep(ctx, hold)
				for i := range 3 {
					start := time.Now()
					if err := conntest.GetWithin(d.addr, "/healthz", time.Second); err != nil {
						t.Fatalf("legitimate GET /healthz %d with %d connections held: %v", i, limits.holds, err)
					}
					t.Logf("legitimate GET /healthz %d answered in %s", i, time.Since(start).Round(time.Millisecond))
				}
				t.Logf("the held connections were closed by the server and opened again %d times", reopened.Load())
			})
		}
	}
}

// holdConn holds one connection to addr by variant ("partial" or
// "unread-body") until ctx ends, adding 1 to placed once the first is in
// place. When the server closes it, it opens it again 100ms later,
// counting that in reopened.
func holdConn(ctx context.Context, addr, variant string, placed, reopened *atomic.Int64) {
	for first := true; ctx.Err() == nil; first = false {
		if !first {
			reopened.Add(1)
			sleep(ctx, 100*time.Millisecond)
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			continue
		}
		stop := context.AfterFunc(ctx, func() { c.Close() })
		br := bufio.NewReader(c)
		ok := false
		switch variant {
		case "partial":
			if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err == nil {
				if resp, err := http.ReadResponse(br, nil); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					_, err = io.WriteString(c, "GET")
					ok = err == nil
				}
			}
		case "unread-body":
			_, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
			ok = err == nil
		}
		if ok && first {
			placed.Add(1)
		}
		_, _ = io.Copy(io.Discard, br) // until the server closes it, or ctx ends
		stop()
		c.Close()
	}
}

// batchd is a built batchd serving on a loopback port.
type batchd struct {
	cmd    *exec.Cmd
	addr   string
	stderr *syncBuffer
	done   chan error
}

// syncBuffer is a bytes.Buffer that a process can write while a test
// reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startBatchd runs bin on a loopback port with a database of its own, the
// keys of two callers (victim and attacker) and args, and waits until it
// serves. The test's cleanup kills it if it still runs.
func startBatchd(t *testing.T, bin string, args ...string) *batchd {
	t.Helper()
	dir := t.TempDir()
	return runBatchd(t, bin, []string{"BATCHD_KEYS=victim=" + keyOf("victim") + ",attacker=" + keyOf("attacker")},
		append([]string{"-addr", "127.0.0.1:0", "-db", filepath.Join(dir, "batchd.db")}, args...)...)
}

// runBatchd runs bin with args (which must listen on some address, and
// name its database) and env on top of the test's environment, and waits
// until it serves. The test's cleanup kills it if it still runs.
func runBatchd(t testing.TB, bin string, env []string, args ...string) *batchd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	d := &batchd{cmd: cmd, stderr: &syncBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = d.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	serving := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), "serving the batch API on http://"); ok {
				addr, _, _ := strings.Cut(rest, " ")
				serving <- addr
			}
		}
		d.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-d.done
		}
	})
	select {
	case d.addr = <-serving:
	case err := <-d.done:
		d.done <- err
		t.Fatalf("batchd exited before serving: %v\n%s", err, d.stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("batchd did not serve within 30s\n%s", d.stderr)
	}
	return d
}

// stop stops batchd with SIGTERM and waits (up to 30s) for a clean exit.
func (d *batchd) stop(t *testing.T) {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("SIGTERM: %v", err)
	}
	select {
	case err := <-d.done:
		d.done <- err
		if err != nil {
			t.Errorf("batchd exited with %v\n%s", err, d.stderr)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("batchd did not stop within 30s of SIGTERM")
	}
}
