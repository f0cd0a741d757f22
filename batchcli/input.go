package batchcli

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
)

// maxInputBytes caps what submit reads: the server takes 256 KiB bodies.
const maxInputBytes = 1 << 20

// ParseTargets is [ParseSubmit]'s targets, for input that has no webhook;
// input with one is refused, since the targets alone would drop it.
func ParseTargets(r io.Reader, opts batch.OptionSet) ([]batch.Target, error) {
	req, err := ParseSubmit(r, opts)
	if err != nil {
		return nil, err
	}
	if req.Webhook != nil {
		return nil, errors.New("the input has a webhook: read it with ParseSubmit")
	}
	return req.Targets, nil
}

// ParseSubmit reads submit's input: a JSON object {"targets": […],
// "webhook"?: {"url": "…"}}, a JSON array of targets, or plain text with
// one URL per line (blank lines and lines starting with # are skipped).
//
// JSON input is read by [batchhttp.DecodeSubmitRequest], the server's own
// decoder of a submit body, so that what the CLI sends is what the file
// says and it refuses what the server would:
//
//   - field names match exactly: "URL" is not "url" (encoding/json would
//     fold the case and take it);
//   - an unknown field, a field given twice, and a value of the wrong type
//     (url and string options take a string, boolean options a boolean;
//     opts are the server's target options) are errors; null counts as
//     absent;
//   - a target must be an object, and "targets" a non-empty list;
//   - anything after the JSON value but white space is an error.
//
// Input of any form must be valid UTF-8. The CLI does not check the values
// themselves (an empty url, a value an option does not take): the server does, and answers
// 400.
func ParseSubmit(r io.Reader, opts batch.OptionSet) (batchhttp.SubmitRequest, error) {
	var none batchhttp.SubmitRequest
	data, err := io.ReadAll(io.LimitReader(r, maxInputBytes+1))
	if err != nil {
		return none, fmt.Errorf("read targets: %w", err)
	}
	if len(data) > maxInputBytes {
		return none, fmt.Errorf("targets input is over %d bytes", maxInputBytes)
	}
	if !utf8.Valid(data) {
		return none, invalidTargets("input is not valid UTF-8")
	}
	trimmed := bytes.TrimSpace(data)
	switch {
	case len(trimmed) == 0:
		return none, errors.New("no targets in input")
	case trimmed[0] == '{' || trimmed[0] == '[':
		return batchhttp.DecodeSubmitRequest(data, opts)
	}
	ts, err := parseLines(trimmed)
	return batchhttp.SubmitRequest{Targets: ts}, err
}

// parseLines reads one URL per line.
func parseLines(trimmed []byte) ([]batch.Target, error) {
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
	if len(ts) == 0 {
		return nil, errors.New("no targets in input")
	}
	return ts, nil
}

func invalidTargets(format string, args ...any) error {
	return fmt.Errorf("invalid targets: "+format, args...)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
