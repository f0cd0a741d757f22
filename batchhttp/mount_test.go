package batchhttp

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// TestHandler_Prefix serves the API under "/api" two ways, with
// HandlerConfig.Prefix and Mount, and with http.StripPrefix in front of a
// handler without one, and drives every route through a Client whose base
// URL carries the prefix.
func TestHandler_Prefix(t *testing.T) {
	t.Parallel()
	mounts := map[string]func(t *testing.T, r Runner, auth CallerFunc) *http.ServeMux{
		"Option": func(t *testing.T, r Runner, auth CallerFunc) *http.ServeMux {
			h, err := NewHandler(r, &HandlerConfig{Authenticate: auth, Prefix: "/api"})
			if err != nil {
				t.Fatal(err)
			}
			mux := http.NewServeMux()
			h.Mount(mux)
			return mux
		},
		"StripPrefix": func(t *testing.T, r Runner, auth CallerFunc) *http.ServeMux {
			h, err := NewHandler(r, &HandlerConfig{Authenticate: auth})
			if err != nil {
				t.Fatal(err)
			}
			mux := http.NewServeMux()
			mux.Handle("/api/v1/batch", http.StripPrefix("/api", h))
			mux.Handle("/api/v1/batch/", http.StripPrefix("/api", h))
			return mux
		},
	}
	for name, mount := range mounts {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := batchtest.NewRunner(t, batch.Config{Fetch: batchtest.StaticFetcher("page"), PollInterval: batch.Duration(10 * time.Millisecond)})
			auth := CallerFunc(testAuth)
			srv := httptest.NewServer(mount(t, r, auth))
			t.Cleanup(srv.Close)
			c, err := NewClient(srv.URL+"/api", keyAlice, srv.Client())
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			sub, err := c.Submit(ctx, batchtest.Targets("p", 2))
			if err != nil {
				t.Fatalf("submit: %v", err)
			}
			st, err := c.Status(ctx, sub.JobID, StatusQuery{Wait: 10 * time.Second, Since: new(int)})
			for err == nil && !st.Status.Finished() {
				st, err = c.Status(ctx, sub.JobID, StatusQuery{Wait: 10 * time.Second, Since: &st.TargetsDone})
			}
			if err != nil || st.Status != batch.JobDone || st.TargetsDone != 2 {
				t.Fatalf("status = %+v, %v; want done 2/2", st, err)
			}
			res, err := c.Result(ctx, sub.JobID, 1)
			if err != nil || res.Status != batch.TargetDone {
				t.Errorf("result = %+v, %v", res, err)
			}
			n := 0
			for _, err := range c.Results(ctx, sub.JobID, ResultsQuery{}) {
				if err != nil {
					t.Fatalf("results: %v", err)
				}
				n++
			}
			if n != 2 {
				t.Errorf("results stream: %d lines, want 2", n)
			}
			if list, err := c.List(ctx, 0); err != nil || len(list.Jobs) != 1 {
				t.Errorf("list = %+v, %v", list, err)
			}
			if _, err := c.Retry(ctx, sub.JobID); err == nil || !strings.Contains(err.Error(), "nothing") {
				t.Errorf("retry of a done job = %v, want 409 nothing_to_retry", err)
			}
			if _, err := c.Cancel(ctx, sub.JobID); err == nil || !strings.Contains(err.Error(), "finished") {
				t.Errorf("cancel of a done job = %v, want 409", err)
			}

			// Under the prefix, an unknown path is the API's JSON 404 and
			// a wrong method its 405; the unprefixed path is not the API's.
			get := func(method, path string) (*http.Response, string) {
				t.Helper()
				req, _ := http.NewRequestWithContext(ctx, method, srv.URL+path, nil)
				req.Header.Set("Authorization", "Bearer "+keyAlice)
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp, string(b)
			}
			if resp, body := get(http.MethodGet, "/api/v1/batch/"+sub.JobID+"/0/extra"); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, `"code":"not_found"`) {
				t.Errorf("unknown path under the prefix: %d %s", resp.StatusCode, body)
			}
			if resp, _ := get(http.MethodPut, "/api/v1/batch/"+sub.JobID); resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "DELETE, GET, HEAD" {
				t.Errorf("PUT under the prefix: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
			}
			if resp, body := get(http.MethodGet, "/v1/batch/"+sub.JobID); resp.StatusCode != http.StatusNotFound || strings.Contains(body, sub.JobID) {
				t.Errorf("the unprefixed path: %d %s, want the mux's own 404", resp.StatusCode, body)
			}
		})
	}
}

func TestNewHandler_BadPrefix(t *testing.T) {
	t.Parallel()
	auth := CallerFunc(testAuth)
	r := batchtest.NewRunner(t, batch.Config{Fetch: batchtest.StaticFetcher("x")})
	for _, p := range []string{"api", "/api/", "/", "/a//b", "/a/../b", "/{id}", "/a b"} {
		if _, err := NewHandler(r, &HandlerConfig{Authenticate: auth, Prefix: p}); err == nil || !strings.Contains(err.Error(), "Prefix") {
			t.Errorf("Prefix %q: %v, want an error naming Prefix", p, err)
		}
	}
	for _, p := range []string{"", "/api", "/sift/v2"} {
		if _, err := NewHandler(r, &HandlerConfig{Authenticate: auth, Prefix: p}); err != nil {
			t.Errorf("Prefix %q: %v", p, err)
		}
	}
}

// TestRoutes_Allow: the Allow header of every path names exactly the
// methods its routes have (and HEAD with GET).
func TestRoutes_Allow(t *testing.T) {
	t.Parallel()
	want := map[string]string{
		RouteList: "GET, HEAD, POST", RouteJob: "DELETE, GET, HEAD", RouteResult: "GET, HEAD",
		RouteResults: "GET, HEAD", RouteRetry: "POST", RouteWebhookSecret: "GET, HEAD",
	}
	for _, p := range routePaths() {
		if got := allowHeader(p); got != want[p] {
			t.Errorf("Allow of %s = %q, want %q", p, got, want[p])
		}
	}
	if len(routePaths()) != len(want) {
		t.Errorf("paths %q, want %d", routePaths(), len(want))
	}
}
