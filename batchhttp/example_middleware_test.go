package batchhttp_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
)

// A host puts its own authentication in front of the API, under a prefix
// of its own. Its middleware finds the caller and hands it on in the
// request's context; the Handler's Authenticate reads it back. The whole
// is wrapped in CloseRefused (batchserver.Serve does that itself), so a
// request the middleware refuses cannot hold its connection with a body it
// never sends.
func ExampleCloseRefused() {
	runner := startRunner(batch.Config{JobsPerCaller: 1})
	defer runner.Close(context.Background())
	type callerKey struct{}
	api, err := batchhttp.NewHandler(runner, &batchhttp.HandlerConfig{
		Prefix: "/api",
		Authenticate: func(w http.ResponseWriter, r *http.Request) (batch.Caller, bool) {
			c, ok := r.Context().Value(callerKey{}).(batch.Caller)
			return c, ok
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	api.Mount(mux)
	hostAuth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer s3cret" {
				batchhttp.WriteError(w, http.StatusUnauthorized, batchhttp.CodeUnauthorized, "unauthorized", "")
				return
			}
			ctx := context.WithValue(r.Context(), callerKey{}, batch.Caller{Name: "agent-1"})
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
	srv := httptest.NewServer(batchhttp.CloseRefused(hostAuth(mux)))
	defer srv.Close()

	post := func(key string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/batch", strings.NewReader(`{"targets":[{"url":"https://example.com/slow"}]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, "closes the connection:", resp.Close)
	}
	post("wrong")
	post("s3cret")
	// Output:
	// 401 closes the connection: true
	// 202 closes the connection: false
}
