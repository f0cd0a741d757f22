package batchmcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchmcp"
)

// TestTools_SubmitDeadline: batch_submit takes an optional deadline by the
// HTTP API's rule; the job ends with what it has at it, and batch_status
// shows the deadline; one over the server's cap, or malformed, is refused
// with its code.
func TestTools_SubmitDeadline(t *testing.T) {
	slow := func(ctx context.Context, _ batch.Caller, tg batch.Target) (batch.Result, error) {
		if strings.HasSuffix(tg.URL, "/quick") {
			return batch.Result{Content: "quick"}, nil
		}
		<-ctx.Done() // a slow upstream: the deadline cuts it
		return batch.Result{}, context.Cause(ctx)
	}
	e := newEnvRunner(t, batch.Config{Fetch: slow, MaxDeadline: batch.Duration(time.Hour)}, batchmcp.Config{})
	cs := e.client(keyAlice)

	args := targets("https://example.test/quick", "https://example.test/slow", "https://example.test/never")
	args["deadline"] = "300ms"
	var sub batchmcp.SubmitOutput
	decode(t, call(t, cs, "batch_submit", args), &sub)
	st := waitDone(t, cs, sub.JobID)
	if st.Status != batch.JobPartial || st.Error != "deadline" || st.Deadline == nil {
		t.Fatalf("status = %s/%q, deadline %v; want partial/deadline with the deadline", st.Status, st.Error, st.Deadline)
	}
	for i, want := range []batch.Outcome{batch.OutcomeOK, batch.OutcomeExpired, batch.OutcomeExpired} {
		if st.Targets[i].Outcome != want {
			t.Errorf("target %d = %s, want %s", i, st.Targets[i].Outcome, want)
		}
	}

	for _, tc := range []struct {
		name, deadline, code, want string
	}{
		{"over the cap", "2h", "deadline_too_far", "deadline too far: at most 1h0m0s from now"},
		{"iso duration", "PT90S", "invalid_request", `"deadline" must be an RFC 3339 time`},
		{"negative", "-1s", "invalid_request", `"deadline" must be`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := targets("https://example.test/" + tc.name)
			args["deadline"] = tc.deadline
			_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "batch_submit", Arguments: args})
			var we *jsonrpc.Error
			if !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams || !strings.Contains(we.Message, tc.want) {
				t.Fatalf("got %v, want -32602 with %q", err, tc.want)
			}
			var data struct{ Code string }
			if json.Unmarshal(we.Data, &data) != nil || data.Code != tc.code {
				t.Fatalf("data %s, want code %s", we.Data, tc.code)
			}
		})
	}
	// The input schema says what a deadline may be, and the cap.
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools.Tools {
		if tl.Name != "batch_submit" {
			continue
		}
		b, _ := json.Marshal(tl.InputSchema)
		if !strings.Contains(string(b), `"deadline"`) || !strings.Contains(string(b), "At most 1h0m0s from now") {
			t.Errorf("batch_submit's input schema %s does not describe the deadline", b)
		}
	}
}
