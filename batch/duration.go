package batch

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Duration is a [time.Duration] that configuration files write as a string,
// such as "12h" or "90s" (the syntax of [time.ParseDuration]). It is the
// type of every duration in [Config], so that a [batch] block decodes the
// same with encoding/json, github.com/BurntSushi/toml and
// github.com/pelletier/go-toml/v2 (which does not read time.Duration from a
// string): it implements [encoding.TextUnmarshaler] and
// [encoding.TextMarshaler]. From JSON it also accepts an integer number of
// nanoseconds, as earlier releases did. It is a [flag.Value] too.
//
// In Go code, convert: Config{TTL: batch.Duration(12 * time.Hour)}.
type Duration time.Duration

// String returns the duration as [time.Duration.String] writes it.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText writes the duration as [Duration.String] does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText parses a duration string such as "12h".
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("duration %q: want a string such as \"90s\" or \"12h\"", b)
	}
	*d = Duration(v)
	return nil
}

// UnmarshalJSON reads a JSON string as [Duration.UnmarshalText] does, or
// an integer number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		return d.UnmarshalText([]byte(s))
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return errors.New("duration must be a string such as \"90s\" or integer nanoseconds")
	}
	*d = Duration(n)
	return nil
}

// Set parses a duration string; with [Duration.String] it makes a
// *Duration a [flag.Value].
func (d *Duration) Set(s string) error { return d.UnmarshalText([]byte(s)) }
