package batch_test

import (
	"strings"
	"testing"

	burntsushi "github.com/BurntSushi/toml"
	pelletier "github.com/pelletier/go-toml/v2"

	"github.com/siftfetch/batchkit/batch"
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
