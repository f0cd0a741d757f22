package batchhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/siftfetch/batchkit/batch"
)

// MaxBodyBytes caps the body of a submit: 256 KiB, enough for 32 targets
// with long questions. A larger body is refused with 413, from its
// Content-Length when it has one, before any of it is read.
const MaxBodyBytes = 256 << 10

var errTooLarge = &httpError{
	status: http.StatusRequestEntityTooLarge, msg: "body too large (max 256 KiB)",
	hint: "split the targets over several batches", code: CodeBodyTooLarge,
}

// errBodyTimeout: the client did not send its body in time.
var errBodyTimeout = &httpError{
	status: http.StatusRequestTimeout, msg: "body not received in time", code: CodeTimeout,
}

// readBody reads a submit body of at most [MaxBodyBytes] within timeout. w
// must be the server's own ResponseWriter, so that an oversized body
// closes the connection and the read deadline reaches the connection. A
// client that sends its headers and then stalls is answered 408 at the
// deadline, and its connection closed.
func readBody(w http.ResponseWriter, r *http.Request, timeout time.Duration) ([]byte, error) {
	if r.ContentLength > MaxBodyBytes {
		w.Header().Set("Connection", "close")
		return nil, errTooLarge
	}
	rc := http.NewResponseController(w)
	deadline := rc.SetReadDeadline(time.Now().Add(timeout)) == nil // nil: a server that supports it
	// A body of a known length is read into one buffer of that size (a
	// caller has a few submits in flight at most: MaxSubmitsPerCaller);
	// io.ReadAll would allocate twice the body or more as it grows.
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	b := buf.Bytes()
	if deadline && err == nil {
		// Lifted only after a whole body: after a failed read, net/http
		// discards the rest of the body before it closes the connection,
		// and with no deadline that wait would never end.
		_ = rc.SetReadDeadline(time.Time{})
	}
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		w.Header().Set("Connection", "close")
		return nil, errTooLarge
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		w.Header().Set("Connection", "close")
		return nil, errBodyTimeout
	}
	if err != nil {
		return nil, invalidBatch("body could not be read")
	}
	return b, nil
}

// decodeSubmit decodes a submit body, {"targets": [{…}, …], "webhook"?:
// {"url": "…"}, "deadline"?, "metadata"?, "on_invalid"?}, strictly. It
// refuses, as 400 "invalid batch: …":
//
//   - invalid UTF-8, malformed JSON (named by line and column), and
//     anything after the object but white space;
//   - a body that is not an object, "targets" missing, null, not a list or
//     empty, and a target that is not an object;
//   - unknown fields, and keys that differ from the field names only in case
//     ("URL" is not "url"; the message says which was meant): keys are
//     matched exactly;
//   - duplicate keys, in the body or in a target (encoding/json would keep the
//     last one silently);
//   - a value of the wrong type: "url" and string options take a string,
//     boolean options a boolean. null counts as absent for every target
//     field, as it does in encoding/json;
//   - a "webhook" that is not an object with exactly a non-empty string
//     "url" (null counts as absent);
//   - an "on_invalid" other than "reject" or "skip" (null counts as
//     absent). It covers what the checks after decoding refuse; a body
//     that does not decode is refused whatever it says.
//
// It walks the tokens itself rather than decoding into a struct, which is
// how it sees duplicate and case-variant keys, and why its messages name the
// target and the field instead of Go types. Whatever it accepts decodes to
// the same targets with encoding/json and DisallowUnknownFields (the fuzz
// test checks this).
//
// A list longer than maxTargets (when it is above 0) is refused with the
// 422 of [CodeTooManyTargets] as soon as target maxTargets+1 begins,
// whatever follows: the targets after the cap are neither decoded nor
// kept, so that a body of many small targets costs little more than its
// size.
func decodeSubmit(body []byte, opts batch.OptionSet, maxTargets int) (SubmitRequest, error) {
	return decodeRequest(body, opts, maxTargets, false, func(format string, args ...any) error { return invalidBatch(format, args...) })
}

// DecodeSubmitRequest decodes a submit by the rules and with the messages
// of the submit decoder of [Handler] (docs/http-api.md in the repository
// lists them), from
// the body of a submit, {"targets": […], "webhook"?: {…}}, or from a bare
// list of targets, […]. A client or a CLI checks its input with it before
// it sends any, so that it refuses exactly what the server would. Errors
// read "invalid targets: …". opts are the runner's target options (see
// [batch.OptionSet]). It decodes every target, however many: it does not
// know the server's cap on targets per job, which the server checks.
func DecodeSubmitRequest(data []byte, opts batch.OptionSet) (SubmitRequest, error) {
	return decodeRequest(data, opts, 0, true, func(format string, args ...any) error {
		return fmt.Errorf("invalid targets: "+format, args...)
	})
}

