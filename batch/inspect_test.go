package batch_test

import (
	"slices"
	"testing"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

func TestTopCallers(t *testing.T) {
	t.Parallel()
	bytes := map[string]int64{"carol": 10, "alice": 30, "bob": 30, "dave": 0, "erin": 5}
	var got []string
	for _, c := range batchdriver.TopCallers(bytes, 3) {
		got = append(got, c.Caller.Name)
		if c.Bytes != bytes[c.Caller.Name] {
			t.Errorf("%s: %d bytes, want %d", c.Caller.Name, c.Bytes, bytes[c.Caller.Name])
		}
	}
	if want := []string{"alice", "bob", "carol"}; !slices.Equal(got, want) {
		t.Errorf("TopCallers = %v, want %v (most bytes first, then by name)", got, want)
	}
	if n := len(batchdriver.TopCallers(bytes, 10)); n != 4 {
		t.Errorf("%d callers with a limit of 10, want 4: one holding nothing is left out", n)
	}
	if c := batchdriver.TopCallers(bytes, -1); len(c) != 0 {
		t.Errorf("a negative limit gave %v, want none", c)
	}
}
