package batchmcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchmcp"
)

// ExampleNew serves a runner over MCP at /mcp and drives it with the Go
// SDK's client, as an agent would: submit, wait, read.
func ExampleNew() {
	ctx := context.Background()
	runner, err := batch.New(batch.Config{Store: batchtest.NewStore(), Fetch: batchtest.StaticFetcher("hello")})
	if err != nil {
		panic(err)
	}
	if err := runner.Start(ctx); err != nil {
		panic(err)
	}
	defer runner.Close(context.Background())

	h, err := batchmcp.New(batchmcp.Config{
		Runner: runner,
		// The host's authentication: batchserver.NewKeyAuth, or its own.
		Authenticate: func(w http.ResponseWriter, r *http.Request) (batch.Caller, bool) {
			return batch.Caller{Name: "agent"}, true
		},
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle(batchmcp.Path, h)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL + batchmcp.Path}, nil)
	if err != nil {
		panic(err)
	}
	defer cs.Close()
	callTool := func(name string, args map[string]any, out any) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			panic(err)
		}
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			panic(err)
		}
	}

	var sub batchmcp.SubmitOutput
	callTool("batch_submit", map[string]any{"targets": []any{
		map[string]any{"url": "https://example.com/a"}, map[string]any{"url": "https://example.com/b"},
	}}, &sub)
	var st batchmcp.StatusOutput
	for st.Status != batch.JobDone && st.Status != batch.JobPartial && st.Status != batch.JobFailed {
		callTool("batch_status", map[string]any{"job_id": sub.JobID, "wait_seconds": 10}, &st)
	}
	var r batchmcp.ResultOutput
	callTool("batch_result", map[string]any{"job_id": sub.JobID, "idx": 1}, &r)
	fmt.Println(st.Message)
	fmt.Println(r.URL, r.Content)
	// Output:
	// done: 2 of 2 targets finished
	// https://example.com/b hello
}
