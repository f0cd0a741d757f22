package batch_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// bareNumbers are durations written without a unit, and what the error
// must say about each: the number, and the string to write instead.
var bareNumbers = []struct {
	field, value string
	want         []string
}{
	{"ttl", "43200", []string{"43200 is not a duration", `"12h"`}},
	{"target_timeout", "30", []string{"30 is not a duration", `"30s"`}},
	{"poll_interval", "1", []string{"1 is not a duration", `"1s"`}},
	{"webhook_backoff", "1.5", []string{"is not a duration", `"1.5s"`}},
}

// decodeThenNew decodes doc with decode and, if that accepts it, hands
// the config to [batch.New]: a bare number must be refused by one of them.
func decodeThenNew(t *testing.T, decode func(doc string, cfg *batch.Config) error, doc string) error {
	t.Helper()
	var cfg batch.Config
	if err := decode(doc, &cfg); err != nil {
		return err
	}
	cfg.Store, cfg.Fetch = batchtest.NewStore(), batchtest.StaticFetcher("x")
	r, err := batch.New(cfg)
	if err == nil {
		t.Cleanup(func() { r.Close(t.Context()) })
	}
	return err
}

// TestDuration_BareNumberJSON checks that a JSON number for a duration is
// refused with a message that names the unit, not read as nanoseconds.
func TestDuration_BareNumberJSON(t *testing.T) {
	t.Parallel()
	decode := func(doc string, cfg *batch.Config) error { return json.Unmarshal([]byte(doc), cfg) }
	for _, bn := range bareNumbers {
		err := decodeThenNew(t, decode, `{"`+bn.field+`":`+bn.value+`}`)
		if err == nil {
			t.Errorf("%s = %s accepted, want it refused", bn.field, bn.value)
			continue
		}
		for _, w := range bn.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s = %s: error %q does not say %s", bn.field, bn.value, err, w)
			}
		}
	}
	if err := decodeThenNew(t, decode, `{"ttl":0,"target_timeout":"30s"}`); err != nil {
		t.Errorf("ttl = 0 (the default): %v", err)
	}
}

// TestDuration_BareNumberConfig checks that a duration under a millisecond
// in a Config, which is what a bare number becomes where no decoder asks
// the type (pelletier/go-toml/v2, or TargetTimeout: 30 in Go), is refused
// by [batch.New] with the field's name and the string to write.
func TestDuration_BareNumberConfig(t *testing.T) {
	t.Parallel()
	f := func(mutate func(*batch.Config), want ...string) {
		t.Helper()
		cfg := batch.Config{Store: batchtest.NewStore(), Fetch: batchtest.StaticFetcher("x")}
		mutate(&cfg)
		_, err := batch.New(cfg)
		if err == nil {
			t.Fatalf("New accepted %+v", cfg)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not say %s", err, w)
			}
		}
		if strings.Contains(err.Error(), "ttl must be at least") {
			t.Errorf("error %q also says the ttl is short", err)
		}
	}
	f(func(c *batch.Config) { c.TTL = 43200 }, `ttl: 43200 is not a duration`, `"12h"`)
	f(func(c *batch.Config) { c.TargetTimeout = 30 }, `target_timeout: 30 is not a duration`, `"30s"`)
	f(func(c *batch.Config) { c.PollInterval = 1 }, `poll_interval: 1 is not a duration`, `"1s"`)
	f(func(c *batch.Config) { c.WebhookRetryFor = batch.Duration(999 * time.Microsecond) }, `webhook_retry_for: 999000 is not a duration`)
}

// TestDuration_SetBareNumber checks the -flag path: a string with a unit
// is read, and a bare number is refused with the string to write.
func TestDuration_SetBareNumber(t *testing.T) {
	t.Parallel()
	var d batch.Duration
	if err := d.Set("90s"); err != nil || d != batch.Duration(90*time.Second) {
		t.Errorf("Set(90s) = %v, %v", d, err)
	}
	if err := d.Set("0"); err != nil || d != 0 {
		t.Errorf("Set(0) = %v, %v", d, err)
	}
	err := d.Set("43200")
	if err == nil || !strings.Contains(err.Error(), `43200 is not a duration; write a string with a unit, such as "12h"`) {
		t.Errorf("Set(43200) = %v, want it refused with the string to write", err)
	}
}
