package batchhttp

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

func TestDecodeSubmit_Deadline(t *testing.T) {
	t.Parallel()
	ok := func(deadline string, wantAt time.Time, wantIn time.Duration) {
		t.Helper()
		body := `{"targets":[{"url":"u"}],"deadline":` + deadline + `}`
		req, err := decodeSubmit([]byte(body), batchsift.Options, 0)
		if err != nil {
			t.Errorf("decodeSubmit(%s): %v", body, err)
			return
		}
		var opts batch.SubmitOptions
		if err := req.deadlineOptions(&opts); err != nil || !opts.Deadline.Equal(wantAt) || opts.DeadlineIn != wantIn {
			t.Errorf("deadline %s = %v, %v, %v; want %v, %v", deadline, opts.Deadline, opts.DeadlineIn, err, wantAt, wantIn)
		}
	}
	bad := func(deadline, wantMsg string) {
		t.Helper()
		body := `{"targets":[{"url":"u"}],"deadline":` + deadline + `}`
		_, err := decodeSubmit([]byte(body), batchsift.Options, 0)
		he, isHTTP := err.(*httpError)
		if !isHTTP || he.status != http.StatusBadRequest || he.code != CodeInvalidBatch || he.msg != wantMsg {
			t.Errorf("decodeSubmit(%s) = %v, want 400 invalid_batch %q", body, err, wantMsg)
		}
	}
	ok(`"90s"`, time.Time{}, 90*time.Second)
	ok(`"1h30m"`, time.Time{}, 90*time.Minute)
	ok(`"250ms"`, time.Time{}, 250*time.Millisecond)
	ok(`"2026-01-02T15:04:05Z"`, time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC), 0)
	ok(`"2026-01-02T17:04:05.5+02:00"`, time.Date(2026, 1, 2, 15, 4, 5, 5e8, time.UTC), 0)
	ok(`null`, time.Time{}, 0)
	const rule = `an RFC 3339 time such as "2026-01-02T15:04:05Z" or a positive duration such as "90s"`
	for _, v := range []string{`"PT90S"`, `"90"`, `"-5s"`, `"0s"`, `""`, `"tomorrow"`, `"2026-01-02 15:04:05"`, `"2026-01-02T15:04:05"`} {
		var s string
		_ = json.Unmarshal([]byte(v), &s)
		bad(v, `invalid batch: "deadline" must be `+rule+`, got "`+s+`"`)
	}
	bad(`90`, `invalid batch: "deadline" must be a string: `+rule)
	bad(`{"in":"90s"}`, `invalid batch: "deadline" must be a string: `+rule)
	_, err := decodeSubmit([]byte(`{"targets":[{"url":"u"}],"deadline":"1s","deadline":"2s"}`), batchsift.Options, 0)
	if he, _ := err.(*httpError); he == nil || he.msg != `invalid batch: duplicate field "deadline"` {
		t.Errorf("a duplicate deadline = %v", err)
	}
	_, err = decodeSubmit([]byte(`{"targets":[{"url":"u"}],"Deadline":"1s"}`), batchsift.Options, 0)
	if he, _ := err.(*httpError); he == nil || !strings.Contains(he.msg, `"deadline"`) {
		t.Errorf("a deadline in another case = %v, want the field named", err)
	}
}