// decodeRequest is the one decoder of submits: list allows a bare list of
// targets, fail makes the errors, and maxTargets, when above 0, caps the
// targets (see decodeSubmit).
func decodeRequest(data []byte, opts batch.OptionSet, maxTargets int, list bool, fail func(format string, args ...any) error) (SubmitRequest, error) {
	if !utf8.Valid(data) {
		return SubmitRequest{}, fail("body is not valid UTF-8")
	}
	d := submitDecoder{opts: opts, max: maxTargets, dec: json.NewDecoder(bytes.NewReader(data)), data: data, fail: fail}
	d.dec.UseNumber()
	return d.body(list)
}

type submitDecoder struct {
	opts batch.OptionSet
	max  int // targets per list; 0: no cap
	dec  *json.Decoder
	data []byte
	fail func(format string, args ...any) error
}

func (d *submitDecoder) body(list bool) (SubmitRequest, error) {
	var req SubmitRequest
	tok, err := d.dec.Token()
	if err == io.EOF {
		return req, d.fail("empty body")
	}
	if err != nil {
		return req, d.syntaxErr(err)
	}
	switch {
	case list && tok == json.Delim('['):
		if req.Targets, err = d.list(); err != nil {
			return req, err
		}
	case tok == json.Delim('{'):
		if req, err = d.object(); err != nil {
			return req, err
		}
	case list:
		return req, d.fail(`input must be a JSON object {"targets": […]} or a list of targets`)
	default:
		return req, d.fail("body must be a JSON object")
	}
	if _, err := d.dec.Token(); err != io.EOF {
		return req, d.fail("data after the JSON value")
	}
	if len(req.Targets) == 0 {
		return req, d.fail("no targets")
	}
	return req, nil
}

// object reads the rest of {"targets": […], "webhook"?: {…}, …} after its
// opening brace.
func (d *submitDecoder) object() (SubmitRequest, error) {
	var req SubmitRequest
	seen := map[string]bool{}
	for d.dec.More() {
		key, err := d.token()
		if err != nil {
			return req, err
		}
		k := key.(string)
		if !slices.Contains(submitFields, k) {
			return req, d.fail("unknown field %s%s", quoteField(k), didYouMean(k, submitFields...))
		}
		if seen[k] {
			return req, d.fail("duplicate field %q", k)
		}
		seen[k] = true
		switch k {
		case "webhook":
			req.Webhook, err = d.webhook()
		case "deadline":
			req.Deadline, err = d.deadline()
		case "metadata":
			req.Metadata, err = d.metadata()
		case "targets":
			req.Targets, err = d.targets()
		case "on_invalid":
			req.OnInvalid, err = d.onInvalid()
		}
		if err != nil {
			return req, err
		}
	}
	if _, err := d.token(); err != nil { // the closing brace
		return req, err
	}
	switch {
	case !seen["targets"]:
		return req, d.fail(`missing field "targets"`)
	case req.Targets == nil:
		return req, d.fail(`"targets" must be a list, not null`)
	}
	return req, nil
}

// submitFields are the fields of a submit's body.
var submitFields = []string{"targets", "webhook", "deadline", "metadata", "on_invalid"}

// onInvalid reads the value of "on_invalid": "" for null, else "reject"
// or "skip".
func (d *submitDecoder) onInvalid() (batch.OnInvalid, error) {
	v, err := d.token()
	if err != nil {
		return "", err
	}
	switch v {
	case nil:
		return "", nil
	case string(batch.OnInvalidReject), string(batch.OnInvalidSkip):
		return batch.OnInvalid(v.(string)), nil
	}
	return "", d.fail(`"on_invalid" must be "reject" or "skip"`)
}

// metadata reads the value of "metadata": nil for null, else an object of
// strings. Its bounds are the runner's (see [batch.SubmitOptions]); the
// messages never repeat a key or a value.
func (d *submitDecoder) metadata() (map[string]string, error) {
	if null, err := d.open('{', `"metadata" must be an object of strings`); null || err != nil {
		return nil, err
	}
	m := map[string]string{}
	for d.dec.More() {
		key, err := d.token()
		if err != nil {
			return nil, err
		}
		k := key.(string)
		if _, dup := m[k]; dup {
			return nil, d.fail("metadata: a key given twice")
		}
		v, err := d.token()
		if err != nil {
			return nil, err
		}
		s, ok := v.(string)
		if !ok {
			return nil, d.fail("metadata: values must be strings")
		}
		m[k] = s
		if len(m) > batch.MaxMetadataPairs {
			return nil, d.fail("metadata: more than %d pairs", batch.MaxMetadataPairs)
		}
	}
	if _, err := d.token(); err != nil { // the closing brace
		return nil, err
	}
	return m, nil
}

