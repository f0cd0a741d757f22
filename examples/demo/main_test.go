package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestDemo(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := run(t.Context(), &out, &out, 0); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		`"status": "partial"`,
		`Why batch?`,
		`"error": "upstream: status 404"`,
		`unsupported: jq is not available`,
		`3 ok / 2 failed / 5 total`,
		`"reused": false`,
		`budgets evict the oldest jobs`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "restarts fail, never resume\\nleases") {
		t.Errorf("grep did not filter lines:\n%s", out.String())
	}
}