func TestHandler_SubmitDeadline(t *testing.T) {
	t.Parallel()

	t.Run("OverTheCap", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{config: func(c *batch.Config) { c.MaxDeadline = batch.Duration(time.Hour) }})
		rec := b.do(t, http.MethodPost, "/v1/batch", keyAlice, `{"targets":[{"url":"https://a.test/"}],"deadline":"2h"}`)
		wantError(t, rec, http.StatusUnprocessableEntity, "deadline too far: at most 1h0m0s from now")
		var e ErrorResponse
		decodeJSON(t, rec.Body.Bytes(), &e)
		if e.Code != CodeDeadlineTooFar {
			t.Errorf("code %q, want %s", e.Code, CodeDeadlineTooFar)
		}
		far := b.clock.Now().Add(time.Hour + time.Minute).Format(time.RFC3339)
		rec = b.do(t, http.MethodPost, "/v1/batch", keyAlice, `{"targets":[{"url":"https://a.test/"}],"deadline":"`+far+`"}`)
		wantError(t, rec, http.StatusUnprocessableEntity, "deadline too far: at most 1h0m0s from now")
		past := b.clock.Now().Add(-time.Minute).Format(time.RFC3339)
		rec = b.do(t, http.MethodPost, "/v1/batch", keyAlice, `{"targets":[{"url":"https://a.test/"}],"deadline":"`+past+`"}`)
		wantError(t, rec, http.StatusBadRequest, "invalid batch: deadline: it is not in the future")
	})

	t.Run("DefaultAndShown", func(t *testing.T) {
		t.Parallel()
		f := batchtest.NewBlockingFetcher()
		t.Cleanup(func() { f.Release() })
		b := setup(t, setupOpts{fetch: f.Fetch, config: func(c *batch.Config) {
			c.MaxDeadline, c.JobsPerCaller = batch.Duration(time.Hour), 2
		}})
		now := b.clock.Now()
		for body, want := range map[string]time.Time{
			`{"targets":[{"url":"https://a.test/"}],"deadline":"90s"}`: now.Add(90 * time.Second),
			`{"targets":[{"url":"https://b.test/"}]}`:                  now.Add(time.Hour),
		} {
			rec := b.do(t, http.MethodPost, "/v1/batch", keyAlice, body)
			if rec.Code != http.StatusAccepted {
				t.Fatalf("submit %s: %d %s", body, rec.Code, rec.Body)
			}
			var sub SubmitResponse
			decodeJSON(t, rec.Body.Bytes(), &sub)
			var st StatusResponse
			decodeJSON(t, b.do(t, http.MethodGet, "/v1/batch/"+sub.JobID, keyAlice, "").Body.Bytes(), &st)
			if st.Deadline == nil || !st.Deadline.Equal(want) {
				t.Errorf("%s: status deadline %v, want %v", body, st.Deadline, want)
			}
		}
	})

	t.Run("EndsWithWhatItHas", func(t *testing.T) {
		t.Parallel()
		var b *testBundle
		b = setup(t, setupOpts{fetch: func(context.Context, batch.Caller, batch.Target) (batch.Result, error) {
			b.clock.Advance(time.Second) // a slow upstream, on the runner's clock
			return batch.Result{Content: "ok"}, nil
		}})
		rec := b.do(t, http.MethodPost, "/v1/batch", keyAlice, `{"targets":[{"url":"https://a.test/0"},{"url":"https://a.test/1"},{"url":"https://a.test/2"},{"url":"https://a.test/3"}],"deadline":"2s"}`)
		if rec.Code != http.StatusAccepted {
			t.Fatalf("submit: %d %s", rec.Code, rec.Body)
		}
		var sub SubmitResponse
		decodeJSON(t, rec.Body.Bytes(), &sub)
		batchtest.WaitFinished(t, b.runner, alice, sub.JobID, 10*time.Second)
		var st StatusResponse
		decodeJSON(t, b.do(t, http.MethodGet, "/v1/batch/"+sub.JobID, keyAlice, "").Body.Bytes(), &st)
		if st.Status != batch.JobPartial || st.Error != "deadline" || st.Deadline == nil {
			t.Fatalf("status = %s/%q, deadline %v; want partial/deadline", st.Status, st.Error, st.Deadline)
		}
		for i, x := range st.Targets {
			want := batch.OutcomeOK
			if i >= 2 {
				want = batch.OutcomeExpired
			}
			if x.Outcome != want || x.Retryable == nil || *x.Retryable != (i >= 2) {
				t.Errorf("target %d = %s, retryable %v; want %s", i, x.Outcome, x.Retryable, want)
			}
		}
		if rec := b.do(t, http.MethodGet, "/v1/batch/"+sub.JobID+"/1", keyAlice, ""); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"content":"ok"`) {
			t.Errorf("a finished result: %d %s", rec.Code, rec.Body)
		}
	})
}

func TestPayload_Deadline(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ev := batch.WebhookEvent{ID: "msg_j", Type: batch.EventJobFinished, JobID: "j", Status: batch.JobPartial, Error: "deadline",
		CreatedAt: at, FinishedAt: at.Add(3 * time.Second), ExpiresAt: at.Add(time.Hour), Deadline: at.Add(3 * time.Second)}
	b, err := Payload(ev)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"error":"deadline","targets_total"`) || !strings.Contains(string(b), `"deadline":"2026-01-02T03:04:08Z"`) {
		t.Errorf("payload %s, want the error and the deadline", b)
	}
	ev.Deadline = time.Time{}
	if b, _ := Payload(ev); strings.Contains(string(b), `"deadline":"`) {
		t.Errorf("payload without a deadline %s carries one", b)
	}
}
