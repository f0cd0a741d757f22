// Package apitest serves the batch HTTP API over a runner, mounted as a
// host mounts it, for the tests of the packages that talk to it: the CLI
// and the example programs.
package apitest

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/batchhttp/batchserver"
)

// Serve serves r through a [batchhttp.Handler] that accepts keys (and no
// pre-check), on "/v1/batch" and "/v1/batch/" of a loopback test server
// that tb's cleanup closes, and returns the server's URL.
func Serve(tb testing.TB, r batchhttp.Runner, keys ...batchserver.Key) string {
	tb.Helper()
	auth, err := batchserver.NewKeyAuth(keys)
	if err != nil {
		tb.Fatal(err)
	}
	h, err := batchhttp.NewHandler(r, &batchhttp.HandlerConfig{Authenticate: auth})
	if err != nil {
		tb.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/batch", h)
	mux.Handle("/v1/batch/", h)
	srv := httptest.NewServer(mux)
	tb.Cleanup(srv.Close)
	return srv.URL
}
