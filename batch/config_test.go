package batch_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"reflect"
	"strings"
	"testing"
	"time"

	burntsushi "github.com/BurntSushi/toml"
	pelletier "github.com/pelletier/go-toml/v2"

	"github.com/siftfetch/batchkit/batch"
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

// batchBlock is a host's [batch] block, every field set, durations as
// strings.
const batchBlock = `
[batch]
targets_per_job = 16
jobs_per_caller = 2
jobs_total = 4
ttl = "12h"
max_bytes = 1048576
workers = 3
target_timeout = "90s"
max_result_bytes = 4096
busy_wait = "1s"
store_wait = "30s"
sweep_interval = "15s"
poll_interval = "250ms"
metrics_prefix = "sift_batch"
runner_id = "node-1"
heartbeat_interval = "5s"
stale_after = "30s"
webhook_timeout = "3s"
webhook_backoff = "2s"
webhook_retry_for = "6h"
webhook_workers = 5
webhook_in_flight_per_caller = 3
webhook_pending_per_caller = 7
`

// batchJSON is batchBlock as JSON.
const batchJSON = `{"batch":{"targets_per_job":16,"jobs_per_caller":2,"jobs_total":4,"ttl":"12h","max_bytes":1048576,
	"workers":3,"target_timeout":"90s","max_result_bytes":4096,"busy_wait":"1s","store_wait":"30s",
	"sweep_interval":"15s","poll_interval":"250ms","metrics_prefix":"sift_batch","runner_id":"node-1",
	"heartbeat_interval":"5s","stale_after":"30s","webhook_timeout":"3s","webhook_backoff":"2s","webhook_retry_for":"6h",
	"webhook_workers":5,"webhook_in_flight_per_caller":3,"webhook_pending_per_caller":7}}`

// TestConfig_Decode decodes the same [batch] block with both common TOML
// libraries and its JSON twin with encoding/json, and checks every field.
func TestConfig_Decode(t *testing.T) {
	t.Parallel()
	type file struct {
		Batch batch.Config `json:"batch" toml:"batch"`
	}
	d := func(v time.Duration) batch.Duration { return batch.Duration(v) }
	want := batch.Config{
		TargetsPerJob: 16, JobsPerCaller: 2, JobsTotal: 4, TTL: d(12 * time.Hour), MaxBytes: 1 << 20,
		Workers: 3, TargetTimeout: d(90 * time.Second), MaxResultBytes: 4096, BusyWait: d(time.Second),
		StoreWait: d(30 * time.Second), SweepInterval: d(15 * time.Second), PollInterval: d(250 * time.Millisecond),
		MetricsPrefix: "sift_batch", RunnerID: "node-1", HeartbeatInterval: d(5 * time.Second),
		StaleAfter: d(30 * time.Second), WebhookTimeout: d(3 * time.Second), WebhookBackoff: d(2 * time.Second),
		WebhookRetryFor: d(6 * time.Hour), WebhookWorkers: 5, WebhookInFlightPerCaller: 3, WebhookPendingPerCaller: 7,
	}
	// Every field a config file can set is set, so that a field added
	// without a decodable type fails here.
	wv := reflect.ValueOf(want)
	for i := range wv.NumField() {
		if f := wv.Type().Field(i); f.Tag.Get("toml") != "-" && wv.Field(i).IsZero() {
			t.Errorf("the test block does not set %s (toml %q)", f.Name, f.Tag.Get("toml"))
		}
	}
	decoders := []struct {
		name   string
		doc    string
		decode func(doc string, v any) error
	}{
		{"BurntSushi", batchBlock, func(doc string, v any) error { _, err := burntsushi.Decode(doc, v); return err }},
		{"pelletier", batchBlock, func(doc string, v any) error { return pelletier.Unmarshal([]byte(doc), v) }},
		{"json", batchJSON, func(doc string, v any) error {
			dec := json.NewDecoder(strings.NewReader(doc))
			dec.DisallowUnknownFields()
			return dec.Decode(v)
		}},
	}
	for _, dc := range decoders {
		t.Run(dc.name, func(t *testing.T) {
			t.Parallel()
			var got file
			if err := dc.decode(dc.doc, &got); err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !reflect.DeepEqual(got.Batch, want) {
				t.Errorf("decoded\n%+v\nwant\n%+v", got.Batch, want)
			}
			if _, err := batch.New(got.Batch); err == nil || !strings.Contains(err.Error(), "Store is required") {
				t.Errorf("New(decoded) = %v, want only the missing Store and Fetch refused", err)
			}
			var bad file
			doc := strings.Replace(dc.doc, `"12h"`, `"half a day"`, 1)
			if err := dc.decode(doc, &bad); err == nil || !strings.Contains(err.Error(), "half a day") {
				t.Errorf("a bad duration: %v, want an error naming it", err)
			}
		})
	}
}

// TestDuration_RoundTrip encodes a config as JSON and TOML and reads it back.
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
	tb, err := pelletier.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var tback batch.Config
	if _, err := burntsushi.Decode(string(tb), &tback); err != nil || tback.TTL != cfg.TTL || tback.PollInterval != cfg.PollInterval {
		t.Errorf("TOML round trip of\n%s= %v, %v", tb, tback, err)
	}
	var fl batch.Duration
	if err := fl.Set("90s"); err != nil || fl != batch.Duration(90*time.Second) || fl.String() != "1m30s" {
		t.Errorf("Set(90s) = %v, %v", fl, err)
	}
	if err := fl.Set("soon"); err == nil {
		t.Error("Set(soon) accepted")
	}
}
