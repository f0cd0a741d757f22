package batchhttp

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// TestHandler_PrefixHints serves the API under a prefix three ways (the
// Prefix option, http.StripPrefix, and both) and checks that every hint
// naming a route names it under the prefix, where a client that follows
// the hint reaches the API, not under the bare /v1/batch (a 404).
func TestHandler_PrefixHints(t *testing.T) {
	t.Parallel()
	newHandler := func(t *testing.T, r Runner, prefix string) *Handler {
		t.Helper()
		auth, err := CallerFunc(testAuth), error(nil)
		if err != nil {
			t.Fatal(err)
		}
		h, err := NewHandler(r, &HandlerConfig{Authenticate: auth, Prefix: prefix, MaxResultsBytes: 1})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	mounts := []struct {
		name, base string // base: where a client finds the API
		mount      func(t *testing.T, r Runner) http.Handler
	}{
		{"Both", "/outer/api", func(t *testing.T, r Runner) http.Handler {
			return http.StripPrefix("/outer", newHandler(t, r, "/api"))
		}},
		{"Option", "/api", func(t *testing.T, r Runner) http.Handler {
			mux := http.NewServeMux()
			newHandler(t, r, "/api").Mount(mux)
			return mux
		}},
		{"StripPrefix", "/api", func(t *testing.T, r Runner) http.Handler {
			mux := http.NewServeMux()
			h := newHandler(t, r, "")
			mux.Handle("/api/v1/batch", http.StripPrefix("/api", h))
			mux.Handle("/api/v1/batch/", http.StripPrefix("/api", h))
			return mux
		}},
	}
	for _, m := range mounts {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			f := batchtest.NewBlockingFetcher()
			f.Release() // the first job's one fetch returns at once; the second's blocks
			r := batchtest.NewRunner(t, batch.Config{Fetch: f.Fetch, PollInterval: batch.Duration(10 * time.Millisecond)})
			srv := httptest.NewServer(m.mount(t, r))
			t.Cleanup(srv.Close)
			c, err := NewClient(srv.URL+m.base, keyAlice, srv.Client())
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			wantHint := func(what string, err error, code string) {
				t.Helper()
				ae, ok := errors.AsType[*APIError](err)
				if !ok || ae.Code != code {
					t.Fatalf("%s: %v, want %s", what, err, code)
				}
				if n := strings.Count(ae.Hint, "/v1/batch"); n == 0 || strings.Count(ae.Hint, m.base+"/v1/batch") != n {
					t.Errorf("%s: hint %q, want every route in it under %s", what, ae.Hint, m.base)
				}
			}

			done, err := c.Submit(ctx, batchtest.Targets("done", 1))
			if err != nil {
				t.Fatalf("submit: %v", err)
			}
			st, err := c.Status(ctx, done.JobID, StatusQuery{Wait: 10 * time.Second, Since: new(int)})
			if err != nil || !st.Status.Finished() {
				t.Fatalf("status = %+v, %v; want finished", st, err)
			}
			_, err = c.Status(ctx, done.JobID, StatusQuery{Results: true})
			wantHint("?results=1 over MaxResultsBytes", err, CodeResultsTooLarge)

			live, err := c.Submit(ctx, batchtest.Targets("live", 1))
			if err != nil {
				t.Fatalf("submit: %v", err)
			}
			_, err = c.Submit(ctx, batchtest.Targets("busy", 1))
			wantHint("a submit beyond jobs_per_caller", err, CodeCallerBusy)
			_, err = c.Retry(ctx, live.JobID)
			wantHint("a retry of a live job", err, CodeJobLive)
		})
	}
}
