package batchdriver

import "strings"

// TraceContext is a W3C Trace Context (www.w3.org/TR/trace-context): the
// values of the traceparent and tracestate headers, as opaque strings the
// core checks and stores but does not interpret. A job stores the one of
// the request that submitted it, so that its drain, on whichever node
// claims it and however much later, continues that trace.
type TraceContext struct {
	// Parent is a traceparent value: version, trace id, parent id and
	// flags in lowercase hex, joined by dashes.
	Parent string
	// State is a tracestate value, or "". It is kept only with a valid
	// Parent, and dropped if it is not valid itself.
	State string
}

// MaxTraceStateBytes is the longest tracestate a job stores: the length
// the W3C recommendation asks every vendor to propagate.
const MaxTraceStateBytes = 512

// Valid reports whether tc.Parent is a traceparent of version 00 (or of a
// later version, read as 00 is: its first 55 characters, which are what
// is kept) with a trace id and a parent id that are not all zeros.
func (tc TraceContext) Valid() bool {
	return validTraceParent(tc.Parent)
}

// Clean returns tc as a job stores it: the zero value for an invalid
// Parent, a later version cut to the fields of version 00, and State
// dropped unless it is valid.
func (tc TraceContext) Clean() TraceContext {
	if !validTraceParent(tc.Parent) {
		return TraceContext{}
	}
	tc.Parent = tc.Parent[:55]
	if !validTraceState(tc.State) {
		tc.State = ""
	}
	return tc
}

func validTraceParent(s string) bool {
	if len(s) < 55 || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return false
	}
	version := s[:2]
	if !lowerHex(version) || version == "ff" || (version == "00" && len(s) != 55) ||
		(len(s) > 55 && s[55] != '-') {
		return false
	}
	traceID, parentID, flags := s[3:35], s[36:52], s[53:55]
	return lowerHex(traceID) && lowerHex(parentID) && lowerHex(flags) &&
		strings.Trim(traceID, "0") != "" && strings.Trim(parentID, "0") != ""
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// validTraceState checks a tracestate list: at most 32 members of
// key=value, keys of lowercase letters, digits and _-*/ (one @ for a
// multi-tenant key), values of printable ASCII but "," and "=", not
// ending in a space.
func validTraceState(s string) bool {
	if len(s) > MaxTraceStateBytes {
		return false
	}
	if strings.TrimSpace(s) == "" {
		return s == ""
	}
	n := 0
	for m := range strings.SplitSeq(s, ",") {
		m = strings.Trim(m, " \t")
		if m == "" {
			continue
		}
		n++
		key, value, ok := strings.Cut(m, "=")
		if !ok || n > 32 || !validStateKey(key) || !validStateValue(value) {
			return false
		}
	}
	return true
}

func validStateKey(k string) bool {
	if k == "" || len(k) > 256 {
		return false
	}
	tenant, system, multi := strings.Cut(k, "@")
	if multi && (tenant == "" || system == "" || strings.Contains(system, "@")) {
		return false
	}
	if c := k[0]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_', c == '-', c == '*', c == '/', c == '@':
		default:
			return false
		}
	}
	return true
}

func validStateValue(v string) bool {
	if v == "" || len(v) > 256 || v[len(v)-1] == ' ' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e || c == ',' || c == '=' {
			return false
		}
	}
	return true
}
