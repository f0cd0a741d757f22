package tomltest_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	burntsushi "github.com/BurntSushi/toml"
	pelletier "github.com/pelletier/go-toml/v2"

	"github.com/siftfetch/batchkit/batch"
)

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
drains = 4
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
resume = true
repeat_interrupted = true
close_grace = "20s"
max_deadline = "2h"
fetches_per_host = 3
host_interval = "500ms"
max_retry_after = "45s"
webhook_timeout = "3s"
webhook_backoff = "2s"
webhook_retry_for = "6h"
webhook_workers = 5
webhook_in_flight_per_caller = 3
webhook_pending_per_caller = 7
`

// batchJSON is batchBlock as JSON.
const batchJSON = `{"batch":{"targets_per_job":16,"jobs_per_caller":2,"jobs_total":4,"ttl":"12h","max_bytes":1048576,
	"workers":3,"drains":4,"target_timeout":"90s","max_result_bytes":4096,"busy_wait":"1s","store_wait":"30s",
	"sweep_interval":"15s","poll_interval":"250ms","metrics_prefix":"sift_batch","runner_id":"node-1",
	"heartbeat_interval":"5s","stale_after":"30s","resume":true,"repeat_interrupted":true,"close_grace":"20s","max_deadline":"2h","fetches_per_host":3,"host_interval":"500ms","max_retry_after":"45s","webhook_timeout":"3s","webhook_backoff":"2s","webhook_retry_for":"6h",
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
		Workers: 3, Drains: 4, TargetTimeout: d(90 * time.Second), MaxResultBytes: 4096, BusyWait: d(time.Second),
		StoreWait: d(30 * time.Second), SweepInterval: d(15 * time.Second), PollInterval: d(250 * time.Millisecond),
		MetricsPrefix: "sift_batch", RunnerID: "node-1", HeartbeatInterval: d(5 * time.Second),
		StaleAfter: d(30 * time.Second), Resume: true, RepeatInterrupted: true, CloseGrace: d(20 * time.Second), MaxDeadline: d(2 * time.Hour),
		FetchesPerHost: 3, HostInterval: d(500 * time.Millisecond), MaxRetryAfter: d(45 * time.Second), WebhookTimeout: d(3 * time.Second), WebhookBackoff: d(2 * time.Second),
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

// TestDuration_RoundTripTOML encodes a config as TOML with one library
// and reads it back with the other.
func TestDuration_RoundTripTOML(t *testing.T) {
	t.Parallel()
	cfg := batch.Config{TTL: batch.Duration(36 * time.Hour), PollInterval: batch.Duration(1500 * time.Millisecond)}
	tb, err := pelletier.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var tback batch.Config
	if _, err := burntsushi.Decode(string(tb), &tback); err != nil || tback.TTL != cfg.TTL || tback.PollInterval != cfg.PollInterval {
		t.Errorf("TOML round trip of\n%s= %v, %v", tb, tback, err)
	}
}
