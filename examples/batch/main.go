// Command batch is an example CLI that mounts the batchcli commands the way a
// host such as sift mounts them in its own CLI.
//
//	go run ./examples/batch [--server URL] [--key KEY] submit targets.json
//	go run ./examples/batch status <id> --wait --results
//
// The server defaults to $BATCH_SERVER or http://127.0.0.1:8080, the key to
// $BATCH_KEY.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/siftfetch/batchkit/batchcli"
	"github.com/siftfetch/batchkit/batchhttp"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run parses the global flags, then runs the batch command; it returns the
// exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("batch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	server := fs.String("server", cmp.Or(os.Getenv("BATCH_SERVER"), "http://127.0.0.1:8080"), "batch server `URL` (env BATCH_SERVER)")
	key := fs.String("key", os.Getenv("BATCH_KEY"), "bearer `key` (env BATCH_KEY)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: batch [--server URL] [--key KEY] <command> [arguments]\n\nglobal flags:\n")
		fs.PrintDefaults()
		fmt.Fprintf(stderr, "\n%s", batchcli.Usage)
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	// A long-poll waits up to a minute; the timeout only guards a dead server.
	client, err := batchhttp.NewClient(*server, *key, &http.Client{Timeout: 2 * time.Minute})
	if err != nil {
		fmt.Fprintf(stderr, "batch: %v\n", err)
		return 2
	}
	cli := batchcli.New(batchcli.Config{Client: client, Stdin: stdin, Stdout: stdout, Stderr: stderr})
	return batchcli.ExitCode(cli.Run(ctx, fs.Args()))
}
