package batchcli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchcli"
	"github.com/siftfetch/batchkit/batchhttp"
)

// A host mounts the batch commands in its own CLI: it builds a client for its
// server and key, runs the arguments, and exits with ExitCode.
func ExampleCLI_Run() {
	// A server to talk to: the batch handler over an in-memory runner.
	ctx := context.Background()
	r, _ := batch.New(batch.Config{Store: batchtest.NewStore(), Fetch: batchtest.StaticFetcher("hello")})
	_ = r.Start(ctx)
	defer r.Close(ctx)
	auth, _ := batchhttp.NewKeyAuth([]batchhttp.Key{{Name: "agent", Secret: "s3cret"}})
	h, _ := batchhttp.NewHandler(r, &batchhttp.HandlerOpts{Authenticate: auth})
	srv := httptest.NewServer(h)
	defer srv.Close()

	client, _ := batchhttp.NewClient(srv.URL, "s3cret", nil)
	var stdout bytes.Buffer
	cli := batchcli.New(batchcli.Config{
		Client: client,
		Stdin:  strings.NewReader("https://example.test/a\nhttps://example.test/b\n"),
		Stdout: &stdout,
		Stderr: os.Stdout, // so that the example shows the error
	})

	err := cli.Run(ctx, []string{"submit", "-"})
	var sub batchhttp.SubmitResponse
	_ = json.Unmarshal(stdout.Bytes(), &sub)
	fmt.Println("submit:", batchcli.ExitCode(err), sub.Status, sub.Targets, "targets, reused:", sub.Reused)

	err = cli.Run(ctx, []string{"result", sub.JobID})
	fmt.Println("exit code:", batchcli.ExitCode(err))
	// Output:
	// submit: 0 queued 2 targets, reused: false
	// batch: result: missing <idx>
	// usage: batch result <id> <idx>
	// Run "batch result --help" for details.
	// exit code: 2
}
