package batchmcp_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/batchmcp"
)

// TestTools_SubmitSkip: batch_submit with on_invalid skip finishes the
// targets the pre-check or the runner refuses at their idx, answers with
// them, and fetches the others; a call whose every target is refused gets
// the default's refusal.
func TestTools_SubmitSkip(t *testing.T) {
	e := newEnv(t, nil, batchmcp.Config{
		Precheck: func(_ context.Context, _ batch.Caller, u string) error {
			if strings.Contains(u, "blocked") {
				return errors.New("blocked: private address")
			}
			return nil
		},
	})
	cs := e.client(keyAlice)
	args := map[string]any{"on_invalid": "skip", "targets": []any{
		map[string]any{"url": "https://example.test/0"},
		map[string]any{"url": "https://blocked.test/1"},
		map[string]any{"url": ""},
		map[string]any{"url": "https://example.test/3"},
	}}
	var out batchmcp.SubmitOutput
	decode(t, call(t, cs, "batch_submit", args), &out)
	want := []batchhttp.SkippedTarget{
		{Idx: 1, Outcome: batch.OutcomeBlocked, Error: "blocked: private address"},
		{Idx: 2, Outcome: batch.OutcomeInvalid, Error: "invalid target: empty url"},
	}
	if out.Targets != 4 || out.Skipped != 2 || !slices.Equal(out.SkippedTargets, want) {
		t.Fatalf("batch_submit = %+v, want targets 1 and 2 skipped", out)
	}
	st := waitDone(t, cs, out.JobID)
	if st.Status != batch.JobPartial || st.Targets[1].Attempts != 0 || st.Targets[1].Outcome != batch.OutcomeBlocked ||
		st.Targets[2].Outcome != batch.OutcomeInvalid || st.Targets[3].Status != batch.TargetDone {
		t.Fatalf("status %+v", st)
	}

	for _, tc := range []struct {
		name string
		args map[string]any
		code string
		want string
	}{
		{"every target refused", map[string]any{"on_invalid": "skip", "targets": []any{map[string]any{"url": "https://blocked.test/"}, map[string]any{"url": ""}}},
			"blocked", "blocked: targets[0]: private address"},
		{"unknown value", map[string]any{"on_invalid": "lenient", "targets": []any{map[string]any{"url": "https://example.test/"}}},
			"invalid_request", "on_invalid"},
	} {
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "batch_submit", Arguments: tc.args})
		var we *jsonrpc.Error
		if !errors.As(err, &we) || !strings.Contains(we.Message, tc.want) || !strings.Contains(string(we.Data), tc.code) {
			t.Errorf("%s: %v, want %s with %q", tc.name, err, tc.code, tc.want)
		}
	}
}
