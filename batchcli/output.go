package batchcli

import (
	"bytes"
	"encoding/json"
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
	_, err := c.cfg.Stdout.Write(unescapeHTML(buf.Bytes()))
	return err
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
