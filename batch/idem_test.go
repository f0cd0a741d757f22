package batch_test

import (
	"encoding/json"
	"testing"

	"github.com/siftfetch/batchkit/batch"
)

func decodeTargets(t *testing.T, s string) []batch.Target {
	t.Helper()
	var ts []batch.Target
	if err := json.Unmarshal([]byte(s), &ts); err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	return ts
}

func TestIdemKey(t *testing.T) {
	t.Parallel()
	f := func(callerA, a, callerB, b string, equal bool) {
		t.Helper()
		ka := batch.IdemKey(callerA, decodeTargets(t, a))
		kb := batch.IdemKey(callerB, decodeTargets(t, b))
		if (ka == kb) != equal {
			t.Errorf("IdemKey(%s, %s) == IdemKey(%s, %s) is %v, want %v", callerA, a, callerB, b, ka == kb, equal)
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

func TestCanonicalTargets(t *testing.T) {
	t.Parallel()
	yes := true
	got := string(batch.CanonicalTargets([]batch.Target{{URL: "https://a.test/?q=<x>", Options: batch.Options{Mode: "clean", Context: &yes}}}))
	want := `[{"url":"https://a.test/?q=\u003cx\u003e","mode":"clean","question":"","pages":"","grep":"","jq":"","context":true,"recover":false}]`
	if got != want {
		t.Errorf("CanonicalTargets = %s\nwant %s", got, want)
	}
}
