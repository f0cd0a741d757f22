package batchcli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/siftfetch/batchkit/batch"
)

// maxInputBytes caps what submit reads: the server takes 256 KiB bodies.
const maxInputBytes = 1 << 20

// ParseTargets reads submit's input: a JSON object {"targets": […]}, a JSON
// array of targets, or plain text with one URL per line (blank lines and
// lines starting with # are skipped).
//
// JSON input is read as strictly as the server reads a submit body, so that
// what the CLI sends is what the file says:
//
//   - field names match exactly: "URL" is not "url" (encoding/json would
//     fold the case and take it);
//   - an unknown field, a field given twice, and a value of the wrong type
//     (url and the option fields take a string, context and recover a
//     boolean) are errors; null counts as absent;
//   - a target must be an object, and "targets" a non-empty list;
//   - anything after the JSON value but white space is an error.
//
// Input of any form must be valid UTF-8. The CLI does not check the values
// themselves (an empty url, an unknown mode): the server does, and answers
// 400.
func ParseTargets(r io.Reader) ([]batch.Target, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxInputBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read targets: %w", err)
	}
	if len(data) > maxInputBytes {
		return nil, fmt.Errorf("targets input is over %d bytes", maxInputBytes)
	}
	if !utf8.Valid(data) {
		return nil, invalidTargets("input is not valid UTF-8")
	}
	trimmed := bytes.TrimSpace(data)
	switch {
	case len(trimmed) == 0:
		return nil, errors.New("no targets in input")
	case trimmed[0] == '{' || trimmed[0] == '[':
		return decodeTargets(data)
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
	if len(ts) == 0 {
		return nil, errors.New("no targets in input")
	}
	return ts, nil
}

func invalidTargets(format string, args ...any) error {
	return fmt.Errorf("invalid targets: "+format, args...)
}

// targetFields are the field names of a target, as the server reads them.
var targetFields = []string{"url", "mode", "question", "pages", "grep", "jq", "context", "recover"}

// decodeTargets decodes JSON input, an object {"targets": […]} or a list of
// targets, token by token, the way batchhttp's submit decoder does: that is
// how it sees case-variant and duplicate keys, which encoding/json takes
// silently.
func decodeTargets(data []byte) ([]batch.Target, error) {
	d := targetDecoder{dec: json.NewDecoder(bytes.NewReader(data)), data: data}
	d.dec.UseNumber()
	tok, err := d.token()
	if err != nil {
		return nil, err
	}
	var targets []batch.Target
	if tok == json.Delim('[') {
		targets, err = d.list()
	} else {
		targets, err = d.object()
	}
	if err != nil {
		return nil, err
	}
	if _, err := d.dec.Token(); err != io.EOF {
		return nil, invalidTargets("data after the JSON value")
	}
	if len(targets) == 0 {
		return nil, errors.New("no targets in input")
	}
	return targets, nil
}

type targetDecoder struct {
	dec  *json.Decoder
	data []byte
}

// object reads {"targets": […]} after its opening brace.
func (d *targetDecoder) object() ([]batch.Target, error) {
	var (
		targets []batch.Target
		seen    bool
	)
	for d.dec.More() {
		key, err := d.token()
		if err != nil {
			return nil, err
		}
		switch k := key.(string); {
		case k != "targets":
			return nil, invalidTargets("unknown field %s%s", quoteField(k), didYouMean(k, "targets"))
		case seen:
			return nil, invalidTargets(`duplicate field "targets"`)
		}
		seen = true
		tok, err := d.token()
		if err != nil {
			return nil, err
		}
		switch tok {
		case nil:
			return nil, invalidTargets(`"targets" must be a list, not null`)
		case json.Delim('['):
		default:
			return nil, invalidTargets(`"targets" must be a list`)
		}
		if targets, err = d.list(); err != nil {
			return nil, err
		}
	}
	if _, err := d.token(); err != nil { // the closing brace
		return nil, err
	}
	if !seen {
		return nil, invalidTargets(`missing field "targets"`)
	}
	return targets, nil
}

