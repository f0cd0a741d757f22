package batchcli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/siftfetch/batchkit/batch"
)

// maxInputBytes caps what submit reads: the server takes 256 KiB bodies.
const maxInputBytes = 1 << 20

// ParseTargets reads submit's input: a JSON object {"targets": […]}, a JSON
// array of targets, or plain text with one URL per line (blank lines and
// lines starting with # are skipped). JSON input is decoded strictly: an
// unknown field or trailing data is an error.
func ParseTargets(r io.Reader) ([]batch.Target, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxInputBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read targets: %w", err)
	}
	if len(data) > maxInputBytes {
		return nil, fmt.Errorf("targets input is over %d bytes", maxInputBytes)
	}
	trimmed := bytes.TrimSpace(data)
	switch {
	case len(trimmed) == 0:
		return nil, errors.New("no targets in input")
	case trimmed[0] == '{':
		var req struct {
			Targets []batch.Target `json:"targets"`
		}
		if err := decodeStrict(trimmed, &req); err != nil {
			return nil, err
		}
		return nonEmpty(req.Targets)
	case trimmed[0] == '[':
		var ts []batch.Target
		if err := decodeStrict(trimmed, &ts); err != nil {
			return nil, err
		}
		return nonEmpty(ts)
	}
	var ts []batch.Target
	sc := bufio.NewScanner(bytes.NewReader(trimmed))
	sc.Buffer(make([]byte, 64<<10), maxInputBytes)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.ContainsAny(line, " \t") {
			return nil, fmt.Errorf("line %q is not a single URL", truncate(line, 60))
		}
		ts = append(ts, batch.Target{URL: line})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read targets: %w", err)
	}
	return nonEmpty(ts)
}

func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid targets JSON: %w", err)
	}
	if dec.More() {
		return errors.New("invalid targets JSON: trailing data after the value")
	}
	return nil
}

func nonEmpty(ts []batch.Target) ([]batch.Target, error) {
	if len(ts) == 0 {
		return nil, errors.New("no targets in input")
	}
	return ts, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
