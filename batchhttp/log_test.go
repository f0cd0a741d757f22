package batchhttp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver/batchdrivertest"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

func TestHandler_LogLine(t *testing.T) {
	t.Parallel()

	b := setup(t, setupOpts{precheck: PrecheckURL})
	targets := batchtest.Targets("log", 2)
	type want map[string]any
	var id string
	steps := []struct {
		method, path, key, body string
		want                    want
	}{
		{"POST", "/v1/batch", keyAlice, submitBody(t, targets), want{
			"route": RouteList, "http_status": 202.0, "caller": "alice", "targets": 2.0, "status": "queued", "reused": false,
		}},
		{"POST", "/v1/batch", keyAlice, submitBody(t, targets), want{
			"route": RouteList, "http_status": 202.0, "caller": "alice", "targets": 2.0, "reused": true,
		}},
		{"GET", "/v1/batch/{id}?wait=10s", keyAlice, "", want{
			"route": RouteJob, "http_status": 200.0, "caller": "alice", "targets": 2.0, "status": "done",
		}},
		{"GET", "/v1/batch/{id}/1", keyAlice, "", want{"route": RouteResult, "http_status": 200.0, "caller": "alice"}},
		{"GET", "/v1/batch/{id}/7", keyAlice, "", want{"route": RouteResult, "http_status": 404.0, "error": "not_found"}},
		{"DELETE", "/v1/batch/{id}", keyAlice, "", want{"route": RouteJob, "http_status": 409.0, "error": "job_finished"}},
		{"GET", "/v1/batch", keyAlice, "", want{"route": RouteList, "http_status": 200.0, "caller": "alice"}},
		{"GET", "/v1/batch/{id}", keyBob, "", want{"route": RouteJob, "http_status": 404.0, "caller": "bob"}},
		{"POST", "/v1/batch", keyBob, `{"targets":[{"url":"http://10.1.2.3/"}]}`, want{
			"route": RouteList, "http_status": 422.0, "error": "blocked", "target_idx": 0.0, "targets": 1.0,
		}},
		{"POST", "/v1/batch", keyBob, `{"targets":`, want{"route": RouteList, "http_status": 400.0, "error": "invalid_batch", "request_id": testRequestID}},
		{"GET", "/v1/batch/{id}", "", "", want{"route": RouteJob, "http_status": 401.0, "error": "unauthorized"}},
		{"PUT", "/v1/batch/{id}/0", keyBob, "", want{"route": RouteResult, "http_status": 405.0}},
		{"GET", "/nowhere", keyBob, "", want{"route": RouteOther, "http_status": 404.0}},
	}
	for i, s := range steps {
		rec := b.do(t, s.method, strings.ReplaceAll(s.path, "{id}", id), s.key, s.body)
		if i == 0 {
			var resp SubmitResponse
			decodeJSON(t, rec.Body.Bytes(), &resp)
			id = resp.JobID
		}
		lines := b.logs.lines(t)
		if len(lines) != i+1 {
			t.Fatalf("%s %s: %d log lines after %d requests, want one each:\n%s", s.method, s.path, len(lines), i+1, b.logs)
		}
		line := lines[i]
		if line["msg"] != "batch http" {
			t.Errorf("%s %s: msg %q", s.method, s.path, line["msg"])
		}
		for k, v := range s.want {
			if line[k] != v {
				t.Errorf("%s %s: %s = %v, want %v (line %v)", s.method, s.path, k, line[k], v, line)
			}
		}
		if strings.Contains(s.path, "{id}") && s.key != "" && s.method != "PUT" && line["job_id"] != id {
			t.Errorf("%s %s: job_id = %v, want %s", s.method, s.path, line["job_id"], id)
		}
	}
}

