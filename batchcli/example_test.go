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
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchcli"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/batchhttp/batchserver"
)

// A host mounts the batch commands in its own CLI: it builds a client for its
// server and key, runs the arguments, and exits with ExitCode.
func ExampleCLI_Run() {
	// A server to talk to: the batch handler over an in-memory runner.
	ctx := context.Background()
	r, _ := batch.New(batch.Config{Store: batchtest.NewStore(), Fetch: batchtest.StaticFetcher("hello"), Options: batchsift.Options})
	_ = r.Start(ctx)
	defer r.Close(ctx)
	auth, _ := batchserver.NewKeyAuth([]batchserver.Key{{Name: "agent", Secret: "s3cret"}})
	h, _ := batchhttp.NewHandler(r, &batchhttp.HandlerConfig{Authenticate: auth})
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

// A host such as sift mounts the commands as "sift batch": it names them,
// says how its users pass the key and which flags of its own go before the
// command, and may give its own version. Its main calls Run with the
// arguments after "sift batch" and exits with ExitCode.
func ExampleConfig_mounted() {
	ctx := context.Background()
	r, _ := batch.New(batch.Config{Store: batchtest.NewStore(), Fetch: batchtest.StaticFetcher("hello"), Options: batchsift.Options})
	_ = r.Start(ctx)
	defer r.Close(ctx)
	auth, _ := batchserver.NewKeyAuth([]batchserver.Key{{Name: "agent", Secret: "s3cret"}})
	h, _ := batchhttp.NewHandler(r, &batchhttp.HandlerConfig{Authenticate: auth})
	srv := httptest.NewServer(h)
	defer srv.Close()

	client, _ := batchhttp.NewClient(srv.URL, "", nil) // the user has not logged in
	cli := batchcli.New(batchcli.Config{
		Name:        "sift batch",
		Version:     "v0.9.0", // sift's own, as its build stamps it
		KeyHint:     "log in with: sift login",
		GlobalFlags: []string{"--profile NAME"},
		Client:      client,
		Stdout:      os.Stdout,
		Stderr:      os.Stdout, // so that the example shows the errors
	})

	// What "sift batch --help" prints, and sift's own --help may include.
	head, _, _ := strings.Cut(batchcli.UsageFor("sift batch"), "\n")
	fmt.Println(head)

	_ = cli.Run(ctx, []string{"--version"})
	err := cli.Run(ctx, []string{"list"})
	fmt.Println("exit code:", batchcli.ExitCode(err))
	err = cli.Run(ctx, []string{"list", "--profile", "work"})
	fmt.Println("exit code:", batchcli.ExitCode(err))
	// Output:
	// usage: sift batch <command> [arguments]
	// sift batch v0.9.0
	// sift batch: unauthorized (HTTP 401)
	// hint: log in with: sift login
	// exit code: 1
	// sift batch: list: unknown flag "--profile" (list takes --limit, --metadata)
	// hint: global flags such as --profile go before the command: sift batch --profile NAME list
	// usage: sift batch list [--limit N] [--metadata KEY=VALUE[,KEY=VALUE…]]
	// Run "sift batch list --help" for details.
	// exit code: 2
}
