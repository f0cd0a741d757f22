package batchdriver_test

import (
	"encoding/json"
	"testing"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

func TestTarget_JSON(t *testing.T) {
	t.Parallel()
	f := func(in, wantURL, wantOptions, wantOut string) {
		t.Helper()
		var tg batchdriver.Target
		if err := json.Unmarshal([]byte(in), &tg); err != nil {
			t.Fatalf("Unmarshal(%s): %v", in, err)
		}
		if tg.URL != wantURL || string(tg.Options) != wantOptions {
			t.Errorf("Unmarshal(%s) = %q %s, want %q %s", in, tg.URL, tg.Options, wantURL, wantOptions)
		}
		out, err := json.Marshal(tg)
		if err != nil || string(out) != wantOut {
			t.Errorf("Marshal = %s, %v; want %s", out, err, wantOut)
		}
	}
	f(`{"url":"u"}`, "u", "", `{"url":"u"}`)
	f(`{"b": 1, "url": "u", "a": {"x": [1, 2]}}`, "u", `{"b":1,"a":{"x":[1,2]}}`, `{"url":"u","b":1,"a":{"x":[1,2]}}`)
	f(`{"url":"u","mode":null}`, "u", "", `{"url":"u"}`) // null is absent
	var tg batchdriver.Target
	if err := json.Unmarshal([]byte(`{"url":3}`), &tg); err == nil {
		t.Error("a URL that is not a string was accepted")
	}
}
