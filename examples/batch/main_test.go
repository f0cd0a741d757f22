package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchcli"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/batchhttp/batchserver"
	"github.com/siftfetch/batchkit/examples/internal/testbin"
	"github.com/siftfetch/batchkit/internal/apitest"
)

// raceEnabled is set when the test binary is built with -race, so that the
// CLI binary is built the same way and reuses the build cache.
var raceEnabled bool

func buildBatch(t *testing.T) string {
	t.Helper()
	return testbin.Build(t, "batch", raceEnabled)
}

func decodeJSON[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
	return v
}

// serve serves the batch API over an in-memory runner with fetch for the
// key "s3cret" and returns its URL.
func serve(t *testing.T, fetch batch.FetchFunc) string {
	t.Helper()
	r := batchtest.NewRunner(t, batch.Config{Fetch: fetch, Options: batchsift.Options, PollInterval: batch.Duration(10 * time.Millisecond)})
	return apitest.Serve(t, r, batchserver.Key{Name: "alice", Secret: "s3cret"})
}

// runBatch runs the command line args in process, and returns its exit
// code, stdout and stderr.
func runBatch(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr strings.Builder
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	code := run(ctx, args, strings.NewReader(stdin), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestRun_Version(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runBatch(t, "", "--version")
	if code != 0 || !regexp.MustCompile(`^batch \S+\n$`).MatchString(stdout) || stderr != "" {
		t.Errorf("--version: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if want := "batch " + batchcli.Version() + "\n"; stdout != want {
		t.Errorf("--version printed %q, want %q", stdout, want)
	}
}

// --help is asked for: it goes to stdout with exit 0, and names the global
// flags and the commands; a wrong flag goes to stderr with exit 2.
func TestRun_Help(t *testing.T) {
	t.Parallel()
	for _, flag := range []string{"--help", "-h", "-help"} {
		code, stdout, stderr := runBatch(t, "", flag)
		if code != batchcli.ExitOK || stderr != "" || !strings.HasPrefix(stdout, "usage: batch [--server URL] [--key KEY] <command>") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", flag, code, stdout, stderr)
		}
		for _, want := range []string{"-server URL", "-key key", "-version", "BATCH_SERVER", "BATCH_KEY", batchcli.Usage} {
			if !strings.Contains(stdout, want) {
				t.Errorf("%s: help lacks %q:\n%s", flag, want, stdout)
			}
		}
	}
	code, stdout, stderr := runBatch(t, "", "--bogus", "list")
	if code != batchcli.ExitUsage || stdout != "" || !strings.Contains(stderr, "flag provided but not defined: -bogus") || !strings.Contains(stderr, "usage: batch") {
		t.Errorf("--bogus: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// A verb's help needs no server.
	for _, verb := range []string{"submit", "status", "result", "cancel", "list"} {
		code, stdout, stderr := runBatch(t, "", "--server", "http://127.0.0.1:1", verb, "--help")
		if code != batchcli.ExitOK || stderr != "" || !strings.HasPrefix(stdout, "usage: batch "+verb) {
			t.Errorf("%s --help: exit %d, stdout %q, stderr %q", verb, code, stdout, stderr)
		}
	}
}

// The exit codes of the program are batchcli's, end to end.
func TestRun_ExitCodes(t *testing.T) {
	t.Parallel()
	url := serve(t, batchtest.ScriptFetcher(map[string]batchtest.Step{"https://a.test/bad": {Err: batchtest.ErrScripted}}))
	code, stdout, stderr := runBatch(t, "https://a.test/ok\nhttps://a.test/bad\n", "--server", url, "--key", "s3cret", "submit", "-")
	var sub batchhttp.SubmitResponse
	if err := json.Unmarshal([]byte(stdout), &sub); code != batchcli.ExitOK || err != nil {
		t.Fatalf("submit: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	f := func(name string, want int, wantInStderr string, args ...string) {
		t.Helper()
		code, _, stderr := runBatch(t, "", args...)
		if code != want || !strings.Contains(stderr, wantInStderr) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", name, code, stderr, want, wantInStderr)
		}
	}
	f("partial", batchcli.ExitJobNotDone, "batch: job ended partial: 1 of 2 targets failed", "--server", url, "--key", "s3cret", "status", sub.JobID, "--wait")
	f("status", batchcli.ExitOK, "", "--server", url, "--key", "s3cret", "status", sub.JobID)
	f("not found", batchcli.ExitRefused, "batch: not found (HTTP 404)", "--server", url, "--key", "s3cret", "result", sub.JobID, "7")
	f("usage", batchcli.ExitUsage, "batch: result: missing <idx>", "--server", url, "--key", "s3cret", "result", sub.JobID)
	f("bad server URL", batchcli.ExitUsage, `batch: --server "127.0.0.1:8080": `, "--server", "127.0.0.1:8080", "list")
	f("no server", batchcli.ExitServerError, "batch: no answer from http://127.0.0.1:1: ", "--server", "http://127.0.0.1:1", "--key", "s3cret", "list")
}

// A 401 says how to pass the key, in terms of where this key came from.
func TestRun_KeyHint(t *testing.T) {
	url := serve(t, nil)
	f := func(name, want string, args ...string) {
		t.Helper()
		code, _, stderr := runBatch(t, "", append([]string{"--server", url}, args...)...)
		if code != batchcli.ExitRefused || !strings.Contains(stderr, "batch: unauthorized (HTTP 401)\nhint: "+want+"\n") {
			t.Errorf("%s: exit %d, stderr %q; want 1 and the hint %q", name, code, stderr, want)
		}
	}
	t.Setenv("BATCH_KEY", "")
	f("no key", "no key was given: pass one with --key KEY or in the BATCH_KEY environment variable", "list")
	f("wrong --key", "the server did not accept the key given with --key", "--key", "wrong", "list")
	t.Setenv("BATCH_KEY", "wrong")
	f("wrong $BATCH_KEY", "the server did not accept the key in $BATCH_KEY; pass another with --key KEY or in BATCH_KEY", "list")
	f("empty --key", "no key was given: pass one with --key KEY or in the BATCH_KEY environment variable", "--key=", "list")
}

// The sample the daemon's start-up hint names is a valid submit: the CLI's
// strict parse takes it, and the server takes every target.
func TestTargetsSample(t *testing.T) {
	t.Parallel()
	url := serve(t, nil)
	code, stdout, stderr := runBatch(t, "", "--server", url, "--key", "s3cret", "submit", "../targets.json")
	if code != batchcli.ExitOK {
		t.Fatalf("submit ../targets.json: exit %d, %s", code, stderr)
	}
	if sub := decodeJSON[batchhttp.SubmitResponse](t, stdout); sub.Targets != 3 || sub.JobID == "" {
		t.Errorf("submit printed %+v", sub)
	}
	code, _, stderr = runBatch(t, "", "--server", url, "--key", "s3cret", "status", decodeJSON[batchhttp.SubmitResponse](t, stdout).JobID, "--wait")
	if code != batchcli.ExitOK {
		t.Errorf("status --wait: exit %d, %s", code, stderr)
	}
}

// A global flag given after the command is a usage error that shows where
// it goes, and never the value given with it.
func TestRun_GlobalFlagAfterCommand(t *testing.T) {
	t.Parallel()
	f := func(wantHint string, args ...string) {
		t.Helper()
		code, stdout, stderr := runBatch(t, "", args...)
		if code != batchcli.ExitUsage || stdout != "" || !strings.HasPrefix(stderr, "batch: ") || !strings.Contains(stderr, "\nhint: "+wantHint+"\n") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and the hint %q", args, code, stdout, stderr, wantHint)
		}
		if strings.Contains(stderr, "s3cret") || strings.Contains(stderr, "secret.test") {
			t.Errorf("%q: stderr %q repeats a flag's value", args, stderr)
		}
	}
	f("global flags such as --key go before the command: batch --key KEY list", "list", "--key", "s3cret")
	f("global flags such as --key go before the command: batch --key KEY list", "list", "--key=s3cret")
	f("global flags such as --server go before the command: batch --server URL status …", "--key", "s3cret", "status", "abc", "-server=http://secret.test")
	// Every flag the hint names is one run takes before the command.
	for _, g := range globalFlags {
		flag, _, _ := strings.Cut(g, " ")
		code, _, stderr := runBatch(t, "", flag+"=x", "--help")
		if code != batchcli.ExitOK {
			t.Errorf("global flag %q is not a flag of run: exit %d, %s", g, code, stderr)
		}
	}
}
