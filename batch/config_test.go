package batch_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

func TestNew_InvalidConfig(t *testing.T) {
	t.Parallel()
	valid := batch.Config{Store: batchtest.NewStore(), Fetch: batchtest.StaticFetcher("x")}
	f := func(mutate func(*batch.Config), wantInErr string) {
		t.Helper()
		cfg := valid
		mutate(&cfg)
		r, err := batch.New(cfg)
		if err == nil || r != nil {
			t.Fatalf("New accepted an invalid config (want error containing %q)", wantInErr)
		}
		if !strings.Contains(err.Error(), wantInErr) {
			t.Errorf("error %q does not mention %q", err, wantInErr)
		}
	}
	f(func(c *batch.Config) { c.Store = nil }, "Store is required")
	f(func(c *batch.Config) { c.Fetch = nil }, "Fetch func is required")
	f(func(c *batch.Config) { c.TargetsPerJob = -1 }, "targets_per_job")
	f(func(c *batch.Config) { c.Workers = -2 }, "workers")
	f(func(c *batch.Config) { c.TTL = batch.Duration(-time.Hour) }, "ttl")
	f(func(c *batch.Config) { c.TTL = batch.Duration(time.Second) }, "ttl must be at least")
	f(func(c *batch.Config) { c.JobsPerCaller, c.JobsTotal = 5, 2 }, "jobs_per_caller")
	f(func(c *batch.Config) { c.MetricsPrefix = "bad-prefix" }, "metrics_prefix")
	f(func(c *batch.Config) { c.BusyWait = -1 }, "busy_wait")
	f(func(c *batch.Config) { c.HeartbeatInterval = batch.Duration(-time.Second) }, "heartbeat_interval")
	f(func(c *batch.Config) { c.StaleAfter = batch.Duration(15 * time.Second) }, "stale_after (15s) must be at least twice heartbeat_interval (10s)")
	f(func(c *batch.Config) {
		c.HeartbeatInterval, c.StaleAfter = batch.Duration(time.Minute), batch.Duration(90*time.Second)
	}, "stale_after")
	f(func(c *batch.Config) { c.WebhookTimeout = batch.Duration(-time.Second) }, "webhook_timeout")
	f(func(c *batch.Config) { c.WebhookBackoff = batch.Duration(-time.Second) }, "webhook_backoff")
	f(func(c *batch.Config) { c.WebhookRetryFor = batch.Duration(-time.Second) }, "webhook_retry_for")
	f(func(c *batch.Config) { c.WebhookWorkers = -1 }, "webhook_workers")
	f(func(c *batch.Config) { c.WebhookInFlightPerCaller = -1 }, "webhook_in_flight_per_caller")
	f(func(c *batch.Config) { c.WebhookPendingPerCaller = -1 }, "webhook_pending_per_caller")

	if _, err := batch.New(valid); err != nil {
		t.Fatalf("New(valid) = %v", err)
	}
}

func TestRunner_Lifecycle(t *testing.T) {
	t.Parallel()
	r, err := batch.New(batch.Config{Store: batchtest.NewStore(), Fetch: batchtest.StaticFetcher("x")})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Submit(t.Context(), batch.Caller{Name: "a"}, batchtest.Targets("x", 1)); !errors.Is(err, batch.ErrNotStarted) {
		t.Errorf("Submit before Start: %v, want ErrNotStarted", err)
	}
	if err := r.Close(t.Context()); err != nil {
		t.Errorf("Close before Start: %v", err)
	}
	if err := r.Close(t.Context()); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := r.Start(t.Context()); !errors.Is(err, batch.ErrClosed) {
		t.Errorf("Start after Close: %v, want ErrClosed", err)
	}
	r2 := batchtest.NewRunner(t, batch.Config{})
	if err := r2.Start(t.Context()); err == nil {
		t.Error("second Start succeeded")
	}
}

