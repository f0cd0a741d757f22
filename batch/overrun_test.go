package batch_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// A fetch that returns long after its deadline (a FetchFunc that ignores
// its context) is counted in <prefix>_fetch_overruns_total and logged once
// at Warn, with job_id, idx and how late it was, and without the URL; a
// fetch that honours its context is not.
func TestRunner_FetchOverrun(t *testing.T) {
	t.Parallel()
	const timeout = 50 * time.Millisecond
	hold := batch.FetchOverrunGrace + 500*time.Millisecond
	for _, c := range []struct {
		name    string
		fetch   batch.FetchFunc
		overrun bool
	}{
		{"HonoursContext", func(ctx context.Context, _ batch.Caller, _ batch.Target) (batch.Result, error) {
			<-ctx.Done()
			return batch.Result{}, ctx.Err()
		}, false},
		{"IgnoresContext", func(context.Context, batch.Caller, batch.Target) (batch.Result, error) {
			time.Sleep(hold) // a CPU-bound loop that never looks at ctx
			return batch.Result{Content: "late"}, nil
		}, true},
		{"IgnoresContextThenPanics", func(context.Context, batch.Caller, batch.Target) (batch.Result, error) {
			time.Sleep(hold)
			panic("late and broken")
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var logs batchtest.Buffer
			r := batchtest.NewRunner(t, batch.Config{
				Fetch: c.fetch, TargetTimeout: batch.Duration(timeout), MetricsPrefix: "p",
				Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			})
			caller := batch.Caller{Name: "alice"}
			targets := []batch.Target{{URL: "https://secret-host.test/a"}}
			job, _, err := r.Submit(t.Context(), caller, targets)
			if err != nil {
				t.Fatal(err)
			}
			info := batchtest.WaitFinished(t, r, caller, job.ID, 10*time.Second)
			if got := info.Targets[0].Outcome; got != batch.OutcomeTimeout {
				t.Errorf("target outcome %q, want timeout (the deadline stands whatever the fetcher does)", got)
			}
			// Close waits for the abandoned call to return.
			if err := r.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			want := 0.0
			if c.overrun {
				want = 1
			}
			if got := scrape(t, r)["p_fetch_overruns_total"].value; got != want {
				t.Errorf("p_fetch_overruns_total = %v, want %v", got, want)
			}
			var warns []map[string]any
			for line := range strings.Lines(logs.String()) {
				var rec map[string]any
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatalf("log line %q: %v", line, err)
				}
				if rec["msg"] == "batch fetch overran its deadline; the FetchFunc ignores its context" {
					warns = append(warns, rec)
				}
			}
			if len(warns) != int(want) {
				t.Fatalf("%d overrun log lines, want %v:\n%s", len(warns), want, logs.String())
			}
			if strings.Contains(logs.String(), "secret-host") {
				t.Errorf("a log line carries the URL:\n%s", logs.String())
			}
			if !c.overrun {
				return
			}
			w := warns[0]
			lateNs, ok := w["late"].(float64) // slog's JSON writes a duration in nanoseconds
			late := time.Duration(lateNs)
			if w["level"] != "WARN" || w["job_id"] != job.ID || w["idx"] != 0.0 || !ok || late <= batch.FetchOverrunGrace {
				t.Errorf("overrun line %v: want WARN with job_id %s, idx 0 and late over %s", w, job.ID, batch.FetchOverrunGrace)
			}
			t.Logf("deadline %s; the fetch returned %s after it", timeout, late.Round(time.Millisecond))
		})
	}
}
