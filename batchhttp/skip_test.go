package batchhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// skipBody is a submit body of targets with on_invalid as given ("" for
// none).
func skipBody(t *testing.T, targets []batch.Target, on batch.OnInvalid) string {
	t.Helper()
	b, err := marshal(SubmitRequest{Targets: targets, OnInvalid: on})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestHandler_SubmitSkip(t *testing.T) {
	t.Parallel()

	// Five targets, two of which the pre-check refuses: with on_invalid
	// skip, 202, three fetched, the two finished blocked at their idx;
	// with the default, 422 as ever.
	t.Run("PrecheckRefusesTwo", func(t *testing.T) {
		t.Parallel()
		rec := batchtest.NewRecordingFetcher(batchtest.StaticFetcher("ok"))
		b := setup(t, setupOpts{fetch: rec.Fetch, precheck: PrecheckURL})
		targets := []batch.Target{
			{URL: "https://a.test/0"}, {URL: "https://a.test:8443/1"}, {URL: "https://a.test/2"},
			{URL: "http://10.0.0.1/3"}, {URL: "https://a.test/4"},
		}
		ans := b.do(t, http.MethodPost, "/v1/batch", keyAlice, submitBody(t, targets))
		wantError(t, ans, http.StatusUnprocessableEntity, "blocked: target 1: port not allowed")
		ans = b.do(t, http.MethodPost, "/v1/batch", keyAlice, skipBody(t, targets, batch.OnInvalidReject))
		wantError(t, ans, http.StatusUnprocessableEntity, "blocked: target 1: port not allowed")

		ans = b.do(t, http.MethodPost, "/v1/batch", keyAlice, skipBody(t, targets, batch.OnInvalidSkip))
		if ans.Code != http.StatusAccepted {
			t.Fatalf("skip: status %d, body %s", ans.Code, ans.Body)
		}
		var resp SubmitResponse
		decodeJSON(t, ans.Body.Bytes(), &resp)
		checkGolden(t, ans, resp.JobID)
		if strings.Contains(ans.Body.String(), "a.test") || strings.Contains(ans.Body.String(), "10.0.0.1") {
			t.Errorf("the answer repeats a URL: %s", ans.Body)
		}
		info := batchtest.WaitFinished(t, b.runner, alice, resp.JobID, 10*time.Second)
		if got := rec.Order(); !slices.Equal(got, []string{targets[0].URL, targets[2].URL, targets[4].URL}) {
			t.Errorf("fetched %q, want targets 0, 2 and 4", got)
		}
		st := b.do(t, http.MethodGet, "/v1/batch/"+resp.JobID, keyAlice, "")
		var sr StatusResponse
		decodeJSON(t, st.Body.Bytes(), &sr)
		if sr.Status != batch.JobPartial || sr.TargetsDone != 5 || sr.Outcomes[batch.OutcomeBlocked] != 2 || sr.Outcomes[batch.OutcomeOK] != 3 {
			t.Errorf("status %s, %d done, outcomes %v; want partial, 5 done, 2 blocked, 3 ok", sr.Status, sr.TargetsDone, sr.Outcomes)
		}
		for _, i := range []int{1, 3} {
			ts := sr.Targets[i]
			if ts.Status != batch.TargetFailed || ts.Outcome != batch.OutcomeBlocked || ts.Retryable == nil || *ts.Retryable ||
				ts.Attempts != 0 || ts.URL != targets[i].URL || ts.Error != resp.SkippedTargets[i/2].Error {
				t.Errorf("target %d = %+v, want failed blocked, not retryable, no attempt, the answer's error", i, ts)
			}
		}
		if info.TargetsTotal != 5 {
			t.Errorf("job of %d targets, want 5: idx stays aligned", info.TargetsTotal)
		}
		// The log line counts the skipped targets and carries no reason
		// and no URL.
		var line map[string]any
		for _, l := range b.logs.lines(t) {
			if l["status"] == "queued" {
				line = l
			}
			for k, v := range l {
				if s, _ := v.(string); strings.Contains(s, ".test") || strings.Contains(s, "10.0.0.1") || strings.Contains(s, "port") {
					t.Errorf("log line %v: %s = %q", l, k, s)
				}
			}
		}
		if line == nil || line["skipped"] != 2.0 {
			t.Errorf("submit's log line %v, want skipped 2", line)
		}
	})

	// Each kind of refusal, with its outcome and error; the runner's
	// own refusals too.
	t.Run("EveryKind", func(t *testing.T) {
		t.Parallel()
		check := func(_ context.Context, _ batch.Caller, tg batch.Target) error {
			if opts, _ := batchsift.Read(tg); len(opts.Grep) > 4 {
				return batch.NewFetchError(batch.OutcomeUnsupported, "use a shorter pattern", errors.New("grep pattern too large"))
			}
			return nil
		}
		precheck := func(ctx context.Context, c batch.Caller, u string) error {
			if strings.HasPrefix(u, "http://localhost") {
				return batch.NewFetchError(batch.OutcomeBlocked, "allow it with -allow-local", errors.New("blocked: loopback"))
			}
			return PrecheckURL(ctx, c, u)
		}
		b := setup(t, setupOpts{precheck: precheck, check: check})
		body := `{"on_invalid":"skip","targets":[{"url":"https://a.test/","custom_id":"a"},{"url":"http://localhost/","grep":"aaaaaa"},` +
			`{"url":"https://b.test/","grep":"aaaaaa","custom_id":"c"},{"url":""},{"url":"https://c.test/","mode":"fast"}]}`
		ans := b.do(t, http.MethodPost, "/v1/batch", keyAlice, body)
		if ans.Code != http.StatusAccepted {
			t.Fatalf("status %d, body %s", ans.Code, ans.Body)
		}
		var resp SubmitResponse
		decodeJSON(t, ans.Body.Bytes(), &resp)
		want := []SkippedTarget{
			{Idx: 1, Outcome: batch.OutcomeBlocked, Error: "blocked: loopback", Hint: "allow it with -allow-local"},
			{Idx: 2, Outcome: batch.OutcomeInvalid, Error: "invalid option: grep pattern too large", Hint: "use a shorter pattern"},
			{Idx: 3, Outcome: batch.OutcomeInvalid, Error: "invalid target: empty url"},
			{Idx: 4, Outcome: batch.OutcomeInvalid, Error: `invalid target: unknown mode "fast"`},
		}
		if resp.Skipped != 4 || !slices.Equal(resp.SkippedTargets, want) || resp.Targets != 5 {
			t.Fatalf("answer %+v\nwant skipped %+v", resp, want)
		}
		info := batchtest.WaitFinished(t, b.runner, alice, resp.JobID, 10*time.Second)
		if info.Status != batch.JobPartial || info.Targets[2].CustomID != "c" || info.Targets[0].Status != batch.TargetDone {
			t.Errorf("job %s, targets %+v", info.Status, info.Targets)
		}
		// A retry has nothing to take: the one fetched target is done.
		wantError(t, b.do(t, http.MethodPost, "/v1/batch/"+resp.JobID+"/retry", keyAlice, ""),
			http.StatusConflict, "nothing to retry: every target is done")
	})

	// A lenient submit whose every target is refused gets the default's
	// answer, and makes no job.
	t.Run("EveryTargetRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{precheck: PrecheckURL})
		f := func(targets []batch.Target, status int, msg string) {
			t.Helper()
			wantError(t, b.do(t, http.MethodPost, "/v1/batch", keyAlice, skipBody(t, targets, "")), status, msg)
			wantError(t, b.do(t, http.MethodPost, "/v1/batch", keyAlice, skipBody(t, targets, batch.OnInvalidSkip)), status, msg)
		}
		f([]batch.Target{{URL: "http://127.0.0.1/"}, {URL: "https://a.test:1/"}}, http.StatusUnprocessableEntity, "blocked: target 0: loopback address")
		f([]batch.Target{{URL: ""}, {URL: "https://a.test/", Options: []byte(`{"mode":"fast"}`)}}, http.StatusBadRequest, "invalid batch: target 0: empty url")
		f([]batch.Target{{URL: ""}, {URL: "http://127.0.0.1/"}}, http.StatusUnprocessableEntity, "blocked: target 1: loopback address")
		// A custom id refused with a skipped target: the default's answer.
		f([]batch.Target{{URL: "https://a.test/", CustomID: "x"}, {URL: "http://127.0.0.1/", CustomID: "x"}},
			http.StatusUnprocessableEntity, "blocked: target 1: loopback address")
		if jobs, err := b.runner.List(t.Context(), alice, 10); err != nil || len(jobs) != 0 {
			t.Fatalf("List = %+v, %v; want no job", jobs, err)
		}
	})

	t.Run("Decode", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{config: func(c *batch.Config) { c.JobsPerCaller = 8 }})
		n := 0
		f := func(value string, status int, msg string) {
			t.Helper()
			n++
			ans := b.do(t, http.MethodPost, "/v1/batch", keyAlice, fmt.Sprintf(`{"targets":[{"url":"https://a.test/%d"}],"on_invalid":%s}`, n, value))
			if msg != "" {
				wantError(t, ans, status, msg)
			} else if ans.Code != status {
				t.Errorf("on_invalid %s: status %d, want %d; body %s", value, ans.Code, status, ans.Body)
			}
		}
		f(`"skip"`, http.StatusAccepted, "")
		f(`"reject"`, http.StatusAccepted, "")
		f(`null`, http.StatusAccepted, "")
		f(`"Skip"`, http.StatusBadRequest, `invalid batch: "on_invalid" must be "reject" or "skip"`)
		f(`true`, http.StatusBadRequest, `invalid batch: "on_invalid" must be "reject" or "skip"`)
		f(`""`, http.StatusBadRequest, `invalid batch: "on_invalid" must be "reject" or "skip"`)
		wantError(t, b.do(t, http.MethodPost, "/v1/batch", keyAlice, `{"targets":[{"url":"https://a.test/"}],"onInvalid":"skip"}`),
			http.StatusBadRequest, `invalid batch: unknown field "onInvalid"`)
		// A body that does not decode is refused whatever on_invalid says.
		wantError(t, b.do(t, http.MethodPost, "/v1/batch", keyAlice, `{"on_invalid":"skip","targets":[{"url":"https://a.test/"},{"url":"https://b.test/","mdoe":"raw"}]}`),
			http.StatusBadRequest, `invalid batch: target 1: unknown field "mdoe"`)
	})

	t.Run("Client", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{precheck: PrecheckURL})
		c := newClientServer(t, b.handler, keyAlice)
		resp, err := c.SubmitWith(t.Context(), SubmitRequest{OnInvalid: batch.OnInvalidSkip,
			Targets: []batch.Target{{URL: "https://a.test/"}, {URL: "http://[::1]/"}}})
		want := []SkippedTarget{{Idx: 1, Outcome: batch.OutcomeBlocked, Error: "blocked: loopback address"}}
		if err != nil || resp.Skipped != 1 || !slices.Equal(resp.SkippedTargets, want) {
			t.Fatalf("SubmitWith = %+v, %v; want target 1 skipped", resp, err)
		}
		again, err := c.SubmitWith(t.Context(), SubmitRequest{OnInvalid: batch.OnInvalidSkip,
			Targets: []batch.Target{{URL: "https://a.test/"}, {URL: "http://[::1]/"}}})
		if err != nil || !again.Reused || again.JobID != resp.JobID || !slices.Equal(again.SkippedTargets, want) {
			t.Fatalf("resubmit = %+v, %v; want %s reused, the same skipped", again, err, resp.JobID)
		}
	})
}
