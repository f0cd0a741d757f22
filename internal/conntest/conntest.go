// Package conntest is, for tests, the client side of a connection: it
// checks what a server does with a client's raw connection, and carries
// a bearer key for a client that sends no headers of its own.
package conntest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// WantRefusalClosed sends each request head (a request line and headers,
// without the blank line) to addr with "Content-Length: 10" and no body,
// and checks that the answer is a 401 that comes within 5s, followed by
// the end of the connection: a refused client cannot hold the connection
// with a body it never sends. The server's read timeout must be well over
// 5s for the check to mean anything.
func WantRefusalClosed(t *testing.T, addr string, heads ...string) {
	t.Helper()
	for _, head := range heads {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, head+"\r\nContent-Length: 10\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Errorf("%q: no answer within 5s: %v", head, err)
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%q: %s, want 401", head, resp.Status)
		}
		// The answer was read to its end; what follows must be EOF, not
		// the deadline.
		if n, err := conn.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Errorf("%q: after the answer, read %d bytes, %v; want EOF within 5s", head, n, err)
		}
	}
}

// GetWithin makes one GET of path on a new connection to addr, as curl
// would, and reads a 200 answer, all within d.
func GetWithin(addr, path string, d time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, d)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return fmt.Errorf("no answer within %s: %w", d, err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("answer %s, want 200", resp.Status)
	}
	return nil
}
