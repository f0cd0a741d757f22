package batch

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Duration is a [time.Duration] that configuration files write as a string,
// such as "12h" or "90s" (the syntax of [time.ParseDuration]). It is the
// type of every duration in [Config], so that a [batch] block decodes the
// same with encoding/json, github.com/BurntSushi/toml and
// github.com/pelletier/go-toml/v2 (which does not read time.Duration from a
// string): it implements [encoding.TextUnmarshaler] and
// [encoding.TextMarshaler]. It is a [flag.Value] too.
//
// A bare number has no unit, so it is refused: ttl = 43200 is an error
// that says to write "12h". Only 0, the same in every unit, is read (as
// the default). A decoder that sets the number itself (pelletier/go-toml/v2
// does for an integer) leaves a duration under a millisecond, which [New]
// refuses with the same advice.
//
// In Go code, convert: Config{TTL: batch.Duration(12 * time.Hour)}.
type Duration time.Duration

// minDuration is the shortest duration a [Config] takes: anything shorter
// is a bare number that was read as nanoseconds.
const minDuration = Duration(time.Millisecond)

// String returns the duration as [time.Duration.String] writes it.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText writes the duration as [Duration.String] does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText parses a duration string such as "12h". A bare number
// other than 0 is refused.
func (d *Duration) UnmarshalText(b []byte) error {
	if n, err := strconv.ParseFloat(string(b), 64); err == nil {
		if n != 0 {
			return bareNumberError(n)
		}
		*d = 0
		return nil
	}
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("duration %q: want a string such as \"90s\" or \"12h\"", b)
	}
	*d = Duration(v)
	return nil
}

// UnmarshalJSON reads a JSON string as [Duration.UnmarshalText] does. A
// number is refused as a bare number, but for 0.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		return d.UnmarshalText([]byte(s))
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return errors.New("duration must be a string such as \"90s\" or \"12h\"")
	}
	return d.UnmarshalText([]byte(n))
}

// Set parses a duration string; with [Duration.String] it makes a
// *Duration a [flag.Value].
func (d *Duration) Set(s string) error { return d.UnmarshalText([]byte(s)) }

// bareNumberError refuses the number n for a duration, and suggests the
// string for n seconds: 43200 is not a duration; write … "12h".
func bareNumberError(n float64) error {
	const advice = "is not a duration; write a string with a unit, such as"
	num := strconv.FormatFloat(n, 'f', -1, 64)
	secs := n * float64(time.Second)
	if !(math.Abs(secs) < math.MaxInt64) { // also NaN
		return fmt.Errorf("%s %s \"90s\"", num, advice)
	}
	return fmt.Errorf("%s %s %q for %s seconds", num, advice, shortDuration(time.Duration(secs)), num)
}

// shortDuration writes d as [time.Duration.String] does, without zero
// minutes and seconds: "12h", not "12h0m0s".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
