package batch_test

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

func TestRunner_LogsNeverCarryTargets(t *testing.T) {
	t.Parallel()
	for _, caller := range []batch.Caller{{Name: "normal"}, {Name: "secret-agency", Restricted: true}} {
		t.Run(caller.Name, func(t *testing.T) {
			t.Parallel()
			const marker = "zq7marker"
			var logs batchtest.Buffer
			targets := []batch.Target{
				{URL: "https://" + marker + "-host.test/ok"},
				{URL: "https://example.test/" + marker + "/path?q=" + marker},
				{URL: "https://example.test/urlerror"},
				{URL: "https://example.test/panic"},
				{URL: "https://example.test/hint"},
			}
			script := map[string]batchtest.Step{
				targets[1].URL: {Err: errors.New("dial " + marker + ": refused")},
				targets[2].URL: {Err: &url.Error{Op: "Get", URL: targets[2].URL + "/" + marker, Err: errors.New("eof")}},
				targets[4].URL: {Err: batch.NewFetchError(batch.OutcomeBlocked, "browser", errors.New("blocked: "+marker))},
			}
			scripted := batchtest.ScriptFetcher(script)
			fetch := func(ctx context.Context, c batch.Caller, tg batch.Target) (batch.Result, error) {
				if tg.URL == targets[3].URL {
					panic("boom " + marker)
				}
				return scripted(ctx, c, tg)
			}
			// The webhook fails once, with an error that names it, panics
			// once, then takes the event.
			hook := "https://" + marker + "-hook.test/in?token=" + marker
			var attempts atomic.Int32
			delivered := make(chan struct{})
			deliver := func(_ context.Context, ev batch.WebhookEvent) error {
				switch attempts.Add(1) {
				case 1:
					return &url.Error{Op: "Post", URL: ev.URL, Err: errors.New("refused")}
				case 2:
					panic("deliver " + ev.URL)
				}
				close(delivered)
				return nil
			}
			store := batchtest.NewStore()
			r := batchtest.NewRunner(t, batch.Config{
				Store: store, Fetch: fetch,
				Deliver: deliver, WebhookBackoff: batch.Duration(time.Millisecond), PollInterval: batch.Duration(10 * time.Millisecond),
				Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			})
			// Labels are caller data too: never logged.
			opts := batch.SubmitOptions{WebhookURL: hook, Metadata: map[string]string{"label-" + marker: "value-" + marker}}
			targets[0].CustomID, targets[2].CustomID = "id-"+marker, marker
			idJob, _, err := r.SubmitWith(t.Context(), caller, targets, opts)
			if err != nil {
				t.Fatal(err)
			}
			id := idJob.ID
			if _, _, err := r.SubmitWith(t.Context(), caller, targets, opts); err != nil {
				t.Fatal(err)
			}
			info := batchtest.WaitFinished(t, r, caller, id, 10*time.Second)
			select {
			case <-delivered:
			case <-time.After(10 * time.Second):
				t.Fatal("the webhook event was not delivered")
			}
			if info.Status != batch.JobPartial {
				t.Fatalf("job = %s, want partial", info.Status)
			}
			// The owner still gets the stored error detail.
			if !strings.Contains(info.Targets[1].Error, marker) {
				t.Errorf("stored error %q lost its detail", info.Targets[1].Error)
			}
			if err := r.Cancel(t.Context(), caller, id); !errors.Is(err, batch.ErrFinished) {
				t.Fatalf("Cancel: %v", err)
			}
			if err := r.Close(t.Context()); err != nil { // every record written
				t.Fatal(err)
			}
			out := logs.String()
			if !strings.Contains(out, `"msg":"batch job finished"`) || !strings.Contains(out, `"targets_done":5`) {
				t.Errorf("no job-finished record with targets_done:\n%s", out)
			}
			if !strings.Contains(out, id) || strings.Count(out, "\n") < 7 {
				t.Fatalf("expected job logs, got:\n%s", out)
			}
			if !strings.Contains(out, `"msg":"batch webhook delivered"`) || !strings.Contains(out, "will retry") {
				t.Errorf("no webhook records:\n%s", out)
			}
			job, _, err := store.Get(t.Context(), batchdriver.GetParams{Caller: caller.Name, JobID: id, JobOnly: true})
			if err != nil || job.IdemKey == "" {
				t.Fatalf("stored job: %+v, %v", job, err)
			}
			for _, secret := range []string{marker, "example.test", "hook.test", job.IdemKey} {
				if strings.Contains(out, secret) {
					t.Errorf("log carries %q:\n%s", secret, out)
				}
			}
			if caller.Restricted && strings.Contains(out, "blocked") {
				t.Errorf("restricted caller's log carries an error detail:\n%s", out)
			}
		})
	}
}
