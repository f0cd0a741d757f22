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

	"github.com/siftfetch/batchkit/batch/batchsift"
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

// name is the program's name, as its usage and errors print it.
const name = "batch"

// globalFlags are the flags run takes before the command, as batchcli's
// hint for one given after the command shows them.
var globalFlags = []string{"--server URL", "--key KEY"}

// run parses the global flags, then runs the batch command; it returns the
// exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	// What the flag package prints goes to stdout for --help, which a
	// person asked for, and to stderr for a mistake; which it was shows
	// only once Parse returns.
	var usage bytes.Buffer
	fs.SetOutput(&usage)
	server := fs.String("server", cmp.Or(os.Getenv("BATCH_SERVER"), "http://127.0.0.1:8080"), "batch server `URL` (env BATCH_SERVER)")
	key := fs.String("key", os.Getenv("BATCH_KEY"), "bearer `key` (env BATCH_KEY)")
	version := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprintf(&usage, "usage: %[1]s [--server URL] [--key KEY] <command> [arguments]\n       %[1]s --version\n\nglobal flags:\n", name)
		fs.PrintDefaults()
		fmt.Fprintf(&usage, "\n%s", batchcli.UsageFor(name))
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			stdout.Write(usage.Bytes())
			return batchcli.ExitOK
		}
		stderr.Write(usage.Bytes())
		return batchcli.ExitUsage
	}
	cfg := batchcli.Config{
		Name: name, GlobalFlags: globalFlags, Options: batchsift.Options,
		Stdin: stdin, Stdout: stdout, Stderr: stderr,
	}
	if *version {
		// batchcli's own --version, which needs no server.
		return batchcli.ExitCode(batchcli.New(cfg).Run(ctx, []string{"--version"}))
	}
	// A long-poll waits up to a minute; the timeout only guards a dead server.
	client, err := batchhttp.NewClient(*server, *key, &http.Client{Timeout: 2 * time.Minute})
	if err != nil {
		fmt.Fprintf(stderr, "%s: --server %q: %v\n", name, *server, err)
		return batchcli.ExitUsage
	}
	cfg.Client, cfg.KeyHint = client, keyHint(fs, *key)
	return batchcli.ExitCode(batchcli.New(cfg).Run(ctx, fs.Args()))
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