// webhookFields are the fields of a submit's "webhook".
var webhookFields = []string{"url", "events"}

// webhook reads the value of "webhook": nil for null, else {"url": "…",
// "events"?: ["…"]} with a non-empty url and, if given, a non-empty list
// of strings (the runner knows the event types).
func (d *submitDecoder) webhook() (*Webhook, error) {
	if null, err := d.open('{', `"webhook" must be an object`); null || err != nil {
		return nil, err
	}
	var w Webhook
	seen := map[string]bool{}
	for d.dec.More() {
		key, err := d.token()
		if err != nil {
			return nil, err
		}
		k := key.(string)
		switch {
		case !slices.Contains(webhookFields, k):
			return nil, d.fail("webhook: unknown field %s%s", quoteField(k), didYouMean(k, webhookFields...))
		case seen[k]:
			return nil, d.fail("webhook: duplicate field %q", k)
		}
		seen[k] = true
		if k == "events" {
			if w.Events, err = d.webhookEvents(); err != nil {
				return nil, err
			}
			continue
		}
		v, err := d.token()
		if err != nil {
			return nil, err
		}
		switch v := v.(type) {
		case nil:
		case string:
			w.URL = v
		default:
			return nil, d.fail(`webhook: "url" must be a string`)
		}
	}
	if _, err := d.token(); err != nil { // the closing brace
		return nil, err
	}
	if w.URL == "" {
		return nil, d.fail("webhook: empty url")
	}
	return &w, nil
}

// maxWebhookEvents bounds the list of a webhook's events: there are two
// types, and a list may name one twice.
const maxWebhookEvents = 8

// webhookEvents reads the value of a webhook's "events": nil for null,
// else a non-empty list of strings.
func (d *submitDecoder) webhookEvents() ([]string, error) {
	if null, err := d.open('[', `webhook: "events" must be a list of event types`); null || err != nil {
		return nil, err
	}
	events := []string{}
	for d.dec.More() {
		v, err := d.token()
		if err != nil {
			return nil, err
		}
		s, ok := v.(string)
		if !ok {
			return nil, d.fail(`webhook: "events" must be a list of event types`)
		}
		if events = append(events, s); len(events) > maxWebhookEvents {
			return nil, d.fail(`webhook: more than %d "events"`, maxWebhookEvents)
		}
	}
	if _, err := d.token(); err != nil { // the closing bracket
		return nil, err
	}
	if len(events) == 0 {
		return nil, d.fail(`webhook: "events" is empty`)
	}
	return events, nil
}

// deadline reads the value of "deadline": "" for null, else a string that
// [ParseDeadline] takes.
func (d *submitDecoder) deadline() (string, error) {
	v, err := d.token()
	if err != nil {
		return "", err
	}
	switch v := v.(type) {
	case nil:
		return "", nil
	case string:
		if _, _, err := ParseDeadline(v); err != nil {
			return "", d.fail("%v", err)
		}
		return v, nil
	default:
		return "", d.fail(`"deadline" must be a string: %s`, deadlineRule)
	}
}

// deadlineRule says what a deadline may be, for the messages that refuse
// one.
const deadlineRule = `an RFC 3339 time such as "2026-01-02T15:04:05Z" or a positive duration such as "90s"`

// ParseDeadline reads a submit's deadline (see [SubmitRequest]) by one
// rule: a string that parses as an RFC 3339 time (time.RFC3339Nano, with
// a zone) is that time; any other must parse as a Go duration
// (time.ParseDuration: "90s", "1h30m", "250ms") and be positive, and is
// that long after the submit, by the server's clock. Anything else, an
// ISO 8601 duration ("PT90S") or a bare number included, is an error that
// names the field. The server checks the time against its cap.
func ParseDeadline(s string) (at time.Time, in time.Duration, err error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, 0, fmt.Errorf(`"deadline" must be %s, got %q`, deadlineRule, s)
	}
	return time.Time{}, d, nil
}

// deadlineOptions sets the deadline of req in opts.
func (req SubmitRequest) deadlineOptions(opts *batch.SubmitOptions) error {
	if req.Deadline == "" {
		return nil
	}
	at, in, err := ParseDeadline(req.Deadline)
	if err != nil {
		return invalidBatch("%v", err)
	}
	opts.Deadline, opts.DeadlineIn = at, in
	return nil
}

