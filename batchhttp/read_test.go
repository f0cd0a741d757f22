package batchhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// privateURL is a target that passes the pre-check but that the fetcher
// refuses when it connects.
const privateURL = "https://internal.test/metadata"

func blockingScript() batch.FetchFunc {
	return batchtest.ScriptFetcher(map[string]batchtest.Step{
		privateURL:                  {Err: batch.NewFetchError(batch.OutcomeBlocked, "", errors.New("blocked: private address"))},
		"https://example.test/slow": {Err: batch.NewFetchError(batch.OutcomeUpstream5xx, "browser", errors.New("upstream 503"))},
	})
}

// finishedJob submits targets as alice, waits for the job to finish and
// returns its id.
func finishedJob(t *testing.T, b *testBundle, targets []batch.Target) string {
	t.Helper()
	id := b.submit(t, keyAlice, targets, http.StatusAccepted).JobID
	batchtest.WaitFinished(t, b.runner, alice, id, 10*time.Second)
	return id
}

func TestHandler_Status(t *testing.T) {
	t.Parallel()

	t.Run("BadQuery", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		id := finishedJob(t, b, batchtest.Targets("a", 1))
		f := func(query, want string) {
			t.Helper()
			wantError(t, b.do(t, http.MethodGet, "/v1/batch/"+id+"?"+query, keyAlice, ""), http.StatusBadRequest, want)
		}
		f("results=yes", "invalid request: results must be 1, true, 0 or false")
		f("results=1&results=0", "invalid request: results given more than once")
		f("wait=soon", "invalid request: wait must be a duration such as 30s, or seconds (max 1m0s)")
		f("wait=-1s", "invalid request: wait must be a duration such as 30s, or seconds (max 1m0s)")
		f("wait=1s&since=-1", "invalid request: since must be a non-negative integer")
		f("wait=1s&since=x", "invalid request: since must be a non-negative integer")
		f("a=%zz", "invalid request: malformed query")
	})

	t.Run("LeaseBump", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		id := finishedJob(t, b, batchtest.Targets("a", 1))
		var before, after StatusResponse
		decodeJSON(t, b.do(t, http.MethodGet, "/v1/batch/"+id, keyAlice, "").Body.Bytes(), &before)
		b.clock.Advance(3 * time.Hour)
		decodeJSON(t, b.do(t, http.MethodGet, "/v1/batch/"+id, keyAlice, "").Body.Bytes(), &after)
		if got := after.ExpiresAt.Sub(before.ExpiresAt); got != 3*time.Hour {
			t.Fatalf("expires_at moved by %s after a read 3h later, want 3h (%s → %s)", got, before.ExpiresAt, after.ExpiresAt)
		}
		b.clock.Advance(time.Hour)
		var res ResultResponse
		decodeJSON(t, b.do(t, http.MethodGet, "/v1/batch/"+id+"/0", keyAlice, "").Body.Bytes(), &res)
		if got := res.ExpiresAt.Sub(after.ExpiresAt); got != time.Hour {
			t.Fatalf("result read moved expires_at by %s, want 1h", got)
		}
	})

	t.Run("Partial", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{fetch: blockingScript(), precheck: PrecheckURL})
		id := finishedJob(t, b, []batch.Target{
			{URL: "https://example.test/a"}, {URL: privateURL}, {URL: "https://example.test/slow"},
		})
		rec := b.do(t, http.MethodGet, "/v1/batch/"+id, keyAlice, "")
		var resp StatusResponse
		decodeJSON(t, rec.Body.Bytes(), &resp)
		if resp.Status != batch.JobPartial || resp.Targets[1].Status != batch.TargetFailed ||
			!strings.Contains(resp.Targets[1].Error, "blocked") {
			t.Fatalf("status = %s", rec.Body)
		}
		checkGolden(t, rec, id)
	})

	t.Run("Results", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{fetch: blockingScript()})
		id := finishedJob(t, b, []batch.Target{{URL: "https://example.test/a"}, {URL: privateURL}})
		rec := b.do(t, http.MethodGet, "/v1/batch/"+id+"?results=1", keyAlice, "")
		checkGolden(t, rec, id)
	})

	t.Run("Running", func(t *testing.T) {
		t.Parallel()
		f := batchtest.NewBlockingFetcher()
		b := setup(t, setupOpts{fetch: f.Fetch})
		id := b.submit(t, keyAlice, batchtest.Targets("a", 3), http.StatusAccepted).JobID
		<-f.Started
		f.Release()
		<-f.Started
		rec := b.do(t, http.MethodGet, "/v1/batch/"+id+"?results=1", keyAlice, "")
		checkGolden(t, rec, id)
	})

	t.Run("Summary", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		id := finishedJob(t, b, []batch.Target{{URL: "https://example.test/a?q=1&r=2", Options: batchsift.Fields{Mode: "clean"}.JSON()}})
		rec := b.do(t, http.MethodGet, "/v1/batch/"+id, keyAlice, "")
		checkGolden(t, rec, id)
	})
}

