package batchserver

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
)

// Test keys: alice and bob are plain callers, rita is restricted.
const (
	keyAlice = "alice-key"
	keyBob   = "bob-key"
	keyRita  = "rita-key"
)

var testKeys = []Key{
	{Name: "alice", Secret: keyAlice, Class: "agent"},
	{Name: "bob", Secret: keyBob, Class: "agent"},
	{Name: "rita", Secret: keyRita, Class: "guest", Restricted: true},
}

var alice = batch.Caller{Name: "alice", Class: "agent"}

// wantError checks that rec is the API's error answer with status and
// message msg.
func wantError(t *testing.T, rec *httptest.ResponseRecorder, status int, msg string) {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status %d, want %d; body %s", rec.Code, status, rec.Body)
	}
	var got batchhttp.ErrorResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("body %s: %v", rec.Body, err)
	}
	if got.Success || got.Error != msg || got.RequestID != rec.Header().Get(batchhttp.RequestIDHeader) {
		t.Fatalf("body %s, want success false, error %q and the request id", rec.Body, msg)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
}

func TestNewKeyAuth(t *testing.T) {
	t.Parallel()

	// The two refusals, exactly as the API documents them: a request
	// without a bearer key is told how to send one, a wrong key is told it
	// is invalid.
	t.Run("Answers", func(t *testing.T) {
		t.Parallel()
		auth, err := NewKeyAuth(testKeys)
		if err != nil {
			t.Fatal(err)
		}
		f := func(header, wantChallenge, wantBody string) {
			t.Helper()
			req := httptest.NewRequest(http.MethodGet, "/v1/batch", nil)
			if header != "" {
				req.Header.Set("Authorization", header)
			}
			rec := httptest.NewRecorder()
			rec.Header().Set(batchhttp.RequestIDHeader, "req-1")
			if _, ok := auth(rec, req); ok {
				t.Fatalf("%q accepted", header)
			}
			if rec.Code != http.StatusUnauthorized || rec.Header().Get("WWW-Authenticate") != wantChallenge || rec.Body.String() != wantBody+"\n" {
				t.Errorf("%q: %d, WWW-Authenticate %q, body %s; want 401, %q, %s", header, rec.Code, rec.Header().Get("WWW-Authenticate"), rec.Body, wantChallenge, wantBody)
			}
		}
		f("", `Bearer realm="batch"`,
			`{"success":false,"code":"unauthorized","error":"unauthorized","hint":"send Authorization: Bearer <key>","request_id":"req-1"}`)
		f("Bearer wrong", `Bearer realm="batch", error="invalid_token"`,
			`{"success":false,"code":"unauthorized","error":"unauthorized","request_id":"req-1"}`)
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		for name, keys := range map[string][]Key{
			"NoKeys":     nil,
			"NoName":     {{Secret: "s"}},
			"NoSecret":   {{Name: "n"}},
			"SameSecret": {{Name: "a", Secret: "s"}, {Name: "b", Secret: "s"}},
		} {
			if _, err := NewKeyAuth(keys); err == nil {
				t.Errorf("%s: NewKeyAuth succeeded", name)
			}
		}
	})

	t.Run("Header", func(t *testing.T) {
		t.Parallel()
		auth, err := NewKeyAuth(slices.Concat(testKeys, []Key{{Name: "alice", Secret: "alice-new-key", Class: "agent"}}))
		if err != nil {
			t.Fatal(err)
		}
		f := func(header []string, want batch.Caller, wantOK bool) {
			t.Helper()
			req := httptest.NewRequest(http.MethodGet, "/v1/batch", nil)
			for _, h := range header {
				req.Header.Add("Authorization", h)
			}
			rec := httptest.NewRecorder()
			got, ok := auth(rec, req)
			if ok != wantOK || got != want {
				t.Errorf("%q: got %+v, %v; want %+v, %v", header, got, ok, want, wantOK)
			}
			if !ok {
				wantError(t, rec, http.StatusUnauthorized, "unauthorized")
				if !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("%q: no Bearer challenge", header)
				}
			}
		}
		f([]string{"Bearer " + keyAlice}, alice, true)
		f([]string{"bearer  " + keyAlice + " "}, alice, true)
		f([]string{"Bearer alice-new-key"}, alice, true)
		f([]string{"Bearer " + keyRita}, batch.Caller{Name: "rita", Class: "guest", Restricted: true}, true)
		f(nil, batch.Caller{}, false)
		f([]string{""}, batch.Caller{}, false)
		f([]string{"Bearer"}, batch.Caller{}, false)
		f([]string{"Bearer "}, batch.Caller{}, false)
		f([]string{"Basic " + keyAlice}, batch.Caller{}, false)
		f([]string{keyAlice}, batch.Caller{}, false)
		f([]string{"Bearer " + keyAlice + "x"}, batch.Caller{}, false)
		f([]string{"Bearer " + keyAlice[:len(keyAlice)-1]}, batch.Caller{}, false)
		f([]string{"Bearer " + keyAlice, "Bearer " + keyBob}, batch.Caller{}, false)
	})

}
