package batchserver

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// Serve closes the connection of a request that a host's own middleware
// refuses (the API's handler never runs) when its body was not read, as it
// does for the API's own refusals: nothing for the host to wrap. Serve's
// read timeout is 30s; the connection must end well before.
func TestServe_HostMiddlewareRefusal(t *testing.T) {
	t.Parallel()
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusAccepted)
	})
	hostAuth := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer right" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="batch"`)
			http.Error(w, `{"success":false,"error":"unauthorized"}`, http.StatusUnauthorized)
			return
		}
		api.ServeHTTP(w, r)
	})
	addr := serveLimited(t, hostAuth, Limits{})
	for _, head := range []string{
		"POST /v1/batch HTTP/1.1\r\nHost: x",
		"POST /v1/batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong",
	} {
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
		if n, err := conn.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Errorf("%q: after the answer, read %d bytes, %v; want EOF within 5s", head, n, err)
		}
	}
}
