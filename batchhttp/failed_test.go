package batchhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// failingScript fails targets 1 and 3 of targets, each with its own
// outcome, and fetches the others.
func failingScript(targets []batch.Target) batch.FetchFunc {
	return batchtest.ScriptFetcher(map[string]batchtest.Step{
		targets[1].URL: {Err: batch.NewFetchError(batch.OutcomeUpstream5xx, "", errors.New("upstream: status 502"))},
		targets[3].URL: {Err: batch.NewFetchError(batch.OutcomeUpstream4xx, "login", errors.New("upstream: status 403"))},
	})
}

func TestHandler_FailedOnly(t *testing.T) {
	t.Parallel()
	targets := batchtest.Targets("fail", 5)
	b := setup(t, setupOpts{fetch: failingScript(targets)})
	srv := checkedServer(t, b.handler)
	id := finishedJob(t, b, targets)

	t.Run("BadValue", func(t *testing.T) {
		for _, path := range []string{"/v1/batch/" + id + "?status=done", "/v1/batch/" + id + "/results?status=x"} {
			wantError(t, b.do(t, http.MethodGet, path, keyAlice, ""), http.StatusBadRequest,
				"invalid request: status must be failed (absent: every target)")
		}
	})

	t.Run("Outcomes", func(t *testing.T) {
		var resp StatusResponse
		decodeJSON(t, b.do(t, http.MethodGet, "/v1/batch/"+id, keyAlice, "").Body.Bytes(), &resp)
		want := map[batch.Outcome]int{batch.OutcomeOK: 3, batch.OutcomeUpstream5xx: 1, batch.OutcomeUpstream4xx: 1}
		if fmt.Sprint(resp.Outcomes) != fmt.Sprint(want) || len(resp.Targets) != 5 {
			t.Errorf("outcomes %v with %d targets, want %v with 5", resp.Outcomes, len(resp.Targets), want)
		}
	})

	t.Run("Results", func(t *testing.T) {
		rec := b.do(t, http.MethodGet, "/v1/batch/"+id+"?results=1&status=failed", keyAlice, "")
		var resp StatusResponse
		decodeJSON(t, rec.Body.Bytes(), &resp)
		if got := fmt.Sprint(idxOf(resp.Targets)); got != "[1 3]" {
			t.Fatalf("?results=1&status=failed: targets %s, want [1 3]; body %s", got, rec.Body)
		}
		for _, ts := range resp.Targets {
			if ts.Status != batch.TargetFailed || ts.Error == "" || ts.Result != nil {
				t.Errorf("target %d: %+v", ts.Idx, ts)
			}
		}
		if resp.Outcomes[batch.OutcomeOK] != 3 {
			t.Errorf("outcomes %v: want every target counted", resp.Outcomes)
		}
	})

	t.Run("Stream", func(t *testing.T) {
		for _, q := range []string{"status=failed", "status=failed&follow=1", "status=failed&after=1"} {
			resp, lines := streamLines(t, srv, keyAlice, "/v1/batch/"+id+"/results?"+q)
			want := "[1 3]"
			if q == "status=failed&after=1" {
				want = "[3]"
			}
			if got := fmt.Sprint(idxs(lines)); got != want {
				t.Errorf("%s: lines %s, want %s", q, got, want)
			}
			if got := resp.Trailer.Get(StatusTrailer); got != string(batch.JobPartial) {
				t.Errorf("%s: trailer %q, want partial", q, got)
			}
		}
	})
}

// TestClient_FailedOnlyFollow follows a live job's failures through the
// client: the stream writes each failed target as it finishes and leaves
// out the ones that succeed.
func TestClient_FailedOnlyFollow(t *testing.T) {
	t.Parallel()
	targets := batchtest.Targets("ff", 5)
	f := batchtest.NewBlockingFetcher()
	script := failingScript(targets)
	b := setup(t, setupOpts{fetch: func(ctx context.Context, c batch.Caller, tg batch.Target) (batch.Result, error) {
		if _, err := f.Fetch(ctx, c, tg); err != nil {
			return batch.Result{}, err
		}
		return script(ctx, c, tg)
	}})
	c := newClientServer(t, b.handler, keyAlice)
	id := b.submit(t, keyAlice, targets, http.StatusAccepted).JobID

	got := make(chan TargetStatus, len(targets))
	errc := make(chan error, 1)
	go func() {
		for ts, err := range c.Results(t.Context(), id, ResultsQuery{Follow: true, Failed: true}) {
			if err != nil {
				errc <- err
				return
			}
			got <- ts
		}
		close(got)
	}()
	for range targets {
		<-f.Started
		f.Release()
	}
	var lines []TargetStatus
	for ts := range got {
		lines = append(lines, ts)
	}
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	if s := fmt.Sprint(idxs(lines)); s != "[1 3]" {
		t.Fatalf("followed failures %s, want [1 3]", s)
	}
	st, err := c.Status(t.Context(), id, StatusQuery{Failed: true})
	if err != nil {
		t.Fatal(err)
	}
	if s := fmt.Sprint(idxOf(st.Targets)); s != "[1 3]" {
		t.Errorf("Status with Failed: targets %s, want [1 3]", s)
	}
}

func idxOf(ts []TargetStatus) []int {
	out := make([]int, len(ts))
	for i, t := range ts {
		out[i] = t.Idx
	}
	return out
}
