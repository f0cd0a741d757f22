package batchmcp_test

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchmcp"
)

// TestTools_LabelsAndFailures: batch_submit takes metadata and custom
// ids, batch_status and batch_result return them, and failed_only lists
// the failed targets alone.
func TestTools_LabelsAndFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t, scripted("ok"), batchmcp.Config{})
	cs := e.client(keyAlice)
	meta := map[string]string{"run": "nightly"}
	args := map[string]any{"metadata": meta, "targets": []map[string]any{
		{"url": urlShort, "custom_id": "s"}, {"url": urlFailed, "custom_id": "f"}, {"url": urlLong},
	}}
	var sub batchmcp.SubmitOutput
	decode(t, call(t, cs, "batch_submit", args), &sub)
	st := waitDone(t, cs, sub.JobID)
	if !maps.Equal(st.Metadata, meta) || st.Targets[0].CustomID != "s" || st.Targets[1].CustomID != "f" || st.Targets[2].CustomID != "" {
		t.Errorf("status: metadata %v, targets %+v", st.Metadata, st.Targets)
	}
	if fmt.Sprint(st.Outcomes) != "map[ok:2 upstream_4xx:1]" {
		t.Errorf("outcomes %v", st.Outcomes)
	}
	var failed batchmcp.StatusOutput
	decode(t, call(t, cs, "batch_status", map[string]any{"job_id": sub.JobID, "failed_only": true}), &failed)
	if len(failed.Targets) != 1 || failed.Targets[0].Idx != 1 || failed.Targets[0].Outcome != batch.OutcomeUpstream4xx {
		t.Errorf("failed_only: %+v", failed.Targets)
	}
	var res batchmcp.ResultOutput
	decode(t, call(t, cs, "batch_result", map[string]any{"job_id": sub.JobID, "idx": 0}), &res)
	if res.CustomID != "s" {
		t.Errorf("batch_result custom_id %q, want s", res.CustomID)
	}

	dup := map[string]any{"targets": []map[string]any{{"url": urlShort, "custom_id": "x"}, {"url": urlLong, "custom_id": "x"}}}
	refused := func(args any) string {
		t.Helper()
		_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "batch_submit", Arguments: args})
		if err == nil {
			t.Fatalf("batch_submit %v: accepted", args)
		}
		return err.Error()
	}
	if msg := refused(dup); !strings.Contains(msg, "invalid batch: targets[1]: duplicate custom_id: target 0 has the same") {
		t.Errorf("duplicate custom_id: %s", msg)
	}
	big := map[string]string{}
	for i := range batch.MaxMetadataPairs + 1 {
		big[fmt.Sprint(i)] = "v"
	}
	if msg := refused(map[string]any{"metadata": big, "targets": []map[string]any{{"url": urlShort}}}); !strings.Contains(msg, "invalid batch: metadata: 17 pairs (max 16)") {
		t.Errorf("17 pairs: %s", msg)
	}
}