func TestHandler_LogRedaction(t *testing.T) {
	t.Parallel()

	for _, key := range []string{keyAlice, keyRita} {
		t.Run(key, func(t *testing.T) {
			t.Parallel()
			canary := fmt.Sprintf("c-%d.test", time.Now().UnixNano())
			u := func(i int) string { return fmt.Sprintf("https://%s/path-%d-canary?token=tok-%d-canary", canary, i, i) }
			logs := &logBuffer{}
			runnerLog := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			fetch := func(_ context.Context, _ batch.Caller, t batch.Target) (batch.Result, error) {
				if strings.Contains(t.URL, "path-1-") {
					return batch.Result{}, &url.Error{Op: "Get", URL: t.URL, Err: errors.New("connection refused")}
				}
				if strings.Contains(t.URL, "path-2-") {
					panic("fetch of " + t.URL + " exploded")
				}
				return batch.Result{Content: "page of " + t.URL, Meta: map[string]any{"source": t.URL}}, nil
			}
			precheck := func(_ context.Context, _ batch.Caller, raw string) error {
				if strings.Contains(raw, "path-9-") {
					return fmt.Errorf("blocked: %s resolves to a private address", raw)
				}
				return nil
			}
			// The webhook's first attempt fails with an error that holds its
			// URL; the second takes the event.
			hook := u(7)
			var attempts atomic.Int32
			delivered := make(chan struct{})
			deliver := func(_ context.Context, ev batch.WebhookEvent) error {
				if attempts.Add(1) == 1 {
					return &url.Error{Op: "Post", URL: ev.URL, Err: errors.New("connection refused")}
				}
				close(delivered)
				return nil
			}
			b := setup(t, setupOpts{fetch: fetch, precheck: precheck, config: func(c *batch.Config) {
				c.Logger, c.Deliver, c.WebhookBackoff, c.Now = runnerLog, deliver, batch.Duration(time.Millisecond), time.Now
			}})
			b.handler.log = runnerLog // one buffer for both
			targets := []batch.Target{{URL: u(0)}, {URL: u(1)}, {URL: u(2)}}

			rec := b.do(t, http.MethodPost, "/v1/batch", key, submitHookBody(t, targets, hook))
			if rec.Code != http.StatusAccepted {
				t.Fatalf("submit: %d %s", rec.Code, rec.Body)
			}
			var sub SubmitResponse
			decodeJSON(t, rec.Body.Bytes(), &sub)
			id := sub.JobID
			b.do(t, http.MethodGet, "/v1/batch/"+id+"?wait=10s&results=1", key, "")
			b.do(t, http.MethodPost, "/v1/batch", key, submitHookBody(t, targets, hook)) // reused
			b.do(t, http.MethodPost, "/v1/batch", key, submitHookBody(t, targets, u(9))) // a blocked webhook
			select {
			case <-delivered:
			case <-time.After(10 * time.Second):
				t.Fatal("the webhook event was not delivered")
			}
			for i := range targets {
				b.do(t, http.MethodGet, fmt.Sprintf("/v1/batch/%s/%d", id, i), key, "")
			}
			b.do(t, http.MethodGet, "/v1/batch", key, "")
			b.do(t, http.MethodDelete, "/v1/batch/"+id, key, "")
			b.submit(t, key, []batch.Target{{URL: u(3)}, {URL: u(9)}}, http.StatusUnprocessableEntity)
			b.submit(t, key, []batch.Target{{URL: u(4), Options: batchsift.Fields{Mode: u(5)}.JSON()}}, http.StatusBadRequest)
			b.do(t, http.MethodGet, "/v1/batch/"+url.PathEscape(u(6)), key, "")

			if err := b.runner.Close(t.Context()); err != nil { // every runner record written
				t.Fatal(err)
			}
			got := logs.String()
			if !strings.Contains(got, id) {
				t.Fatalf("the logs do not even name the job: %s", got)
			}
			if !strings.Contains(got, "batch webhook delivered") {
				t.Errorf("no webhook records: %s", got)
			}
			// (That no idempotency key is logged, batch's TestRunner_Logs
			// checks against the key the store holds.)
			for _, secret := range []string{canary, "canary", "tok-"} {
				if strings.Contains(got, secret) {
					t.Errorf("a log line carries %q:\n%s", secret, got)
				}
			}
		})
	}
}

