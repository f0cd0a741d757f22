package batchhttp

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

func TestHandler_Retry(t *testing.T) {
	t.Parallel()
	targets := batchtest.Targets("re", 3)
	targets[1].Options = batchsift.Fields{Mode: batchsift.ModeRaw}.JSON()
	fail := batch.NewFetchError(batch.OutcomeTimeout, "", errors.New("timeout: upstream did not answer in time"))
	gate := make(chan struct{})
	waiting := make(chan struct{}, 4) // a fetch is waiting at the gate
	t.Cleanup(func() { close(gate) })
	script := batchtest.ScriptFetcher(map[string]batchtest.Step{targets[1].URL: {Err: fail}})
	var holdRetry atomic.Bool
	b := setup(t, setupOpts{fetch: func(ctx context.Context, c batch.Caller, tg batch.Target) (batch.Result, error) {
		if tg.URL == "https://held.test/" || holdRetry.Load() && tg.URL == targets[1].URL {
			waiting <- struct{}{}
			<-gate
		}
		return script(ctx, c, tg)
	}})
	c := newClientServer(t, b.handler, keyAlice)
	id := b.submit(t, keyAlice, targets, http.StatusAccepted).JobID
	batchtest.WaitFinished(t, b.runner, alice, id, 10*time.Second)

	// 202 with a new job, as a submit answers, naming the job retried.
	rec := b.do(t, http.MethodPost, "/v1/batch/"+id+"/retry", keyAlice, "")
	var resp SubmitResponse
	if rec.Code != http.StatusAccepted {
		t.Fatalf("retry = %d %s", rec.Code, rec.Body)
	}
	decodeJSON(t, rec.Body.Bytes(), &resp)
	if !resp.Success || resp.JobID == id || resp.RetryOf != id || resp.Targets != 1 || resp.Reused {
		t.Fatalf("retry answer = %+v", resp)
	}
	info := batchtest.WaitFinished(t, b.runner, alice, resp.JobID, 10*time.Second)
	st, err := c.Status(t.Context(), resp.JobID, StatusQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if st.RetryOf != id || len(st.Targets) != 1 || st.Targets[0].URL != targets[1].URL ||
		st.Targets[0].RetryOfIdx == nil || *st.Targets[0].RetryOfIdx != 1 || info.Status != batch.JobFailed {
		t.Fatalf("the retry's status = %+v", st)
	}
	r, err := c.Result(t.Context(), resp.JobID, 0)
	if err != nil || r.RetryOfIdx == nil || *r.RetryOfIdx != 1 || r.Outcome != batch.OutcomeTimeout || !*r.Retryable {
		t.Fatalf("the retry's result = %+v, %v", r, err)
	}
	list, err := c.List(t.Context(), 1)
	if err != nil || len(list.Jobs) != 1 || list.Jobs[0].RetryOf != id {
		t.Fatalf("list = %+v, %v", list, err)
	}

	// Through the client; the first retry failed, so this is a new one,
	// and again while it runs is that one.
	holdRetry.Store(true)
	first, err := c.Retry(t.Context(), id)
	if err != nil || first.RetryOf != id || first.JobID == resp.JobID {
		t.Fatalf("Client.Retry = %+v, %v", first, err)
	}
	if again, err := c.Retry(t.Context(), id); err != nil || !again.Reused || again.JobID != first.JobID {
		t.Fatalf("Client.Retry again = %+v, %v; want %s reused", again, err, first.JobID)
	}
	<-waiting // the retry's fetch is at the gate: it saw holdRetry
	holdRetry.Store(false)
	gate <- struct{}{}
	batchtest.WaitFinished(t, b.runner, alice, first.JobID, 10*time.Second)

	// Refusals.
	foreign := b.do(t, http.MethodPost, "/v1/batch/"+id+"/retry", keyBob, "")
	unknown := b.do(t, http.MethodPost, "/v1/batch/00000000-0000-0000-0000-000000000000/retry", keyBob, "")
	wantError(t, foreign, http.StatusNotFound, "not found")
	if foreign.Body.String() != unknown.Body.String() {
		t.Errorf("foreign %q, unknown %q: want the same bytes", foreign.Body, unknown.Body)
	}
	wantError(t, b.do(t, http.MethodGet, "/v1/batch/"+id+"/retry", keyAlice, ""), http.StatusMethodNotAllowed, "method not allowed")

	held := b.submit(t, keyAlice, []batch.Target{{URL: "https://held.test/"}}, http.StatusAccepted).JobID
	rec = b.do(t, http.MethodPost, "/v1/batch/"+held+"/retry", keyAlice, "")
	wantError(t, rec, http.StatusConflict, "job still live")
	var er ErrorResponse
	if decodeJSON(t, rec.Body.Bytes(), &er); er.Code != CodeJobLive || er.Hint == "" {
		t.Errorf("live job: code %q hint %q, want %q with a hint", er.Code, er.Hint, CodeJobLive)
	}
	// The caps: alice's live job holds her one slot.
	rec = b.do(t, http.MethodPost, "/v1/batch/"+id+"/retry", keyAlice, "")
	wantError(t, rec, http.StatusTooManyRequests, "busy: a batch of yours is still running")

	<-waiting
	gate <- struct{}{}
	batchtest.WaitFinished(t, b.runner, alice, held, 10*time.Second)
	rec = b.do(t, http.MethodPost, "/v1/batch/"+held+"/retry", keyAlice, "")
	wantError(t, rec, http.StatusConflict, "nothing to retry: every target is done")
}
