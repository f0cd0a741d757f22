package daemon

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchhttp"
)

// serveTest opens a daemon on cfg (a database in the test's directory and
// one key unless it says otherwise) and serves it with serveOn.
func serveTest(t *testing.T, cfg Config) string {
	t.Helper()
	d, err := Open(t.Context(), testConfig(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	return serveOn(t, d)
}

// serveOn runs d's own server (Serve, with its limits) on a loopback
// listener until tb ends, and returns its address. Serve closes d.
func serveOn(tb testing.TB, d *Daemon) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.Serve(ctx, ln, 5*time.Second) }()
	tb.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			tb.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// statusLine sends raw on a new connection and returns the answer's status
// line, or "" if none came within timeout.
func statusLine(t *testing.T, addr, raw string, timeout time.Duration) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		return ""
	}
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}

// Headers are capped at a size that fits the API: a 1 MB header is refused
// before it is held (issue 9, finding 3).
func TestDaemon_HeaderSizeCapped(t *testing.T) {
	t.Parallel()
	addr := serveTest(t, Config{})
	big := "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + strings.Repeat("a", 64<<10) + "\r\n\r\n"
	if got := statusLine(t, addr, big, 5*time.Second); got != "HTTP/1.1 431 Request Header Fields Too Large" {
		t.Fatalf("answer to a 64 KiB header: %q, want 431", got)
	}
	if got := statusLine(t, addr, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 5*time.Second); got != "HTTP/1.1 200 OK" {
		t.Fatalf("a plain request after it: %q", got)
	}
}

// A client that sends half its headers and stalls is cut off at the header
// timeout, and one that stalls its body at the read timeout: neither holds
// a connection for good (finding 1).
func TestDaemon_StalledClientsCutOff(t *testing.T) {
	t.Parallel()
	addr := serveTest(t, Config{Limits: batchhttp.Limits{HeaderTimeout: 200 * time.Millisecond, ReadTimeout: 500 * time.Millisecond}, BodyTimeout: 500 * time.Millisecond})
	for name, raw := range map[string]string{
		"half the headers":    "POST /v1/batch HTTP/1.1\r\nHost: x\r\n",
		"a stalled body":      "POST /v1/batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice-key\r\nContent-Length: 100\r\n\r\n{",
		"a stalled anon body": "POST /v1/batch HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{",
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, raw)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = io.ReadAll(c) // the answer, if any, then EOF when the server hangs up
		c.Close()
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Errorf("%s: the connection was still open after 5s", name)
		}
	}
}

// At most MaxConns connections are served at once; the next waits to be
// accepted, and is served once one closes.
func TestDaemon_ConnectionsCapped(t *testing.T) {
	t.Parallel()
	addr := serveTest(t, Config{Limits: batchhttp.Limits{MaxConns: 2, HeaderTimeout: time.Minute}})
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n") // stalls mid-headers
		held = append(held, c)
	}
	time.Sleep(100 * time.Millisecond) // both accepted
	third := make(chan string, 1)
	go func() { third <- statusLine(t, addr, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 10*time.Second) }()
	select {
	case got := <-third:
		t.Fatalf("a third connection was served while two were held: %q", got)
	case <-time.After(300 * time.Millisecond):
	}
	held[0].Close()
	if got := <-third; got != "HTTP/1.1 200 OK" {
		t.Fatalf("the third connection after one closed: %q", got)
	}
}

// Request lines are debug lines: at the default info level a read writes
// no log line at all (finding 5).
func TestDaemon_RequestLinesAtDebug(t *testing.T) {
	t.Parallel()
	var logs batchtest.Buffer
	srv := openTest(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	before := logs.String()
	if code, _ := get(t, srv.URL+"/healthz", ""); code != http.StatusOK {
		t.Fatal(code)
	}
	if code, _ := get(t, srv.URL+"/v1/batch", "alice-key"); code != http.StatusOK {
		t.Fatal(code)
	}
	if after := logs.String(); after != before {
		t.Fatalf("requests logged at info:\n%s", strings.TrimPrefix(after, before))
	}
}
