package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestEmbed_RefusedStalledBody sends requests that withCaller, the host's
// own auth middleware, refuses, each announcing a body it never sends: the
// 401 comes at once and the connection ends with it, not at the server's
// 30s read timeout.
func TestEmbed_RefusedStalledBody(t *testing.T) {
	t.Parallel()
	h := startHost(t)
	for _, head := range []string{
		"POST /v1/batch HTTP/1.1\r\nHost: x",
		"POST /v1/batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong",
		"GET /v1/fetch HTTP/1.1\r\nHost: x",
	} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
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
		if n, err := conn.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Errorf("%q: after the answer, read %d bytes, %v; want EOF within 5s", head, n, err)
		}
	}
}