// targets reads the value of "targets": nil for null, else a non-nil list.
func (d *submitDecoder) targets() ([]batch.Target, error) {
	tok, err := d.token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case nil:
		return nil, nil
	case json.Delim('['):
	default:
		return nil, d.fail(`"targets" must be a list`)
	}
	return d.list()
}

// list reads the targets of a list after its opening bracket, and refuses
// the list as target d.max+1 begins.
func (d *submitDecoder) list() ([]batch.Target, error) {
	targets := []batch.Target{}
	for i := 0; d.dec.More(); i++ {
		if d.max > 0 && i == d.max {
			return nil, tooManyTargetsError(d.max)
		}
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

// target reads target i: "url" and the option fields of d.opts.
func (d *submitDecoder) target(i int) (batch.Target, error) {
	var t batch.Target
	tok, err := d.token()
	if err != nil {
		return t, err
	}
	if tok != json.Delim('{') {
		return t, d.fail(`target %d must be an object, such as {"url": "https://example.com/"}`, i)
	}
	seen := make(map[string]bool, 8)
	var values map[string]any
	for d.dec.More() {
		key, err := d.token()
		if err != nil {
			return t, err
		}
		k := key.(string)
		if seen[k] {
			return t, d.fail("target %d: duplicate field %s", i, quoteField(k))
		}
		seen[k] = true
		str := true // the value is a string (else a boolean)
		if k != "url" && k != "custom_id" {
			f, ok := d.opts.Field(k)
			if !ok {
				return t, d.fail("target %d: unknown field %s%s", i, quoteField(k), didYouMean(k, append([]string{"url", "custom_id"}, d.opts.Names()...)...))
			}
			str = f.Type == batch.OptionString
		}
		v, err := d.token()
		if err != nil {
			return t, err
		}
		switch v.(type) {
		case nil:
			continue // absent, as encoding/json has it
		case string:
			if !str {
				return t, d.fail("target %d: %q must be a boolean", i, k)
			}
		case bool:
			if str {
				return t, d.fail("target %d: %q must be a string", i, k)
			}
		default:
			if str {
				return t, d.fail("target %d: %q must be a string", i, k)
			}
			return t, d.fail("target %d: %q must be a boolean", i, k)
		}
		if k == "url" {
			t.URL = v.(string)
			continue
		}
		if k == "custom_id" {
			t.CustomID = v.(string)
			continue
		}
		if values == nil {
			values = make(map[string]any, 8)
		}
		values[k] = v
	}
	if _, err := d.token(); err != nil { // the closing brace
		return t, err
	}
	if values != nil {
		if t.Options, err = d.opts.Encode(values); err != nil {
			// Types are checked above; what is left (an unknown enum
			// value, invalid UTF-8) the runner refuses as it always has.
			t.Options = rawOptions(d.opts, values)
		}
	}
	return t, nil
}

// rawOptions encodes values in declared order without checking them, for
// the runner to refuse with its own message.
func rawOptions(set batch.OptionSet, values map[string]any) json.RawMessage {
	var b []byte
	for _, name := range set.Names() {
		v, ok := values[name]
		if !ok {
			continue
		}
		if b == nil {
			b = []byte{'{'}
		} else {
			b = append(b, ',')
		}
		k, _ := json.Marshal(name)
		enc, _ := json.Marshal(v)
		b = append(append(append(b, k...), ':'), enc...)
	}
	return append(b, '}')
}

// open reads the first token of a value that may be null: null reports
// it was null; a token other than delim is refused with msg.
func (d *submitDecoder) open(delim json.Delim, msg string) (null bool, err error) {
	tok, err := d.token()
	switch {
	case err != nil:
		return false, err
	case tok == nil:
		return true, nil
	case tok != delim:
		return false, d.fail("%s", msg)
	}
	return false, nil
}

// token reads the next token, turning the end of input and syntax errors
// into refusals.
func (d *submitDecoder) token() (json.Token, error) {
	tok, err := d.dec.Token()
	if err != nil {
		return nil, d.syntaxErr(err)
	}
	return tok, nil
}

func (d *submitDecoder) syntaxErr(err error) error {
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		line, col := position(d.data, se.Offset)
		return d.fail("malformed JSON at line %d, column %d", line, col)
	}
	return d.fail("malformed JSON: unexpected end of input")
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

// quoteField quotes a client-supplied key for an error message, cut to 64
// bytes.
func quoteField(k string) string {
	if len(k) > 64 {
		k = k[:64]
		for !utf8.ValidString(k) {
			k = k[:len(k)-1]
		}
		return strconv.Quote(k) + "…"
	}
	return strconv.Quote(k)
}