func TestHandler_Result(t *testing.T) {
	t.Parallel()

	b := setup(t, setupOpts{fetch: blockingScript()})
	id := finishedJob(t, b, []batch.Target{{URL: "https://example.test/a"}, {URL: privateURL}, {URL: "https://example.test/slow"}})

	t.Run("BadIdx", func(t *testing.T) {
		t.Parallel()
		unknown := b.do(t, http.MethodGet, "/v1/batch/"+strings.Repeat("0", 36)+"/0", keyAlice, "")
		wantError(t, unknown, http.StatusNotFound, "not found")
		for _, idx := range []string{"3", "33", "-1", "+1", "x", "1.0", "999999999999", "%20"} {
			rec := b.do(t, http.MethodGet, "/v1/batch/"+id+"/"+idx, keyAlice, "")
			if rec.Code != http.StatusNotFound || rec.Body.String() != unknown.Body.String() {
				t.Errorf("idx %q: %d %s, want the unknown-id 404", idx, rec.Code, rec.Body)
			}
		}
	})

	t.Run("Done", func(t *testing.T) {
		t.Parallel()
		checkGolden(t, b.do(t, http.MethodGet, "/v1/batch/"+id+"/0", keyAlice, ""), id)
	})

	t.Run("Failed", func(t *testing.T) {
		t.Parallel()
		checkGolden(t, b.do(t, http.MethodGet, "/v1/batch/"+id+"/1", keyAlice, ""), id)
	})

	t.Run("FailedWithHint", func(t *testing.T) {
		t.Parallel()
		checkGolden(t, b.do(t, http.MethodGet, "/v1/batch/"+id+"/2", keyAlice, ""), id)
	})
}

func TestHandler_Cancel(t *testing.T) {
	t.Parallel()

	t.Run("Finished", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		id := finishedJob(t, b, batchtest.Targets("a", 1))
		rec := b.do(t, http.MethodDelete, "/v1/batch/"+id, keyAlice, "")
		wantError(t, rec, http.StatusConflict, "job already finished")
		checkGolden(t, rec)
	})

	t.Run("Running", func(t *testing.T) {
		t.Parallel()
		f := batchtest.NewBlockingFetcher()
		b := setup(t, setupOpts{fetch: f.Fetch})
		id := b.submit(t, keyAlice, batchtest.Targets("a", 3), http.StatusAccepted).JobID
		<-f.Started
		rec := b.do(t, http.MethodDelete, "/v1/batch/"+id, keyAlice, "")
		checkGolden(t, rec)
		f.Release() // the target in flight finishes and is stored
		info := batchtest.WaitFinished(t, b.runner, alice, id, 10*time.Second)
		var st StatusResponse
		decodeJSON(t, b.do(t, http.MethodGet, "/v1/batch/"+id, keyAlice, "").Body.Bytes(), &st)
		if st.Status != batch.JobCancelled || info.Status != batch.JobCancelled {
			t.Fatalf("status after cancel = %s (runner: %s), want cancelled", st.Status, info.Status)
		}
		wantError(t, b.do(t, http.MethodDelete, "/v1/batch/"+id, keyAlice, ""), http.StatusConflict, "job already finished")
	})
}

