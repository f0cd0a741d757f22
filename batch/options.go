package batch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// OptionType is the JSON type of a target option.
type OptionType int

// Option types.
const (
	// OptionString is a JSON string; absent means "".
	OptionString OptionType = iota + 1
	// OptionBool is a JSON boolean; absent means false.
	OptionBool
	// OptionOptionalBool is a JSON boolean whose absence differs from false.
	OptionOptionalBool
)

// OptionField is one per-target option, a field beside "url".
type OptionField struct {
	Name string
	Type OptionType
	// Enum lists the values a string option takes; nil takes any string.
	// List "" to accept an absent or empty value.
	Enum []string
	// Description is the field's description in the JSON Schema.
	Description string
}

// OptionSet is the per-target options a host accepts. The runner checks
// each target's options against it at submit, stores them in one form and
// hands them to the [FetchFunc] unchanged; it never interprets them. The
// zero value accepts no options: a target is a URL alone.
//
// The HTTP adapter decodes the options as flat fields beside "url", names
// them in its error messages and describes them in its OpenAPI document.
type OptionSet struct {
	Fields []OptionField
}

// Field returns the option named name.
func (s OptionSet) Field(name string) (OptionField, bool) {
	for _, f := range s.Fields {
		if f.Name == name {
			return f, true
		}
	}
	return OptionField{}, false
}

// Names returns the option names in their declared order.
func (s OptionSet) Names() []string {
	names := make([]string, len(s.Fields))
	for i, f := range s.Fields {
		names[i] = f.Name
	}
	return names
}

// validate checks the set itself: names unique, not "url", types known.
func (s OptionSet) validate() error {
	seen := map[string]bool{"url": true}
	for _, f := range s.Fields {
		switch {
		case f.Name == "":
			return fmt.Errorf("an option has no name")
		case seen[f.Name]:
			return fmt.Errorf("option %q is declared twice (or is \"url\")", f.Name)
		case f.Type < OptionString || f.Type > OptionOptionalBool:
			return fmt.Errorf("option %q has no type", f.Name)
		case f.Enum != nil && f.Type != OptionString:
			return fmt.Errorf("option %q: only a string option takes an Enum", f.Name)
		}
		seen[f.Name] = true
	}
	return nil
}

// Normalize checks options, a JSON object of option fields (nil or {} for
// none), and returns their stored form: the fields in declared order, no
// white space, absent and zero values left out (an OptionOptionalBool
// that is present is kept). null counts as absent. Its errors name the
// field, without a target index.
func (s OptionSet) Normalize(options json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(options)) == 0 {
		return nil, nil
	}
	if !utf8.Valid(options) {
		return nil, fmt.Errorf("invalid UTF-8")
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(options, &raw); err != nil {
		return nil, fmt.Errorf("options must be a JSON object")
	}
	values := make(map[string]any, len(raw))
	for k, v := range raw {
		f, ok := s.Field(k)
		if !ok {
			return nil, fmt.Errorf("unknown field %s%s", strconv.Quote(k), didYouMean(k, append([]string{"url"}, s.Names()...)...))
		}
		if bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			continue
		}
		val, err := f.decode(v)
		if err != nil {
			return nil, err
		}
		values[k] = val
	}
	return s.Encode(values)
}

// decode reads one value of f.
func (f OptionField) decode(v json.RawMessage) (any, error) {
	switch f.Type {
	case OptionString:
		var str string
		if err := json.Unmarshal(v, &str); err != nil {
			return nil, fmt.Errorf("%q must be a string", f.Name)
		}
		return str, nil
	default:
		var b bool
		if err := json.Unmarshal(v, &b); err != nil {
			return nil, fmt.Errorf("%q must be a boolean", f.Name)
		}
		return b, nil
	}
}

// Encode returns the stored form of values, decoded option values by name
// (a string for OptionString, a bool otherwise; an absent name is
// absent). It checks each value against its field: type, Enum and valid
// UTF-8. It returns nil when no field is set.
func (s OptionSet) Encode(values map[string]any) (json.RawMessage, error) {
	var buf bytes.Buffer
	n := 0
	for _, f := range s.Fields {
		v, ok := values[f.Name]
		if !ok {
			continue
		}
		if err := f.check(v); err != nil {
			return nil, err
		}
		if f.Type != OptionOptionalBool && (v == "" || v == false) {
			continue
		}
		if n == 0 {
			buf.WriteByte('{')
		} else {
			buf.WriteByte(',')
		}
		n++
		buf.WriteString(strconv.Quote(f.Name))
		buf.WriteByte(':')
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		buf.Write(b)
	}
	for k := range values {
		if _, ok := s.Field(k); !ok {
			return nil, fmt.Errorf("unknown field %s", strconv.Quote(k))
		}
	}
	if n == 0 {
		return nil, nil
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// check checks one decoded value of f.
func (f OptionField) check(v any) error {
	switch v := v.(type) {
	case string:
		if f.Type != OptionString {
			return fmt.Errorf("%q must be a boolean", f.Name)
		}
		if !utf8.ValidString(v) {
			return fmt.Errorf("invalid UTF-8")
		}
		if f.Enum != nil && !contains(f.Enum, v) && v != "" {
			return fmt.Errorf("unknown %s %q", f.Name, truncate(v, 32))
		}
	case bool:
		if f.Type == OptionString {
			return fmt.Errorf("%q must be a string", f.Name)
		}
	default:
		return fmt.Errorf("%q has a value of type %T", f.Name, v)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// canonical appends the canonical form of one target to b for the
// idempotency key: {"url": …} followed by every declared field in order,
// absent ones as "", false or null.
func (s OptionSet) canonical(b []byte, t Target) []byte {
	var values map[string]any
	if len(t.Options) > 0 {
		_ = json.Unmarshal(t.Options, &values) // stored form: checked at submit
	}
	u, _ := json.Marshal(t.URL)
	b = append(append(b, `{"url":`...), u...)
	for _, f := range s.Fields {
		v, ok := values[f.Name]
		if !ok {
			switch f.Type {
			case OptionString:
				v = ""
			case OptionBool:
				v = false
			}
		}
		enc, _ := json.Marshal(v)
		b = append(b, ',')
		b = append(b, strconv.Quote(f.Name)...)
		b = append(b, ':')
		b = append(b, enc...)
	}
	return append(b, '}')
}

// Schema returns the JSON Schema of one target: an object with "url" (a
// required string) and the options, no other properties.
func (s OptionSet) Schema() map[string]any {
	props := map[string]any{
		"url": map[string]any{"type": "string", "minLength": 1, "description": "The URL to fetch."},
	}
	for _, f := range s.Fields {
		p := map[string]any{}
		switch f.Type {
		case OptionString:
			p["type"] = "string"
			if f.Enum != nil {
				p["enum"] = f.Enum
			}
		default:
			p["type"] = "boolean"
		}
		if f.Description != "" {
			p["description"] = f.Description
		}
		props[f.Name] = p
	}
	return map[string]any{
		"type":                 "object",
		"required":             []string{"url"},
		"properties":           props,
		"additionalProperties": false,
	}
}

// didYouMean returns a hint for an unknown field k that differs from one
// of names only in case, or "".
func didYouMean(k string, names ...string) string {
	for _, f := range names {
		if strings.EqualFold(k, f) {
			return fmt.Sprintf(" (field names are case-sensitive: did you mean %q?)", f)
		}
	}
	return ""
}

// Options returns the per-target options the runner accepts
// (Config.Options).
func (r *Runner) Options() OptionSet { return r.cfg.Options }