func TestConfig_UnmarshalJSON(t *testing.T) {
	t.Parallel()
	var cfg batch.Config
	err := json.Unmarshal([]byte(`{"targets_per_job":16,"jobs_per_caller":2,"jobs_total":4,"ttl":"36h","max_bytes":1048576,
		"workers":3,"target_timeout":"90s","max_result_bytes":4096,"busy_wait":"1s",
		"heartbeat_interval":"5s","stale_after":"30s","runner_id":"node-1",
		"webhook_timeout":"3s","webhook_backoff":"2s","webhook_retry_for":"6h"}`), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := func(v time.Duration) batch.Duration { return batch.Duration(v) }
	if cfg.TargetsPerJob != 16 || cfg.JobsPerCaller != 2 || cfg.JobsTotal != 4 || cfg.TTL != d(36*time.Hour) ||
		cfg.MaxBytes != 1<<20 || cfg.Workers != 3 || cfg.TargetTimeout != d(90*time.Second) ||
		cfg.MaxResultBytes != 4096 || cfg.BusyWait != d(time.Second) ||
		cfg.HeartbeatInterval != d(5*time.Second) || cfg.StaleAfter != d(30*time.Second) || cfg.RunnerID != "node-1" ||
		cfg.WebhookTimeout != d(3*time.Second) || cfg.WebhookBackoff != d(2*time.Second) || cfg.WebhookRetryFor != d(6*time.Hour) {
		t.Errorf("decoded %+v", cfg)
	}
	if err := json.Unmarshal([]byte(`{"ttl":"forever"}`), &cfg); err == nil {
		t.Error("bad duration accepted")
	}
	if err := json.Unmarshal([]byte(`{"ttl":true}`), &cfg); err == nil {
		t.Error("bool duration accepted")
	}
}

func TestResult_Envelope(t *testing.T) {
	t.Parallel()
	r := batch.Result{Content: "hello", Meta: map[string]any{"mode": "clean", "content": "overwritten", "n": 2.0}}
	env, err := r.Envelope()
	if err != nil {
		t.Fatal(err)
	}
	if string(env) != `{"content":"hello","mode":"clean","n":2}` {
		t.Errorf("envelope = %s", env)
	}
	back, err := batch.DecodeEnvelope(env)
	if err != nil || back.Content != "hello" || back.Meta["mode"] != "clean" || back.Meta["n"] != 2.0 || len(back.Meta) != 2 {
		t.Errorf("DecodeEnvelope = %+v, %v", back, err)
	}
	if _, err := (batch.Result{Meta: map[string]any{"f": func() {}}}).Envelope(); err == nil {
		t.Error("unencodable meta accepted")
	}
	if _, err := batch.DecodeEnvelope([]byte("[1]")); err == nil {
		t.Error("non-object envelope accepted")
	}
}

func TestAggregateStatus(t *testing.T) {
	t.Parallel()
	f := func(ok, failed int, want batch.JobStatus) {
		t.Helper()
		if got := batchdriver.AggregateStatus(ok, failed); got != want {
			t.Errorf("AggregateStatus(%d, %d) = %s, want %s", ok, failed, got, want)
		}
	}
	f(3, 0, batch.JobDone)
	f(0, 3, batch.JobFailed)
	f(2, 1, batch.JobPartial)
	f(0, 0, batch.JobFailed)
}

func TestRunner_WaitEndsOnClose(t *testing.T) {
	t.Parallel()
	fetch := batchtest.NewBlockingFetcher()
	r, err := batch.New(batch.Config{Store: batchtest.NewStore(), Fetch: fetch.Fetch})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	c := batch.Caller{Name: "a"}
	idJob, _, err := r.Submit(t.Context(), c, batchtest.Targets("w", 1))
	if err != nil {
		t.Fatal(err)
	}
	id := idJob.ID
	<-fetch.Started
	got := make(chan error, 1)
	go func() {
		_, err := r.Wait(t.Context(), c, id, batch.WaitOptions{Timeout: batch.MaxWait})
		got <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := r.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("Wait after Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return when the runner closed")
	}
}

// TestDuration_RoundTrip encodes a config as JSON and reads it back (the
// TOML round trip is in internal/tomltest, a module of its own).
func TestDuration_RoundTrip(t *testing.T) {
	t.Parallel()
	cfg := batch.Config{TTL: batch.Duration(36 * time.Hour), PollInterval: batch.Duration(1500 * time.Millisecond)}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"ttl":"36h0m0s"`)) {
		t.Errorf("JSON = %s, want the ttl as a string", b)
	}
	var back batch.Config
	if err := json.Unmarshal(b, &back); err != nil || back.TTL != cfg.TTL || back.PollInterval != cfg.PollInterval {
		t.Errorf("JSON round trip = %v, %v", back, err)
	}
	var fl batch.Duration
	if err := fl.Set("90s"); err != nil || fl != batch.Duration(90*time.Second) || fl.String() != "1m30s" {
		t.Errorf("Set(90s) = %v, %v", fl, err)
	}
	if err := fl.Set("soon"); err == nil {
		t.Error("Set(soon) accepted")
	}
}
