package batchhttp

import (
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

func TestHandler_Ownership(t *testing.T) {
	t.Parallel()

	f := batchtest.NewBlockingFetcher()
	b := setup(t, setupOpts{fetch: f.Fetch})
	id := b.submit(t, keyAlice, batchtest.Targets("own", 2), http.StatusAccepted).JobID
	absent := "6f1c2a9e-0000-4000-8000-000000000000"

	// Every probe of bob's must answer exactly what an absent id answers:
	// same status, same headers, same body bytes.
	probes := []struct{ method, path string }{
		{http.MethodGet, "/v1/batch/%s"},
		{http.MethodGet, "/v1/batch/%s?results=1"},
		{http.MethodGet, "/v1/batch/%s?wait=1s&since=0"},
		{http.MethodGet, "/v1/batch/%s/0"},
		{http.MethodGet, "/v1/batch/%s/1"},
		{http.MethodDelete, "/v1/batch/%s"},
	}
	for _, p := range probes {
		want := b.do(t, p.method, strings.Replace(p.path, "%s", absent, 1), keyBob, "")
		wantError(t, want, http.StatusNotFound, "not found")
		for _, probe := range []string{id, strings.ToUpper(id), "not..an..id", "x%2Fy", strings.Repeat("a", 65), "%00"} {
			got := b.do(t, p.method, strings.Replace(p.path, "%s", probe, 1), keyBob, "")
			if got.Code != want.Code || got.Body.String() != want.Body.String() || !maps.EqualFunc(got.Header(), want.Header(), equalStrings) {
				t.Errorf("%s %s as bob: %d %v %s; want the absent-id answer %d %v %s",
					p.method, p.path, got.Code, got.Header(), got.Body, want.Code, want.Header(), want.Body)
			}
		}
	}
	// Bob's DELETE changed nothing: the job is still alice's and running.
	var st StatusResponse
	decodeJSON(t, b.do(t, http.MethodGet, "/v1/batch/"+id, keyAlice, "").Body.Bytes(), &st)
	if st.Status != batch.JobRunning && st.Status != batch.JobQueued {
		t.Fatalf("alice's job is %s after bob's probes, want it live", st.Status)
	}
	// Bob's list shows none of alice's jobs.
	var list ListResponse
	decodeJSON(t, b.do(t, http.MethodGet, "/v1/batch", keyBob, "").Body.Bytes(), &list)
	if len(list.Jobs) != 0 {
		t.Fatalf("bob lists %+v, want nothing", list.Jobs)
	}
}

func equalStrings(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

func TestHandler_Routing(t *testing.T) {
	t.Parallel()

	b := setup(t, setupOpts{})
	id := finishedJob(t, b, batchtest.Targets("r", 1))

	t.Run("AuthenticatesFirst", func(t *testing.T) {
		t.Parallel()
		for _, req := range []struct{ method, path string }{
			{"POST", "/v1/batch"}, {"GET", "/v1/batch"}, {"GET", "/v1/batch/" + id},
			{"GET", "/v1/batch/" + id + "/0"}, {"DELETE", "/v1/batch/" + id},
			{"GET", "/v1/batch/" + id + "/results"}, {"POST", "/v1/batch/" + id + "/retry"},
			{"PUT", "/v1/batch"}, {"GET", "/v1/batch/a/b/c"}, {"GET", "/elsewhere"},
		} {
			for _, key := range []string{"", "wrong"} {
				rec := b.do(t, req.method, req.path, key, "")
				wantError(t, rec, http.StatusUnauthorized, "unauthorized")
				if !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("%s %s: WWW-Authenticate %q", req.method, req.path, rec.Header().Get("WWW-Authenticate"))
				}
			}
		}
		checkGolden(t, b.do(t, "GET", "/v1/batch/"+id, "", ""))
	})

	t.Run("MethodNotAllowed", func(t *testing.T) {
		t.Parallel()
		f := func(method, path, allow string) {
			t.Helper()
			rec := b.do(t, method, path, keyAlice, "")
			wantError(t, rec, http.StatusMethodNotAllowed, "method not allowed")
			if got := rec.Header().Get("Allow"); got != allow {
				t.Errorf("%s %s: Allow %q, want %q", method, path, got, allow)
			}
		}
		f("PUT", "/v1/batch", "GET, HEAD, POST")
		f("DELETE", "/v1/batch", "GET, HEAD, POST")
		f("POST", "/v1/batch/"+id, "DELETE, GET, HEAD")
		f("PATCH", "/v1/batch/"+id+"/0", "GET, HEAD")
		checkGolden(t, b.do(t, "PUT", "/v1/batch/"+id, keyAlice, ""))
	})

	t.Run("NotFound", func(t *testing.T) {
		t.Parallel()
		for _, path := range []string{
			"/", "//", "/v1", "/v1/batch/", "/v1/batch//", "/v1/batch/" + id + "/0/x", "/v1/batch/" + id + "/",
			"/v1/batch/./" + id, "/v1/batch/../batch", "/v1//batch", "/v1/batchx",
		} {
			rec := b.do(t, http.MethodGet, path, keyAlice, "")
			wantError(t, rec, http.StatusNotFound, "not found")
		}
	})

	t.Run("Panic", func(t *testing.T) {
		t.Parallel()
		logs := &logBuffer{}
		h := newTestHandler(t, b.runner, func(context.Context, batch.Caller, string) error {
			panic("precheck of https://secret.test/x exploded")
		}, logs, &observations{})
		rec := serve(t, h, http.MethodPost, "/v1/batch", keyAlice, `{"targets":[{"url":"https://secret.test/x"}]}`)
		wantError(t, rec, http.StatusInternalServerError, "internal error")
		if strings.Contains(logs.String(), "secret.test") {
			t.Fatalf("the panic value reached the log: %s", logs)
		}
	})
}

func TestNewHandler(t *testing.T) {
	t.Parallel()

	r := batchtest.NewRunner(t, batch.Config{})
	auth := func(http.ResponseWriter, *http.Request) (batch.Caller, bool) { return batch.Caller{}, true }
	if _, err := NewHandler(nil, &HandlerConfig{Authenticate: auth}); err == nil {
		t.Error("NewHandler(nil runner) succeeded")
	}
	if _, err := NewHandler(r, nil); err == nil {
		t.Error("NewHandler(nil opts) succeeded")
	}
	if _, err := NewHandler(r, &HandlerConfig{}); err == nil {
		t.Error("NewHandler without Authenticate succeeded")
	}
	// An authenticator that lets a nameless caller through is a host bug.
	h, err := NewHandler(r, &HandlerConfig{Authenticate: auth})
	if err != nil {
		t.Fatal(err)
	}
	rec := serveRequest(t, h, httptest.NewRequest(http.MethodGet, "/v1/batch", nil))
	wantError(t, rec, http.StatusInternalServerError, "internal error")
}
