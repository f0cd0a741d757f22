// Command batch is an example CLI that mounts the batchcli commands the way a
// host such as sift mounts them in its own CLI.
//
//	go run ./examples/batch [--server URL] [--key KEY] submit examples/targets.json
//	go run ./examples/batch status <id> --wait --results
//	go run ./examples/batch <command> --help
//	go run ./examples/batch --version
//
// The server defaults to $BATCH_SERVER or http://127.0.0.1:8080, the key to
// $BATCH_KEY. The exit codes are batchcli's (0 ok, 1 refused, 2 usage, 3 the
// server or network failed, 4 --wait saw the job end other than done, 130
// Ctrl-C). The first Ctrl-C stops the command cleanly; a second one ends the
// process at once.
package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
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
	// Once the first Ctrl-C has cancelled ctx, the signal's default action
	// comes back, so that a second one ends the process at once.
	context.AfterFunc(ctx, stop)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run parses the global flags, then runs the batch command; it returns the
// exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("batch", flag.ContinueOnError)
	// What the flag package prints goes to stdout for --help, which a
	// person asked for, and to stderr for a mistake; which it was shows
	// only once Parse returns.
	var usage bytes.Buffer
	fs.SetOutput(&usage)
	server := fs.String("server", cmp.Or(os.Getenv("BATCH_SERVER"), "http://127.0.0.1:8080"), "batch server `URL` (env BATCH_SERVER)")
	key := fs.String("key", os.Getenv("BATCH_KEY"), "bearer `key` (env BATCH_KEY)")
	version := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprintf(&usage, "usage: batch [--server URL] [--key KEY] <command> [arguments]\n       batch --version\n\nglobal flags:\n")
		fs.PrintDefaults()
		fmt.Fprintf(&usage, "\n%s", batchcli.Usage)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			stdout.Write(usage.Bytes())
			return batchcli.ExitOK
		}
		stderr.Write(usage.Bytes())
		return batchcli.ExitUsage
	}
	if *version {
		fmt.Fprintf(stdout, "batch %s\n", batchcli.Version())
		return batchcli.ExitOK
	}
	// A long-poll waits up to a minute; the timeout only guards a dead server.
	client, err := batchhttp.NewClient(*server, *key, &http.Client{Timeout: 2 * time.Minute})
	if err != nil {
		fmt.Fprintf(stderr, "batch: --server %q: %v\n", *server, err)
		return batchcli.ExitUsage
	}
	cli := batchcli.New(batchcli.Config{
		Client: client, Stdin: stdin, Stdout: stdout, Stderr: stderr,
		KeyHint: keyHint(fs, *key),
	})
	return batchcli.ExitCode(cli.Run(ctx, fs.Args()))
}

// keyHint is what a 401 tells the user, which depends on where the key
// came from.
func keyHint(fs *flag.FlagSet, key string) string {
	fromFlag := false
	fs.Visit(func(f *flag.Flag) { fromFlag = fromFlag || f.Name == "key" })
	switch {
	case key == "":
		return "no key was given: pass one with --key KEY or in the BATCH_KEY environment variable"
	case fromFlag:
		return "the server did not accept the key given with --key"
	}
	return "the server did not accept the key in $BATCH_KEY; pass another with --key KEY or in BATCH_KEY"
}
