package batchcli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// print writes v as indented JSON to Stdout, with <, > and & as they are:
// a person reads HTML in a result more easily than \u003cp\u003e, and a
// program decodes both the same.
func (c *CLI) print(v any) error { return c.write(v, "  ") }

// printLine writes v as one line of JSON to Stdout (NDJSON), with <, > and
// & as they are.
func (c *CLI) printLine(v any) error { return c.write(v, "") }

func (c *CLI) write(v any, indent string) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", indent)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := c.cfg.Stdout.Write(escapeControls(unescapeHTML(buf.Bytes())))
	return err
}

// unsafeRune reports whether a terminal may act on r rather than show it:
// a control character (C0, DEL, C1: escape sequences, bells, CSI) or a
// bidirectional formatting character (which reorders what follows it).
func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r)
}

// printable returns server text for a line on the terminal: each unsafe
// rune (see unsafeRune), newlines too, written as its Go escape (\x1b,
// \u202e), so that a server cannot move the cursor, retitle the window or
// disguise what it says.
func printable(s string) string {
	if !strings.ContainsFunc(s, unsafeRune) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unsafeRune(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// escapeControls rewrites, in JSON text, each unsafe rune that the encoder
// leaves raw (DEL, the C1 controls and the bidirectional formatting
// characters: JSON escapes only C0) as a \u escape. Such a rune can only
// be inside a string, where the escape decodes to the same value.
func escapeControls(b []byte) []byte {
	if !bytes.ContainsFunc(b, func(r rune) bool { return r >= 0x7f && unsafeRune(r) }) {
		return b
	}
	out := make([]byte, 0, len(b)+32)
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r >= 0x7f && unsafeRune(r) {
			out = fmt.Appendf(out, `\u%04x`, r)
		} else {
			out = append(out, b[:n]...)
		}
		b = b[n:]
	}
	return out
}

// unescapeHTML rewrites the escapes \u003c, \u003e and \u0026 in JSON text
// as the characters <, > and &. SetEscapeHTML(false) only governs the
// characters the encoder writes itself: a raw value, such as a result
// envelope the server stored as a host's encoding/json wrote it, keeps its
// escapes. In valid JSON a backslash occurs only inside a string, so a scan
// of escapes two bytes at a time is exact: "\\u003c" (a backslash, then
// the text u003c) stays as it is.
func unescapeHTML(b []byte) []byte {
	if !bytes.Contains(b, []byte(`\u00`)) {
		return b
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 == len(b) {
			out = append(out, b[i])
			continue
		}
		if b[i+1] == 'u' && i+6 <= len(b) {
			if c, ok := htmlEscapes[string(bytes.ToLower(b[i+2:i+6]))]; ok {
				out = append(out, c)
				i += 5
				continue
			}
		}
		out = append(out, b[i], b[i+1])
		i++
	}
	return out
}

var htmlEscapes = map[string]byte{"003c": '<', "003e": '>', "0026": '&'}