func TestHandler_Observe(t *testing.T) {
	t.Parallel()

	f := batchtest.NewBlockingFetcher()
	b := setup(t, setupOpts{fetch: f.Fetch, config: func(c *batch.Config) { c.JobsPerCaller, c.JobsTotal = 4, 4 }})
	var ids []string
	for i := range 4 {
		id := b.submit(t, keyAlice, batchtest.Targets(fmt.Sprint("obs", i), 2), http.StatusAccepted).JobID
		ids = append(ids, id)
		b.do(t, http.MethodGet, "/v1/batch/"+id+"?wait=10ms", keyAlice, "")
		b.do(t, http.MethodGet, "/v1/batch/"+id+"/1", keyAlice, "")
		b.do(t, http.MethodGet, "/v1/batch/"+id+"/9", keyAlice, "")
		b.do(t, http.MethodDelete, "/v1/batch/"+id, keyAlice, "")
		b.do(t, http.MethodDelete, "/v1/batch/"+id, keyBob, "")
		b.do(t, http.MethodPatch, "/v1/batch/"+id, keyAlice, "")
		b.do(t, http.MethodGet, "/v1/batch/"+id+"/0/x", keyAlice, "")
	}
	b.do(t, http.MethodGet, "/v1/batch", keyAlice, "")

	obs := b.obs.all()
	if len(obs) != 4*8+1 {
		t.Fatalf("%d observations for %d requests", len(obs), 4*8+1)
	}
	labels := map[string]int{}
	for _, o := range obs {
		labels[o.route]++
		for _, id := range ids {
			if strings.Contains(o.route, id) || strings.Contains(o.route, id[:8]) {
				t.Fatalf("a job id reached a route label: %+v", o)
			}
		}
		if o.status < 200 || o.d <= 0 {
			t.Errorf("observation %+v", o)
		}
	}
	want := map[string]int{RouteList: 5, RouteJob: 16, RouteResult: 8, RouteOther: 4}
	for k, v := range want {
		if labels[k] != v {
			t.Errorf("label %q observed %d times, want %d (all: %v)", k, labels[k], v, labels)
		}
	}
	if len(labels) != len(want) {
		t.Errorf("labels %v, want only %v", labels, want)
	}
}

func TestHandler_LogLineRestricted(t *testing.T) {
	t.Parallel()
	precheck := func(context.Context, batch.Caller, string) error { return errors.New("blocked: port 8443") }
	b := setup(t, setupOpts{precheck: precheck})
	targets := []batch.Target{{URL: "https://a.test:8443/"}}
	b.submit(t, keyRita, targets, http.StatusUnprocessableEntity)
	b.submit(t, keyAlice, targets, http.StatusUnprocessableEntity)
	lines := b.logs.lines(t)
	if len(lines) != 2 {
		t.Fatalf("got %d log lines, want 2", len(lines))
	}
	rita, alice := lines[0], lines[1]
	if rita["caller"] != "rita" || rita["http_status"] != 422.0 {
		t.Errorf("restricted line = %v", rita)
	}
	if _, ok := rita["error"]; ok {
		t.Errorf("restricted caller's line carries an error detail: %v", rita)
	}
	if _, ok := rita["target_idx"]; ok {
		t.Errorf("restricted caller's line carries the refused target: %v", rita)
	}
	if alice["error"] != "blocked" || alice["target_idx"] != 0.0 {
		t.Errorf("normal caller's line = %v, want error blocked at target 0", alice)
	}
}

// A 503 of a store outage is planned: its line is DEBUG and carries no
// cause, which may hold the database's user, host and port. The runner
// logs the outage itself, at its start and its end.
func TestHandler_PlannedUnavailableIsDebug(t *testing.T) {
	t.Parallel()
	store := &batchdrivertest.Unreachable{Store: batchtest.NewStore(), Err: batchdrivertest.ErrDriver}
	b := setup(t, setupOpts{store: store})
	store.Down.Store(true)
	for _, path := range []string{"/v1/batch", "/v1/batch/some-job"} {
		if rec := b.do(t, http.MethodGet, path, keyAlice, ""); rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("GET %s while the store is down: %d %s, want 503", path, rec.Code, rec.Body)
		}
	}
	lines := b.logs.lines(t)
	if len(lines) != 2 {
		t.Fatalf("%d log lines for two requests: %v", len(lines), lines)
	}
	for _, l := range lines {
		if l["level"] != "DEBUG" || l["error"] != CodeUnavailable || l["cause"] != nil {
			t.Errorf("log line of a planned 503 = %v, want DEBUG, error %q, no cause", l, CodeUnavailable)
		}
	}
	for _, secret := range batchdrivertest.DriverSecrets {
		if strings.Contains(b.logs.String(), secret) {
			t.Errorf("a log line carries the driver's %q: %s", secret, b.logs.String())
		}
	}
}
