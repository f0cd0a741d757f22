package fetcher

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// TestFetcher_InRunner drains one job through a real runner with the
// fetcher as its FetchFunc, and checks the stored outcome and error of each
// target, and that neither the stored errors nor the runner's log lines
// hold a URL, host or address.
func TestFetcher_InRunner(t *testing.T) {
	t.Parallel()

	b := setup(t, nil)
	b.dns.set("c-priv-7d1e.test", "10.0.0.1")
	b.mux.HandleFunc("/c-ok-4a2f", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<p>hello</p>")
	})
	var logs batchtest.Buffer
	r := batchtest.NewRunner(t, batch.Config{
		Fetch: b.f.Fetch, Options: batchsift.Options,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})

	targets := []batch.Target{
		{URL: b.base + "/c-ok-4a2f?token=c-tok-1", Options: batchsift.Fields{Mode: batchsift.ModeClean}.JSON()},
		{URL: b.base + "/c-missing-9b3c?token=c-tok-2"},
		{URL: "http://c-priv-7d1e.test/c-path-5e6f?token=c-tok-3"},
		{URL: "http://2130706433/c-path-0a1b"},
		{URL: "http://c-nx-2c3d.test/"},
		{URL: b.base + "/c-ok-4a2f", Options: batchsift.Fields{JQ: ".x"}.JSON()},
	}
	want := []struct {
		outcome batch.Outcome
		err     string
	}{
		{batch.OutcomeOK, ""},
		{batch.OutcomeUpstream4xx, "upstream: status 404"},
		{batch.OutcomeBlocked, "blocked: private address"},
		{batch.OutcomeBlocked, "blocked: non-canonical ip address"},
		{batch.OutcomeUpstream4xx, "dns: host not found"},
		{batch.OutcomeUnsupported, "unsupported: jq is not available in this fetcher"},
	}
	caller := batch.Caller{Name: "owner"}
	idJob, _, err := r.Submit(t.Context(), caller, targets)
	if err != nil {
		t.Fatal(err)
	}
	id := idJob.ID
	info := batchtest.WaitFinished(t, r, caller, id, 30*time.Second)
	if info.Status != batch.JobPartial {
		t.Errorf("job status = %s, want partial", info.Status)
	}

	var secrets []string
	for _, tg := range targets {
		secrets = append(secrets, b.secrets(tg.URL)...)
	}
	secrets = append(secrets, "c-priv-7d1e", "c-nx-2c3d", "2130706433", "10.0.0.1", "c-tok-")
	for i, ti := range info.Targets {
		if ti.Outcome != want[i].outcome || ti.Error != want[i].err {
			t.Errorf("target %d: outcome %q, error %q; want %q, %q", i, ti.Outcome, ti.Error, want[i].outcome, want[i].err)
		}
		for _, s := range secrets {
			if s != "" && strings.Contains(ti.Error, s) {
				t.Errorf("target %d: stored error %q contains %q", i, ti.Error, s)
			}
		}
	}
	if res, err := batch.DecodeEnvelope(info.Targets[0].Result); err != nil || res.Content != "hello" {
		t.Errorf("target 0 result = %q, %v; want hello", res.Content, err)
	}

	if err := r.Close(t.Context()); err != nil { // every log record written
		t.Fatal(err)
	}
	log := logs.String()
	if log == "" {
		t.Error("the runner logged nothing")
	}
	for _, s := range secrets {
		if s != "" && strings.Contains(log, s) {
			t.Errorf("runner log contains %q:\n%s", s, log)
		}
	}
}

// An upstream that never sends its response headers: the stored error says
// what happened (the fetcher's header timeout), not that the target's own
// deadline passed.
func TestFetcher_InRunnerHeaderTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *Options) { o.HeaderTimeout, o.Timeout = 100*time.Millisecond, 5*time.Second })
	stall := make(chan struct{})
	t.Cleanup(func() { close(stall) }) // before the server's Close, which waits for the handler
	b.mux.HandleFunc("/stall", func(w http.ResponseWriter, r *http.Request) { <-stall })
	r := batchtest.NewRunner(t, batch.Config{Fetch: b.f.Fetch, TargetTimeout: batch.Duration(10 * time.Second)})
	caller := batch.Caller{Name: "owner"}
	job, _, err := r.Submit(t.Context(), caller, []batch.Target{{URL: b.base + "/stall"}})
	if err != nil {
		t.Fatal(err)
	}
	info := batchtest.WaitFinished(t, r, caller, job.ID, 30*time.Second)
	if got := info.Targets[0]; got.Outcome != batch.OutcomeTimeout || got.Error != "timeout: upstream sent no response headers in time" {
		t.Fatalf("target = %q, %q; want the fetcher's header timeout", got.Outcome, got.Error)
	}
}
