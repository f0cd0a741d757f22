package batchserver

import (
	"io"
	"net/http"
	"testing"

	"github.com/siftfetch/batchkit/internal/conntest"
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
	conntest.WantRefusalClosed(t, serveLimited(t, hostAuth, Limits{}),
		"POST /v1/batch HTTP/1.1\r\nHost: x",
		"POST /v1/batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong")
}