func TestHandler_List(t *testing.T) {
	t.Parallel()

	b := setup(t, setupOpts{config: func(c *batch.Config) { c.JobsPerCaller, c.JobsTotal = 8, 8 }})
	var ids []string
	for i := range 3 {
		ids = append(ids, finishedJob(t, b, batchtest.Targets("list"+string(rune('a'+i)), i+1)))
		b.clock.Advance(time.Minute)
	}
	b.submit(t, keyBob, batchtest.Targets("bob", 1), http.StatusAccepted)

	t.Run("BadLimit", func(t *testing.T) {
		t.Parallel()
		for _, q := range []string{"limit=0", "limit=-1", "limit=x", "limit=", "limit=1&limit=2"} {
			rec := b.do(t, http.MethodGet, "/v1/batch?"+q, keyAlice, "")
			if rec.Code != http.StatusBadRequest {
				t.Errorf("%s: status %d, want 400", q, rec.Code)
			}
		}
	})

	t.Run("Limit", func(t *testing.T) {
		t.Parallel()
		var resp ListResponse
		decodeJSON(t, b.do(t, http.MethodGet, "/v1/batch?limit=2", keyAlice, "").Body.Bytes(), &resp)
		if len(resp.Jobs) != 2 || resp.Jobs[0].JobID != ids[2] || resp.Jobs[1].JobID != ids[1] {
			t.Fatalf("limit=2 listed %+v, want the two newest", resp.Jobs)
		}
		decodeJSON(t, b.do(t, http.MethodGet, "/v1/batch?limit=1000", keyAlice, "").Body.Bytes(), &resp)
		if len(resp.Jobs) != 3 {
			t.Fatalf("limit=1000 listed %d jobs, want 3", len(resp.Jobs))
		}
	})

	t.Run("NewestFirst", func(t *testing.T) {
		t.Parallel()
		checkGolden(t, b.do(t, http.MethodGet, "/v1/batch", keyAlice, ""), ids[0], ids[1], ids[2])
	})

	t.Run("NoJobs", func(t *testing.T) {
		t.Parallel()
		checkGolden(t, b.do(t, http.MethodGet, "/v1/batch", keyRita, ""))
	})
}

// touchFails is a store whose lease bumps fail, as on a full disk.
type touchFails struct{ batchdriver.Store }

func (touchFails) Touch(context.Context, batchdriver.TouchParams) error {
	return fmt.Errorf("disk full: %w", batch.ErrUnavailable)
}

func TestHandler_ReadsSurviveAFailedTouch(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{store: touchFails{batchtest.NewStore()}})
	id := b.submit(t, keyAlice, []batch.Target{{URL: "https://a.test/"}}, http.StatusAccepted).JobID
	if rec := b.do(t, http.MethodGet, "/v1/batch/"+id, keyAlice, ""); rec.Code != http.StatusOK {
		t.Errorf("status read after a failed touch = %d %s, want 200", rec.Code, rec.Body)
	}
	if rec := b.do(t, http.MethodGet, "/v1/batch/"+id+"/0", keyAlice, ""); rec.Code != http.StatusOK {
		t.Errorf("result read after a failed touch = %d %s, want 200", rec.Code, rec.Body)
	}
	if rec := b.do(t, http.MethodGet, "/v1/batch/"+id, keyBob, ""); rec.Code != http.StatusNotFound {
		t.Errorf("another caller's read = %d, want 404", rec.Code)
	}
}
