package batchhttp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

func TestHandler_Submit(t *testing.T) {
	t.Parallel()

	// noJobs fails the test if caller has any job.
	noJobs := func(t *testing.T, b *testBundle, caller batch.Caller) {
		t.Helper()
		jobs, err := b.runner.List(t.Context(), caller, 100)
		if err != nil || len(jobs) != 0 {
			t.Fatalf("List = %d jobs, %v; want none", len(jobs), err)
		}
	}

	t.Run("BlockedByPrecheck", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{precheck: PrecheckURL})
		targets := []batch.Target{{URL: "https://example.test/a"}, {URL: "https://example.test:8443/b"}}
		rec := b.do(t, http.MethodPost, "/v1/batch", keyAlice, submitBody(t, targets))
		wantError(t, rec, http.StatusUnprocessableEntity, "blocked: target 1: port not allowed")
		checkGolden(t, rec)
		noJobs(t, b, alice)
	})

	t.Run("BlockedReasonNotDoubled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{precheck: func(_ context.Context, _ batch.Caller, u string) error {
			switch u {
			case "https://a.test/":
				return errors.New("blocked: private address")
			case "https://b.test/":
				return errors.New("not on the allow list")
			}
			return nil
		}})
		rec := b.do(t, http.MethodPost, "/v1/batch", keyAlice, `{"targets":[{"url":"https://ok.test/"},{"url":"https://a.test/"}]}`)
		wantError(t, rec, http.StatusUnprocessableEntity, "blocked: target 1: private address")
		rec = b.do(t, http.MethodPost, "/v1/batch", keyAlice, `{"targets":[{"url":"https://b.test/"}]}`)
		wantError(t, rec, http.StatusUnprocessableEntity, "blocked: target 0: not on the allow list")
		noJobs(t, b, alice)
	})

	t.Run("Busy", func(t *testing.T) {
		t.Parallel()
		f := batchtest.NewBlockingFetcher()
		b := setup(t, setupOpts{fetch: f.Fetch, config: func(c *batch.Config) { c.JobsTotal = 1 }})
		b.submit(t, keyAlice, batchtest.Targets("a", 1), http.StatusAccepted)
		rec := b.do(t, http.MethodPost, "/v1/batch", keyBob, submitBody(t, batchtest.Targets("b", 1)))
		wantError(t, rec, http.StatusTooManyRequests, "batch jobs busy")
		checkGolden(t, rec)
	})

	t.Run("CallerBusy", func(t *testing.T) {
		t.Parallel()
		f := batchtest.NewBlockingFetcher()
		b := setup(t, setupOpts{fetch: f.Fetch})
		b.submit(t, keyAlice, batchtest.Targets("a", 2), http.StatusAccepted)
		rec := b.do(t, http.MethodPost, "/v1/batch", keyAlice, submitBody(t, batchtest.Targets("b", 1)))
		wantError(t, rec, http.StatusTooManyRequests, "busy: a batch of yours is still running")
		checkGolden(t, rec)
		// Another caller is not held up.
		b.submit(t, keyBob, batchtest.Targets("c", 1), http.StatusAccepted)
	})

	t.Run("Closed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		if err := b.runner.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		rec := b.do(t, http.MethodPost, "/v1/batch", keyAlice, submitBody(t, batchtest.Targets("a", 1)))
		wantError(t, rec, http.StatusServiceUnavailable, "batch jobs unavailable")
		if got := rec.Header().Get("Retry-After"); got != "5" {
			t.Errorf("Retry-After %q, want 5", got)
		}
	})

	t.Run("Created", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		rec := b.do(t, http.MethodPost, "/v1/batch", keyAlice, submitBody(t, batchtest.Targets("a", 3)))
		var resp SubmitResponse
		decodeJSON(t, rec.Body.Bytes(), &resp)
		checkGolden(t, rec, resp.JobID)
	})

	t.Run("InvalidTarget", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{precheck: PrecheckURL})
		f := func(body, want string) {
			t.Helper()
			wantError(t, b.do(t, http.MethodPost, "/v1/batch", keyAlice, body), http.StatusBadRequest, want)
		}
		f(`{"targets":[{"url":"https://a.test/"},{"url":""}]}`, "invalid batch: target 1: empty url")
		f(`{"targets":[{"url":"https://a.test/"},{"url":null}]}`, "invalid batch: target 1: empty url")
		f(`{"targets":[{"url":"https://a.test/","mode":"fast"}]}`, `invalid batch: target 0: unknown mode "fast"`)
		f(`{"targets":[]}`, "invalid batch: no targets")
		noJobs(t, b, alice)
	})

	t.Run("InvalidOption", func(t *testing.T) {
		t.Parallel()
		var seen []batch.Target
		check := func(_ context.Context, c batch.Caller, tg batch.Target) error {
			if c.Name != "alice" {
				t.Errorf("CheckTarget got caller %q", c.Name)
			}
			seen = append(seen, tg)
			opts, _ := batchsift.Read(tg)
			if len(opts.Grep) > 4 {
				return batch.NewFetchError(batch.OutcomeUnsupported, "use a shorter pattern", errors.New("grep pattern too large: 5 bytes (max 4)"))
			}
			if opts.JQ != "" {
				return errors.New("")
			}
			return nil
		}
		b := setup(t, setupOpts{precheck: PrecheckURL, check: check})
		targets := []batch.Target{
			{URL: "https://a.test/", Options: batchsift.Fields{Grep: "ok"}.JSON()},
			{URL: "https://b.test/", Options: batchsift.Fields{Grep: "aaaaa", Mode: batchsift.ModeClean}.JSON()},
			{URL: "https://c.test/", Options: batchsift.Fields{Grep: "bbbbb"}.JSON()},
		}
		rec := b.do(t, http.MethodPost, "/v1/batch", keyAlice, submitBody(t, targets))
		wantError(t, rec, http.StatusUnprocessableEntity, "invalid option: target 1: grep pattern too large: 5 bytes (max 4)")
		checkGolden(t, rec)
		if len(seen) != 2 || seen[1].URL != "https://b.test/" || string(seen[1].Options) != `{"mode":"clean","grep":"aaaaa"}` {
			t.Errorf("CheckTarget saw %+v, want targets 0 and 1 with their options", seen)
		}
		// The URL pre-check comes first: a blocked URL is "blocked".
		rec = b.do(t, http.MethodPost, "/v1/batch", keyAlice, `{"targets":[{"url":"https://a.test/","grep":"aaaaa"},{"url":"http://10.0.0.1/"}]}`)
		wantError(t, rec, http.StatusUnprocessableEntity, "blocked: target 1: private address")
		// An empty reason still says something; an empty URL is the runner's 400.
		rec = b.do(t, http.MethodPost, "/v1/batch", keyAlice, `{"targets":[{"url":"https://a.test/","jq":"."}]}`)
		wantError(t, rec, http.StatusUnprocessableEntity, "invalid option: target 0: refused")
		rec = b.do(t, http.MethodPost, "/v1/batch", keyAlice, `{"targets":[{"url":"","grep":"aaaaa"}]}`)
		wantError(t, rec, http.StatusBadRequest, "invalid batch: target 0: empty url")
		noJobs(t, b, alice)
		lines := b.logs.lines(t)
		if l := lines[0]; l["error"] != CodeInvalidOption || l["target_idx"] != 1.0 {
			t.Errorf("log line %v, want error %s at target_idx 1", l, CodeInvalidOption)
		}
		for _, l := range lines {
			for k, v := range l {
				if s, _ := v.(string); strings.Contains(s, "grep pattern") || strings.Contains(s, ".test") {
					t.Errorf("log line %v: %s = %q repeats the refusal or a URL", l, k, s)
				}
			}
		}
		// Without a check, the same body makes a job.
		plain := setup(t, setupOpts{precheck: PrecheckURL})
		plain.submit(t, keyAlice, targets, http.StatusAccepted)
	})

	t.Run("NotStarted", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{noStart: true})
		rec := b.do(t, http.MethodPost, "/v1/batch", keyAlice, submitBody(t, batchtest.Targets("a", 1)))
		wantError(t, rec, http.StatusServiceUnavailable, "batch jobs unavailable")
		checkGolden(t, rec)
	})

	t.Run("Reused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		first := b.submit(t, keyAlice, batchtest.Targets("a", 2), http.StatusAccepted)
		batchtest.WaitFinished(t, b.runner, alice, first.JobID, 10*time.Second)
		rec := b.do(t, http.MethodPost, "/v1/batch", keyAlice, submitBody(t, batchtest.Targets("a", 2)))
		var again SubmitResponse
		decodeJSON(t, rec.Body.Bytes(), &again)
		if again.JobID != first.JobID || !again.Reused || first.Reused {
			t.Fatalf("resubmit = %+v after %+v; want the same id, reused", again, first)
		}
		checkGolden(t, rec, first.JobID) // status is the job's current one: done
		// The same list from another caller is another job.
		other := b.submit(t, keyBob, batchtest.Targets("a", 2), http.StatusAccepted)
		if other.JobID == first.JobID || other.Reused {
			t.Fatalf("bob's submit = %+v; want a new job", other)
		}
	})

	t.Run("TooManyTargets", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		rec := b.do(t, http.MethodPost, "/v1/batch", keyAlice, submitBody(t, batchtest.Targets("a", 33)))
		wantError(t, rec, http.StatusUnprocessableEntity, "too many targets (max 32)")
		checkGolden(t, rec)
		noJobs(t, b, alice)
		b.submit(t, keyAlice, batchtest.Targets("a", 32), http.StatusAccepted)
	})
}