// list reads the targets of a list after its opening bracket.
func (d *targetDecoder) list() ([]batch.Target, error) {
	targets := []batch.Target{}
	for i := 0; d.dec.More(); i++ {
		t, err := d.target(i)
		if err != nil {
			return nil, err
		}
		targets = append(targets, t)
	}
	if _, err := d.token(); err != nil { // the closing bracket
		return nil, err
	}
	return targets, nil
}

// target reads target i.
func (d *targetDecoder) target(i int) (batch.Target, error) {
	var t batch.Target
	tok, err := d.token()
	if err != nil {
		return t, err
	}
	if tok != json.Delim('{') {
		return t, invalidTargets(`target %d must be an object, such as {"url": "https://example.com/"}`, i)
	}
	seen := make(map[string]bool, len(targetFields))
	for d.dec.More() {
		key, err := d.token()
		if err != nil {
			return t, err
		}
		k := key.(string)
		if seen[k] {
			return t, invalidTargets("target %d: duplicate field %s", i, quoteField(k))
		}
		seen[k] = true
		var (
			s *string
			b *bool
		)
		switch k {
		case "url":
			s = &t.URL
		case "mode":
			s = &t.Mode
		case "question":
			s = &t.Question
		case "pages":
			s = &t.Pages
		case "grep":
			s = &t.Grep
		case "jq":
			s = &t.JQ
		case "recover":
			b = &t.Recover
		case "context":
			t.Context = new(bool)
			b = t.Context
		default:
			return t, invalidTargets("target %d: unknown field %s%s", i, quoteField(k), didYouMean(k, targetFields...))
		}
		v, err := d.token()
		if err != nil {
			return t, err
		}
		switch v := v.(type) {
		case nil:
			if k == "context" {
				t.Context = nil // absent, as encoding/json has it
			}
		case string:
			if s == nil {
				return t, invalidTargets("target %d: %q must be a boolean", i, k)
			}
			*s = v
		case bool:
			if b == nil {
				return t, invalidTargets("target %d: %q must be a string", i, k)
			}
			*b = v
		default:
			if s != nil {
				return t, invalidTargets("target %d: %q must be a string", i, k)
			}
			return t, invalidTargets("target %d: %q must be a boolean", i, k)
		}
	}
	_, err = d.token() // the closing brace
	return t, err
}

// token reads the next token, turning syntax errors and the end of input
// into errors that say where.
func (d *targetDecoder) token() (json.Token, error) {
	tok, err := d.dec.Token()
	if err == nil {
		return tok, nil
	}
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		line, col := position(d.data, se.Offset)
		return nil, invalidTargets("malformed JSON at line %d, column %d", line, col)
	}
	return nil, invalidTargets("malformed JSON: unexpected end of input")
}

// position turns a byte offset into a 1-based line and column (in runes).
func position(data []byte, offset int64) (line, col int) {
	before := data[:min(max(offset, 0), int64(len(data)))]
	line = 1 + bytes.Count(before, []byte("\n"))
	col = 1 + utf8.RuneCount(before[bytes.LastIndexByte(before, '\n')+1:])
	return line, col
}

// didYouMean names the field k differs from only in case, if any.
func didYouMean(k string, fields ...string) string {
	for _, f := range fields {
		if strings.EqualFold(k, f) {
			return fmt.Sprintf(" (field names are case-sensitive: did you mean %q?)", f)
		}
	}
	return ""
}

// quoteField quotes a key of the input for an error message, cut to 64
// bytes.
func quoteField(k string) string {
	if len(k) <= 64 {
		return strconv.Quote(k)
	}
	k = k[:64]
	for !utf8.ValidString(k) {
		k = k[:len(k)-1]
	}
	return strconv.Quote(k) + "…"
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
