package batchhttp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/internal/conntest"
)

// hostAuthAPI is a host's API as examples/embed builds it: the host's own
// auth middleware in front of the [Handler], which refuses a request
// without a key with a 401 of its own before the Handler runs, and a
// Handler that reads the caller the middleware found.
func hostAuthAPI(t *testing.T) http.Handler {
	t.Helper()
	type callerKey struct{}
	r := batchtest.NewRunner(t, batch.Config{})
	api, err := NewHandler(r, &HandlerConfig{Authenticate: func(w http.ResponseWriter, r *http.Request) (batch.Caller, bool) {
		c, ok := r.Context().Value(callerKey{}).(batch.Caller)
		return c, ok
	}})
	if err != nil {
		t.Fatal(err)
	}
	v1 := http.NewServeMux()
	api.Mount(v1)
	auth, err := CallerFunc(testAuth), error(nil)
	if err != nil {
		t.Fatal(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := auth(w, r); ok {
			v1.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
		}
	})
}

// wantRefusalClosed checks that a request refused by the host's
// middleware, which announces a body it never sends, is answered 401 and
// its connection closed well before the server's 30s read timeout.
func wantRefusalClosed(t *testing.T, addr string) {
	t.Helper()
	conntest.WantRefusalClosed(t, addr,
		"POST /v1/batch HTTP/1.1\r\nHost: x",
		"POST /v1/batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong")
}

// A host that runs its own server and puts its auth middleware in front
// of the API wraps the whole in CloseRefused: a request the middleware
// refuses, with a stalled body, has its connection closed at once, not
// held until the server's read timeout.
func TestCloseRefused_HostMiddleware(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(CloseRefused(hostAuthAPI(t)))
	srv.Config.ReadTimeout = 30 * time.Second // as Serve's default
	srv.Start()
	t.Cleanup(srv.Close)
	wantRefusalClosed(t, srv.Listener.Addr().String())
}

// A handler behind CloseRefused still finds the server's writer: one that
// asserts http.Flusher streams, and one that asserts http.Hijacker can
// take the connection.
func TestCloseRefused_WriterInterfaces(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /flush", func(w http.ResponseWriter, _ *http.Request) {
		f, ok := w.(http.Flusher)
		if !ok {
			http.Error(w, "not a Flusher", http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "flushed")
		f.Flush()
	})
	mux.HandleFunc("GET /hijack", func(w http.ResponseWriter, _ *http.Request) {
		h, ok := w.(http.Hijacker)
		if !ok {
			http.Error(w, "not a Hijacker", http.StatusInternalServerError)
			return
		}
		conn, buf, err := h.Hijack()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer conn.Close()
		buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
		buf.Flush()
	})
	srv := httptest.NewServer(CloseRefused(mux))
	t.Cleanup(srv.Close)
	for _, path := range []string{"/flush", "/hijack"} {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != path[1:]+"ed" {
			t.Errorf("GET %s: %s %q", path, resp.Status, body)
		}
	}
}
