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

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/batchhttp/batchserver"
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
// before it is held.
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
	addr := serveTest(t, Config{Limits: batchserver.Limits{HeaderTimeout: 200 * time.Millisecond, ReadTimeout: 500 * time.Millisecond}, BodyTimeout: 500 * time.Millisecond})
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

// At most MaxConns connections are served at once: while as many hold
// active requests (here submits whose bodies stall), the next waits to be
// accepted, and is served once one closes.
func TestDaemon_ConnectionsCapped(t *testing.T) {
	t.Parallel()
	addr := serveTest(t, Config{Limits: batchserver.Limits{MaxConns: 2, HeaderTimeout: time.Minute}, BodyTimeout: time.Minute})
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = io.WriteString(c, "POST /v1/batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice-key\r\nContent-Length: 100\r\n\r\n{") // stalls mid-body
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

// Idle connections do not hold the server: with every connection idle —
// opened and silent mid-headers, or kept alive after a request, as a
// client without a key can do — a new client is served at once, the
// connection idle longest closed to make room.
func TestDaemon_IdleConnectionsMakeRoom(t *testing.T) {
	t.Parallel()
	addr := serveTest(t, Config{Limits: batchserver.Limits{MaxConns: 2, HeaderTimeout: time.Minute, IdleTimeout: time.Minute}})
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	_, _ = io.WriteString(silent, "GET /healthz HTTP/1.1\r\nHost: x\r\n") // stalls mid-headers
	kept := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	defer kept.CloseIdleConnections()
	resp, err := kept.Get("http://" + addr + "/healthz") // its connection stays open, idle
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	for i := range 3 {
		if got := statusLine(t, addr, "GET /v1/batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice-key\r\n\r\n", 5*time.Second); got != "HTTP/1.1 200 OK" {
			t.Fatalf("request %d with every connection idle: %q, want 200 at once", i, got)
		}
	}
}

// One caller's long-polls and results streams are capped, each with its
// code, while another caller is served.
func TestDaemon_HeldRequestsCappedPerCaller(t *testing.T) {
	t.Parallel()
	hang, err := net.Listen("tcp", "127.0.0.1:0") // accepts and never answers: the job stays running
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hang.Close() })
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	addr := serveTest(t, Config{
		Keys:  []batchserver.Key{{Name: "alice", Secret: "alice-key"}, {Name: "bob", Secret: "bob-key"}},
		Allow: []string{hang.Addr().String()},
	})
	server := "http://" + addr
	client, _ := batchhttp.NewClient(server, "alice-key", nil)
	sub, err := client.Submit(t.Context(), []batch.Target{{URL: "http://" + hang.Addr().String() + "/"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	do := func(ctx context.Context, path, key string) (int, string, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, server+path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err.Error(), ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header.Get("Retry-After")
	}
	// f holds n requests of path as alice (each retried until it is let
	// in), and then expects one more, of probe, to be refused with code.
	f := func(path, probe string, n int, code string) {
		t.Helper()
		for range n {
			go func() {
				for ctx.Err() == nil {
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, server+path, nil)
					req.Header.Set("Authorization", "Bearer alice-key")
					resp, err := hc.Do(req)
					if err != nil {
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusTooManyRequests {
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			}()
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			status, body, retry := do(t.Context(), probe, "alice-key")
			if status == http.StatusTooManyRequests {
				if !strings.Contains(body, `"code":"`+code+`"`) || retry != "5" {
					t.Errorf("%s over the cap: %s, Retry-After %q; want %s, 5", probe, body, retry, code)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d held and one more, never refused (last: %d %s)", path, n, status, body)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	job := "/v1/batch/" + sub.JobID
	f(job+"?wait=60s", job+"?wait=100ms", batchhttp.DefaultMaxWaitsPerCaller, batchhttp.CodeWaitsBusy)
	f(job+"/results?follow=1", job+"/results", batchhttp.DefaultMaxStreamsPerCaller, batchhttp.CodeStreamsBusy)
	if status, body, _ := do(t.Context(), "/v1/batch", "bob-key"); status != http.StatusOK {
		t.Errorf("bob's list while alice holds her caps: %d %s", status, body)
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
