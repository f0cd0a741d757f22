package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
)

// TestBatchd_Deadline: batchd with -max-deadline 1m ends a job of ten
// targets on an upstream that takes a second a page at its 3s deadline,
// plus the grace of the page in flight: the pages fetched by then are
// readable, the rest expired unfetched, and the job's webhook carries the
// deadline. A deadline over the cap is 422 deadline_too_far with the cap.
func TestBatchd_Deadline(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := buildDaemon(t)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /page/{n}", func(w http.ResponseWriter, r *http.Request) {
		select { // a slow upstream: a second a page
		case <-time.After(time.Second):
		case <-r.Context().Done():
			return
		}
		fmt.Fprintf(w, "page %s body", r.PathValue("n"))
	})
	pages := serveTest(t, mux, func() {})
	hooks := make(chan batchhttp.WebhookPayload, 4)
	receiver := serveTest(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p batchhttp.WebhookPayload
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		hooks <- p
		w.WriteHeader(http.StatusNoContent)
	}), func() {})
	const key = "alice-secret-0123"
	d := startDaemon(t, bin, "-db", filepath.Join(t.TempDir(), "batchd.db"), "-key", "alice="+key,
		"-allow", pages, "-allow", receiver, "-max-deadline", "1m")

	post := func(body any) (int, []byte) {
		t.Helper()
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, d.server+"/v1/batch", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, out
	}
	status := func(id string) batchhttp.StatusResponse {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, d.server+"/v1/batch/"+id+"?results=1", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %s = %d %s", id, resp.StatusCode, body)
		}
		return decodeJSON[batchhttp.StatusResponse](t, string(body))
	}

	// Over the cap: 422, naming the cap.
	targets := make([]batch.Target, 10)
	for i := range targets {
		targets[i] = batch.Target{URL: fmt.Sprintf("http://%s/page/%d", pages, i)}
	}
	code, body := post(map[string]any{"targets": targets, "deadline": "2m"})
	if e := decodeJSON[batchhttp.ErrorResponse](t, string(body)); code != http.StatusUnprocessableEntity ||
		e.Code != batchhttp.CodeDeadlineTooFar || !strings.Contains(e.Error, "1m0s") {
		t.Errorf("a deadline over the cap = %d %s, want 422 %s naming 1m0s", code, body, batchhttp.CodeDeadlineTooFar)
	}

	// Ten slow pages with a 3s deadline.
	began := time.Now()
	code, body = post(map[string]any{"targets": targets, "deadline": "3s",
		"webhook": map[string]string{"url": "http://" + receiver + "/hook"}})
	if code != http.StatusAccepted {
		t.Fatalf("submit = %d %s", code, body)
	}
	sub := decodeJSON[batchhttp.SubmitResponse](t, string(body))
	var st batchhttp.StatusResponse
	for st = status(sub.JobID); st.Status.Live(); st = status(sub.JobID) {
		if time.Since(began) > time.Minute {
			t.Fatalf("job still %s a minute after its submit", st.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(began)
	t.Logf("the job with a 3s deadline ended %s after its submit: %d of 10 pages done", took.Round(time.Millisecond), countOK(st))
	if limit := 3*time.Second + batch.FetchOverrunGrace + 5*time.Second; took > limit {
		t.Errorf("the job ended %s after its submit, want within %s", took, limit)
	}
	if st.Error != batch.DeadlineReason || (st.Status != batch.JobPartial && !(st.Status == batch.JobFailed && countOK(st) == 0)) {
		t.Errorf("job = %s/%q, want partial (or failed with nothing done) with error %q", st.Status, st.Error, batch.DeadlineReason)
	}
	if st.Deadline == nil {
		t.Fatal("the status carries no deadline")
	}
	finished := true
	for _, ts := range st.Targets {
		switch {
		case ts.Outcome == batch.OutcomeOK:
			if !finished {
				t.Errorf("target %d done after one that did not finish", ts.Idx)
			}
			env, err := batch.DecodeEnvelope(ts.Result)
			if want := fmt.Sprintf("page %d body", ts.Idx); err != nil || env.Content != want {
				t.Errorf("target %d result = %s (%v), want content %q", ts.Idx, ts.Result, err, want)
			}
		case ts.Outcome == batch.OutcomeExpired:
			finished = false
			if ts.Status != batch.TargetFailed || ts.Retryable == nil || !*ts.Retryable {
				t.Errorf("target %d = %+v, want failed, expired and retryable", ts.Idx, ts)
			}
		default:
			t.Errorf("target %d = %s/%s, want ok or expired", ts.Idx, ts.Status, ts.Outcome)
		}
	}
	if st.Targets[len(st.Targets)-1].Outcome != batch.OutcomeExpired {
		t.Errorf("the last page did not expire: %+v", st.Targets[len(st.Targets)-1])
	}

	select {
	case p := <-hooks:
		if p.Data.JobID != sub.JobID || p.Data.Error != batch.DeadlineReason || p.Data.Deadline == nil || !p.Data.Deadline.Equal(*st.Deadline) {
			t.Errorf("webhook data = %+v, want job %s, error %q and deadline %v", p.Data, sub.JobID, batch.DeadlineReason, *st.Deadline)
		}
	case <-time.After(30 * time.Second):
		t.Error("no webhook within 30s of the job's end")
	}
	d.stop(t)
}

// countOK counts the targets done with outcome ok.
func countOK(st batchhttp.StatusResponse) int {
	n := 0
	for _, ts := range st.Targets {
		if ts.Outcome == batch.OutcomeOK {
			n++
		}
	}
	return n
}
