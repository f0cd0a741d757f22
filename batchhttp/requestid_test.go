package batchhttp

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestValidRequestID(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"a", "req-1", "A.b_C-9", strings.Repeat("x", 64)} {
		if !ValidRequestID(id) {
			t.Errorf("ValidRequestID(%q) = false, want true", id)
		}
	}
	for _, id := range []string{"", strings.Repeat("x", 65), "a b", "https://example.test/", "a\nb", "é", "a/b", "a;b"} {
		if ValidRequestID(id) {
			t.Errorf("ValidRequestID(%q) = true, want false", id)
		}
	}
}

func TestHandler_RequestID(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})

	get := func(ids ...string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/v1/batch/nope", nil)
		req.Header.Set("Authorization", "Bearer "+keyAlice)
		for _, id := range ids {
			req.Header.Add(RequestIDHeader, id)
		}
		return serveRequest(t, b.handler, req)
	}

	// A well-formed id is kept, in the header, the error body and the log.
	rec := get("agent-7.call_3")
	if got := rec.Header().Get(RequestIDHeader); got != "agent-7.call_3" {
		t.Errorf("header %s = %q, want the request's own", RequestIDHeader, got)
	}
	wantError(t, rec, http.StatusNotFound, "not found")
	lines := b.logs.lines(t)
	if last := lines[len(lines)-1]; last["request_id"] != "agent-7.call_3" {
		t.Errorf("log line request_id = %v, want agent-7.call_3", last["request_id"])
	}

	// Anything else is replaced by a fresh id, unique per request.
	seen := map[string]bool{}
	for _, ids := range [][]string{nil, {""}, {"has space"}, {strings.Repeat("y", 65)}, {"a", "b"}, {"http://h.test/"}} {
		rec := get(ids...)
		got := rec.Header().Get(RequestIDHeader)
		if !ValidRequestID(got) || seen[got] || (len(ids) == 1 && got == ids[0]) {
			t.Errorf("request ids %q: answer id %q, want a new well-formed one", ids, got)
		}
		seen[got] = true
		wantError(t, rec, http.StatusNotFound, "not found")
	}

	// A success carries one too, and unauthenticated answers as well.
	rec = b.do(t, http.MethodGet, "/v1/batch", keyAlice, "")
	if rec.Code != http.StatusOK || rec.Header().Get(RequestIDHeader) != testRequestID {
		t.Errorf("list: status %d, %s %q", rec.Code, RequestIDHeader, rec.Header().Get(RequestIDHeader))
	}
	rec = b.do(t, http.MethodGet, "/v1/batch", "", "")
	wantError(t, rec, http.StatusUnauthorized, "unauthorized")
	if rec.Header().Get(RequestIDHeader) != testRequestID {
		t.Errorf("401: %s %q", RequestIDHeader, rec.Header().Get(RequestIDHeader))
	}
}

func TestWithRequestID(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	var inner string
	mux := http.NewServeMux()
	mux.Handle("/v1/batch/", b.handler)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		inner = w.Header().Get(RequestIDHeader)
		w.WriteHeader(http.StatusNoContent)
	})
	h := WithRequestID(mux)

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if got := rec.Header().Get(RequestIDHeader); !ValidRequestID(got) || got != inner {
		t.Errorf("healthz: answer id %q, seen inside %q", got, inner)
	}

	// The handler behind it answers with the id the middleware chose.
	req := httptest.NewRequest(http.MethodGet, "/v1/batch/nope", nil)
	req.Header.Set("Authorization", "Bearer "+keyAlice)
	req.Header.Set(RequestIDHeader, "bad id")
	rec = serveRequest(t, h, req)
	id := rec.Header().Get(RequestIDHeader)
	if len(rec.Header().Values(RequestIDHeader)) != 1 || !ValidRequestID(id) {
		t.Errorf("answer ids %q, want one well-formed id", rec.Header().Values(RequestIDHeader))
	}
	wantError(t, rec, http.StatusNotFound, "not found")
}
