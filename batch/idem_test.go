package batch

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"
)

// testOptions has the shape of sift's option set (batchsift.Options, which
// this package's internal tests cannot import).
var testOptions = OptionSet{Fields: []OptionField{
	{Name: "mode", Type: OptionString, Enum: []string{"", "clean", "raw", "digest"}},
	{Name: "question", Type: OptionString},
	{Name: "pages", Type: OptionString},
	{Name: "grep", Type: OptionString},
	{Name: "jq", Type: OptionString},
	{Name: "context", Type: OptionOptionalBool},
	{Name: "recover", Type: OptionBool},
}}

// decodeTargets reads a target list and puts its options in their stored
// form, as a submit does.
func decodeTargets(t *testing.T, s string) []Target {
	t.Helper()
	var ts []Target
	if err := json.Unmarshal([]byte(s), &ts); err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	for i := range ts {
		opts, err := testOptions.Normalize(ts[i].Options)
		if err != nil {
			t.Fatalf("normalize %s: %v", ts[i].Options, err)
		}
		ts[i].Options = opts
	}
	return ts
}

func TestIdemKey(t *testing.T) {
	t.Parallel()
	r := &Runner{cfg: Config{Options: testOptions}}
	f := func(callerA, a, callerB, b string, equal bool) {
		t.Helper()
		ka := r.idemKey(callerA, decodeTargets(t, a), "")
		kb := r.idemKey(callerB, decodeTargets(t, b), "")
		if (ka == kb) != equal {
			t.Errorf("idemKey(%s, %s) == idemKey(%s, %s) is %v, want %v", callerA, a, callerB, b, ka == kb, equal)
		}
		if len(ka) != 64 {
			t.Errorf("key %q is not a hex SHA-256", ka)
		}
	}
	one := `[{"url":"https://a.test/","mode":"clean"}]`
	f("alice", one, "alice", one, true)
	f("alice", one, "alice", `[{"mode":"clean","url":"https://a.test/"}]`, true)                  // field order
	f("alice", one, "alice", `[{"url":"https://a.test/","mode":"clean","question":""}]`, true)    // empty = absent
	f("alice", one, "alice", `[{"url":"https://a.test/","mode":"clean","recover":false}]`, true)  // false = absent
	f("alice", one, "alice", `[{"url":"https://a.test/","mode":"clean","question":null}]`, true)  // null = absent
	f("alice", one, "bob", one, false)                                                            // caller scoped
	f("alice", one, "alice", `[{"url":"https://a.test/","mode":"raw"}]`, false)                   // mode
	f("alice", one, "alice", `[{"url":"https://a.test","mode":"clean"}]`, false)                  // URL verbatim
	f("alice", one, "alice", `[{"url":"https://a.test/","mode":"clean","context":false}]`, false) // context false ≠ absent
	f("alice", `[{"url":"https://a.test/","context":true}]`, "alice", `[{"url":"https://a.test/","context":false}]`, false)
	f("alice", `[{"url":"https://a.test/"},{"url":"https://b.test/"}]`, "alice", `[{"url":"https://b.test/"},{"url":"https://a.test/"}]`, false) // order matters
	f("alice", `[{"url":"https://a.test/","grep":"x"}]`, "alice", `[{"url":"https://a.test/","jq":"x"}]`, false)                                 // field identity
	// The NUL separator keeps caller and list apart.
	f("a", `[{"url":"b"}]`, "a\x00", `[{"url":"b"}]`, false)
}

// TestIdemKey_CanonicalForm pins the canonical form: every declared option
// in order, absent ones as "", false or null, so that a key computed before
// options became the host's is the same key now.
func TestIdemKey_CanonicalForm(t *testing.T) {
	t.Parallel()
	r := &Runner{cfg: Config{Options: testOptions}}
	ts := decodeTargets(t, `[{"url":"https://a.test/?q=<x>","context":true,"mode":"clean"}]`)
	got := string(r.canonicalTargets(ts))
	want := `[{"url":"https://a.test/?q=\u003cx\u003e","mode":"clean","question":"","pages":"","grep":"","jq":"","context":true,"recover":false}]`
	if got != want {
		t.Errorf("canonicalTargets = %s\nwant %s", got, want)
	}
	sum := sha256.Sum256([]byte("alice\x00" + want))
	if key := r.idemKey("alice", ts, ""); key != hex.EncodeToString(sum[:]) {
		t.Errorf("idemKey = %s, want the SHA-256 of the caller, NUL and the canonical list", key)
	}
}