func TestHandler_SubmitBodyCap(t *testing.T) {
	t.Parallel()

	// questions returns 32 targets whose questions make the body about n bytes.
	questions := func(n int) []batch.Target {
		ts := batchtest.Targets("q", 32)
		for i := range ts {
			ts[i].Options = batchsift.Fields{Question: strings.Repeat("why? ", n/32/5)}.JSON()
		}
		return ts
	}

	t.Run("ChunkedOverCap", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		body := &countingReader{r: strings.NewReader(`{"targets":[` + strings.Repeat(" ", 1<<20) + `]}`)}
		req := httptest.NewRequest(http.MethodPost, "/v1/batch", body)
		req.ContentLength = -1 // chunked: the size is not known up front
		req.Header.Set("Authorization", "Bearer "+keyAlice)
		rec := serveRequest(t, b.handler, req)
		wantError(t, rec, http.StatusRequestEntityTooLarge, "body too large (max 256 KiB)")
		if body.n > MaxBodyBytes+1 {
			t.Errorf("read %d bytes of the body, want at most %d", body.n, MaxBodyBytes+1)
		}
	})

	t.Run("ContentLengthOverCap", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		body := &countingReader{r: strings.NewReader("{}")}
		req := httptest.NewRequest(http.MethodPost, "/v1/batch", body)
		req.ContentLength = 10 << 30
		req.Header.Set("Authorization", "Bearer "+keyAlice)
		rec := serveRequest(t, b.handler, req)
		wantError(t, rec, http.StatusRequestEntityTooLarge, "body too large (max 256 KiB)")
		if body.n != 0 {
			t.Errorf("read %d bytes of a body declared too large, want 0", body.n)
		}
	})

	t.Run("ExactlyAtCap", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		body := submitBody(t, batchtest.Targets("a", 1))
		body += strings.Repeat(" ", MaxBodyBytes-len(body)) // white space after the object is fine
		if len(body) != MaxBodyBytes {
			t.Fatalf("body is %d bytes, want %d", len(body), MaxBodyBytes)
		}
		if rec := b.do(t, http.MethodPost, "/v1/batch", keyAlice, body); rec.Code != http.StatusAccepted {
			t.Fatalf("status %d, want 202; body %s", rec.Code, rec.Body)
		}
		rec := b.do(t, http.MethodPost, "/v1/batch", keyBob, body+" ")
		wantError(t, rec, http.StatusRequestEntityTooLarge, "body too large (max 256 KiB)")
	})

	t.Run("Over", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		body := submitBody(t, questions(300<<10))
		if len(body) < 300<<10-1024 {
			t.Fatalf("body is %d bytes, want about 300 KiB", len(body))
		}
		rec := b.do(t, http.MethodPost, "/v1/batch", keyAlice, body)
		wantError(t, rec, http.StatusRequestEntityTooLarge, "body too large (max 256 KiB)")
		checkGolden(t, rec)
	})

	t.Run("Under", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		body := submitBody(t, questions(66<<10))
		if len(body) < 64<<10 || len(body) > MaxBodyBytes {
			t.Fatalf("body is %d bytes, want about 66 KiB", len(body))
		}
		rec := b.do(t, http.MethodPost, "/v1/batch", keyAlice, body)
		if rec.Code != http.StatusAccepted {
			t.Fatalf("status %d, want 202; body %s", rec.Code, rec.Body)
		}
	})
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// A submit over the target cap is refused as the decoder reaches target
// max+1, before it decodes the rest: 256 KiB of empty targets allocates
// well under 1 MiB before its 422 (it decoded all 87,000 of
// them, 52 MiB, first). Not parallel, so that other tests' allocations do
// not count.
func TestHandler_SubmitOverCapAllocatesLittle(t *testing.T) {
	r := batchtest.NewRunner(t, batch.Config{})
	h := limitsHandler(t, r, HandlerConfig{})
	const head, tail = `{"targets":[`, `{}]}`
	n := (MaxBodyBytes - len(head) - len(tail)) / len(`{},`)
	body := []byte(head + strings.Repeat(`{},`, n) + tail)
	var rec *httptest.ResponseRecorder
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	req := httptest.NewRequest(http.MethodPost, "/v1/batch", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+keyAlice)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	runtime.ReadMemStats(&after)
	wantError(t, rec, http.StatusUnprocessableEntity, "too many targets (max 32)")
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("a %d-byte body of %d empty targets allocates %d bytes before its 422", len(body), n+1, alloc)
	if alloc >= 1<<20 {
		t.Errorf("a %d-byte body of %d empty targets allocates %d bytes before its 422, want < 1 MiB", len(body), n+1, alloc)
	}
}
