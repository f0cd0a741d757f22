package batch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// Envelope returns the stored and wire form of r: one JSON object with
// "content" first, then the keys of Meta in sorted order (a "content" key in
// Meta is overwritten by Content). Strings are escaped as JSON requires and
// no more: "<", ">" and "&" are kept as they are, so fetched HTML does not
// grow by escaping. It is the runner's per-target cost, so it encodes the
// content itself, in one allocation.
func (r Result) Envelope() ([]byte, error) {
	var meta []byte
	if len(r.Meta) > 0 {
		m := make(map[string]any, len(r.Meta))
		for k, v := range r.Meta {
			if k != "content" {
				m[k] = v
			}
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(m); err != nil {
			return nil, fmt.Errorf("encode result envelope: %w", err)
		}
		meta = bytes.TrimSpace(buf.Bytes()) // {…}
	}
	// Room for the escapes of a page with a line end every 16 bytes.
	b := make([]byte, 0, len(`{"content":""}`)+len(r.Content)+len(r.Content)/16+len(meta))
	b = append(b, `{"content":`...)
	b = appendJSONString(b, r.Content)
	if len(meta) > 2 {
		b = append(b, ',')
		b = append(b, meta[1:len(meta)-1]...)
	}
	return append(b, '}'), nil
}

// DecodeEnvelope is the inverse of [Result.Envelope]. A missing or non-string
// "content" reads as empty content, and the key stays in Meta.
func DecodeEnvelope(b []byte) (Result, error) {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return Result{}, fmt.Errorf("decode result envelope: %w", err)
	}
	var r Result
	if c, ok := m["content"].(string); ok {
		r.Content = c
		delete(m, "content")
	}
	if len(m) > 0 {
		r.Meta = m
	}
	return r, nil
}

// appendJSONString appends s as a JSON string, escaped as encoding/json
// escapes it with HTML escaping off: quote, backslash and control
// characters, invalid UTF-8 as U+FFFD, and U+2028 and U+2029 (which
// JavaScript treats as line ends). Plain runs are copied whole.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0 // s[start:i] is plain and not yet copied
	for i := 0; i < len(s); {
		c := s[i]
		if plainByte[c] {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			var esc string
			switch {
			case r == utf8.RuneError && size == 1:
				esc = `\ufffd`
			case r == '\u2028':
				esc = `\u2028`
			case r == '\u2029':
				esc = `\u2029`
			default:
				i += size
				continue
			}
			dst = append(append(dst, s[start:i]...), esc...)
			i += size
			start = i
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			const hex = "0123456789abcdef"
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// plainByte[c] reports that the byte c is copied as it is: printable ASCII
// other than quote and backslash.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()
