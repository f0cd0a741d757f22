package batchserver

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/internal/conntest"
)

// serveLimited serves h with Serve on a loopback port within limits and
// returns its address; the test's end shuts it down.
func serveLimited(t *testing.T, h http.Handler, limits Limits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	var events []string
	go func() {
		served <- Serve(ctx, ln, ServerConfig{Handler: h, Runner: &closer{events: &events}, Limits: limits, Grace: time.Second})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// idleConn opens a connection to addr and, if get is set, makes one
// request on it and reads the answer, leaving it kept alive; otherwise it
// sends nothing.
func idleConn(t *testing.T, addr string, get bool) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if !get {
		return c
	}
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("the idle connection's request: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_ = c.SetReadDeadline(time.Time{})
	return c
}

// When idle connections fill the server — kept alive after a request, or
// opened and silent, as a client without a key can do — a new client is
// served at once: the connection idle longest is closed to make room,
// while an active request (a long-poll, say) is never cut.
func TestServe_IdleConnectionsMakeRoom(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", HealthHandler())
	mux.HandleFunc("GET /hold", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
		io.WriteString(w, "held\n")
	})
	// The timeouts that would free the idle connections on their own are
	// long: only making room can serve the new client in time.
	addr := serveLimited(t, mux, Limits{MaxConns: 4, HeaderTimeout: time.Minute, IdleTimeout: time.Minute})

	held, err := http.Get("http://" + addr + "/hold") // an active request on its own connection
	if err != nil {
		t.Fatal(err)
	}
	defer held.Body.Close()
	idle := []net.Conn{idleConn(t, addr, true), idleConn(t, addr, false), idleConn(t, addr, true)}

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	for i := range 3 {
		resp, err := client.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatalf("request %d with the server full of idle connections: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	closed := 0
	for _, c := range idle {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == io.EOF {
			closed++
		}
	}
	if closed == 0 {
		t.Error("no idle connection was closed")
	}
	close(release)
	body, err := io.ReadAll(held.Body)
	if err != nil || !strings.Contains(string(body), "held") {
		t.Errorf("the active request was cut: %q, %v", body, err)
	}
}

// A client without a key cannot hold every connection slot with requests
// it never finishes: with MaxConns 4 and the default
// timeouts, four connections held by either variant leave room for a
// legitimate request, answered within 1s, three times in a row.
//
//   - partial: after one GET /healthz on a kept-alive connection, 3 bytes
//     of the next request ("GET"), then nothing. net/http waits for them
//     under IdleTimeout (60s), not HeaderTimeout; the listener must count
//     the connection idle once it has not completed its request within
//     the header timeout.
//   - unread body: GET /healthz announcing a 10-byte body it never sends.
//     The 200 must go out at once and the connection close a moment
//     later, not be held while net/http waits (ReadTimeout, 30s) to
//     discard the body.
func TestServe_HeldConnectionsMakeRoom(t *testing.T) {
	t.Parallel()
	for _, variant := range []string{"partial", "unread body"} {
		t.Run(variant, func(t *testing.T) {
			t.Parallel()
			mux := http.NewServeMux()
			mux.Handle("GET /healthz", HealthHandler())
			addr := serveLimited(t, mux, Limits{MaxConns: 4})
			for range 4 {
				if variant == "partial" {
					c := idleConn(t, addr, true)
					if _, err := io.WriteString(c, "GET"); err != nil {
						t.Fatal(err)
					}
					continue
				}
				c := idleConn(t, addr, false)
				if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n"); err != nil {
					t.Fatal(err)
				}
			}
			if variant == "partial" {
				// Held past the header timeout, as an attacker holds them.
				time.Sleep(DefaultHeaderTimeout + 500*time.Millisecond)
			}
			for i := range 3 {
				if err := conntest.GetWithin(addr, "/healthz", time.Second); err != nil {
					t.Fatalf("legitimate request %d with 4 connections held: %v", i, err)
				}
			}
		})
	}
}
