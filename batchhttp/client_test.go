package batchhttp

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// newClientServer serves h on a loopback server, each answer recorded to
// be checked against openapi.json (see checked), and returns a client for
// it with key.
func newClientServer(t *testing.T, h http.Handler, key string) *Client {
	t.Helper()
	srv := checkedServer(t, h)
	c, err := NewClient(srv.URL, key, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClient(t *testing.T) {
	t.Parallel()

	t.Run("APIError", func(t *testing.T) {
		t.Parallel()
		f := batchtest.NewBlockingFetcher()
		b := setup(t, setupOpts{fetch: f.Fetch, precheck: PrecheckURL})
		c := newClientServer(t, b.handler, keyAlice)
		ctx := t.Context()
		if _, err := c.Submit(ctx, batchtest.Targets("a", 1)); err != nil {
			t.Fatal(err)
		}
		_, err := c.Submit(ctx, batchtest.Targets("b", 1))
		want := &APIError{StatusCode: 429, Code: CodeCallerBusy, Message: "busy: a batch of yours is still running",
			Hint: "wait for it (GET /v1/batch lists your jobs) or cancel it", RetryAfter: 30 * time.Second}
		ae, ok := errors.AsType[*APIError](err)
		if !ok || !ValidRequestID(ae.RequestID) {
			t.Fatalf("second submit: %#v, want an *APIError with a request id", err)
		}
		if ae.RequestID = ""; *ae != *want {
			t.Fatalf("second submit: %#v, want %#v", ae, want)
		}
		_, err = c.Submit(ctx, []batch.Target{{URL: "http://127.0.0.1/"}})
		if ae, ok := errors.AsType[*APIError](err); !ok || ae.StatusCode != 422 || ae.Code != CodeBlocked || ae.Message != "blocked: target 0: loopback address" {
			t.Fatalf("blocked submit: %v", err)
		}
		_, err = c.Status(ctx, "nope", StatusQuery{})
		if !IsNotFound(err) || err.Error() != "batchhttp: 404 not found" {
			t.Fatalf("unknown id: %v", err)
		}
		_, err = newClientServer(t, b.handler, "wrong").List(ctx, 0)
		if ae, ok := errors.AsType[*APIError](err); !ok || ae.StatusCode != 401 {
			t.Fatalf("wrong key: %v", err)
		}
	})

	t.Run("NewClient", func(t *testing.T) {
		t.Parallel()
		for _, base := range []string{"", "127.0.0.1:8080", "ftp://h/", "http://", "http://h/?q=1", "http://h/#f", "http://h/%zz"} {
			if _, err := NewClient(base, "k", nil); err == nil {
				t.Errorf("NewClient(%q) succeeded", base)
			}
		}
	})

	t.Run("NotJSON", func(t *testing.T) {
		t.Parallel()
		// A proxy's answer, not the handler's: not held against openapi.json.
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT")
			http.Error(w, "<html>bad gateway</html>", http.StatusBadGateway)
		}))
		t.Cleanup(srv.Close)
		c, err := NewClient(srv.URL, "", srv.Client())
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.List(t.Context(), 0)
		want := &APIError{StatusCode: 502, Message: "bad gateway"}
		if ae, ok := errors.AsType[*APIError](err); !ok || *ae != *want {
			t.Fatalf("List: %#v, want %#v", err, want)
		}
	})

	t.Run("PathPrefix", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		mux := http.NewServeMux()
		mux.Handle("/api/", http.StripPrefix("/api", checked(t, b.handler)))
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		c, err := NewClient(srv.URL+"/api/", keyAlice, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.List(t.Context(), 5); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("RoundTrip", func(t *testing.T) {
		t.Parallel()
		f := batchtest.NewBlockingFetcher()
		b := setup(t, setupOpts{fetch: f.Fetch})
		c := newClientServer(t, b.handler, keyAlice)
		ctx := t.Context()

		sub, err := c.Submit(ctx, batchtest.Targets("rt", 3))
		if err != nil || !sub.Success || sub.Status != batch.JobQueued || sub.Targets != 3 || sub.Reused {
			t.Fatalf("Submit = %+v, %v", sub, err)
		}
		<-f.Started
		f.Release()
		since := 0
		st, err := c.Status(ctx, sub.JobID, StatusQuery{Results: true, Wait: 10 * time.Second, Since: &since})
		if err != nil || st.TargetsDone != 1 || st.Targets[0].Result == nil || st.ExpiresAt.IsZero() {
			t.Fatalf("Status = %+v, %v", st, err)
		}
		res, err := c.Result(ctx, sub.JobID, 0)
		if err != nil || res.Status != batch.TargetDone || string(res.Result) != `{"content":"released:https://example.test/rt/0"}` {
			t.Fatalf("Result = %+v, %v", res, err)
		}
		list, err := c.List(ctx, 10)
		if err != nil || len(list.Jobs) != 1 || list.Jobs[0].JobID != sub.JobID {
			t.Fatalf("List = %+v, %v", list, err)
		}
		can, err := c.Cancel(ctx, sub.JobID)
		if err != nil || !can.Success || can.Status != batch.JobCancelled {
			t.Fatalf("Cancel = %+v, %v", can, err)
		}
		if _, err := c.Cancel(ctx, sub.JobID); err == nil || err.(*APIError).StatusCode != http.StatusConflict {
			t.Fatalf("second Cancel: %v, want 409", err)
		}
		if _, err := c.Result(ctx, sub.JobID, 3); !IsNotFound(err) {
			t.Fatalf("Result of idx 3: %v, want 404", err)
		}
	})
}
