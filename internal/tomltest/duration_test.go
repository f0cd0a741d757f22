package tomltest_test

import (
	"strings"
	"testing"

	burntsushi "github.com/BurntSushi/toml"
	pelletier "github.com/pelletier/go-toml/v2"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// TestDuration_BareNumberTOML checks that a bare TOML number for a duration
// is refused, naming the key and the string to write, with both common
// TOML libraries. BurntSushi hands the number to UnmarshalText; pelletier
// sets the integer itself, so [batch.New] refuses what it became.
func TestDuration_BareNumberTOML(t *testing.T) {
	t.Parallel()
	decoders := []struct {
		name   string
		decode func(doc string, cfg *batch.Config) error
	}{
		{"BurntSushi", func(doc string, cfg *batch.Config) error { _, err := burntsushi.Decode(doc, cfg); return err }},
		{"pelletier", func(doc string, cfg *batch.Config) error { return pelletier.Unmarshal([]byte(doc), cfg) }},
	}
	for _, dc := range decoders {
		t.Run(dc.name, func(t *testing.T) {
			t.Parallel()
			for _, bn := range bareNumbers {
				err := decodeThenNew(t, dc.decode, bn.field+" = "+bn.value+"\n")
				if err == nil {
					t.Errorf("%s = %s accepted, want it refused", bn.field, bn.value)
					continue
				}
				want := bn.want
				// pelletier returns UnmarshalText's error for a float
				// without its key; everywhere else the key is known.
				if dc.name == "BurntSushi" || !strings.Contains(bn.value, ".") {
					want = append(want[:len(want):len(want)], bn.field)
				}
				for _, w := range want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s = %s: error %q does not say %s", bn.field, bn.value, err, w)
					}
				}
			}
			if err := decodeThenNew(t, dc.decode, "ttl = 0\ntarget_timeout = \"30s\"\n"); err != nil {
				t.Errorf("ttl = 0 (the default): %v", err)
			}
		})
	}
}

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
