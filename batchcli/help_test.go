package batchcli_test

import (
	"strings"
	"testing"

	"github.com/siftfetch/batchkit/batchcli"
)

// Every verb answers --help, -h and "help <verb>" with its own help on
// standard output and exit status 0, even without a server, and the help
// names every flag the verb takes.
func TestCLI_Help(t *testing.T) {
	t.Parallel()
	flags := map[string][]string{
		"submit":  nil,
		"status":  {"--results", "--wait"},
		"result":  nil,
		"results": {"--follow", "--after"},
		"retry":   nil,
		"cancel":  nil,
		"list":    {"--limit"},
		"help":    nil,
	}
	run := func(args ...string) (string, string, int) {
		t.Helper()
		var stdout, stderr strings.Builder
		cli := batchcli.New(batchcli.Config{Stdout: &stdout, Stderr: &stderr}) // no client: help needs none
		err := cli.Run(t.Context(), args)
		return stdout.String(), stderr.String(), batchcli.ExitCode(err)
	}
	for verb, fl := range flags {
		var first string
		for i, args := range [][]string{{verb, "--help"}, {verb, "-h"}, {"help", verb}, {verb, "x", "--bogus", "--help"}} {
			stdout, stderr, code := run(args...)
			if code != batchcli.ExitOK || stderr != "" {
				t.Errorf("%q: exit %d, stderr %q", args, code, stderr)
			}
			if !strings.HasPrefix(stdout, "usage: batch "+verb) {
				t.Errorf("%q printed %q, want the help of %s", args, stdout, verb)
			}
			for _, f := range fl {
				if !strings.Contains(stdout, f) {
					t.Errorf("%q: help does not name %s:\n%s", args, f, stdout)
				}
			}
			if i == 0 {
				first = stdout
			} else if stdout != first {
				t.Errorf("%q printed another help than %q", args, []string{verb, "--help"})
			}
		}
	}
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		stdout, stderr, code := run(args...)
		if code != batchcli.ExitOK || stderr != "" || stdout != batchcli.Usage {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want Usage", args, code, stdout, stderr)
		}
	}
	for verb := range flags {
		if !strings.Contains(batchcli.Usage, "\n  "+verb+" ") {
			t.Errorf("Usage does not list %s", verb)
		}
	}
	// Every command the overview lists is one this test checks.
	_, list, _ := strings.Cut(batchcli.Usage, "commands:\n")
	list, _, _ = strings.Cut(list, "\n\n")
	for line := range strings.Lines(list) {
		verb, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		if _, checked := flags[verb]; !checked {
			t.Errorf("Usage lists %q, which this test does not check", verb)
		}
	}
}

// A usage error names the verb, repeats its synopsis and points at its
// --help, on standard error, with exit status 2; without a verb it prints
// the overview.
func TestCLI_UsageError(t *testing.T) {
	t.Parallel()
	var stdout, stderr strings.Builder
	cli := batchcli.New(batchcli.Config{Stdout: &stdout, Stderr: &stderr})
	err := cli.Run(t.Context(), []string{"status", "a", "b"})
	want := "batch: status: unexpected argument \"b\"\nusage: batch status <id> [--results] [--wait] [--failed]\nRun \"batch status --help\" for details.\n"
	if code := batchcli.ExitCode(err); code != batchcli.ExitUsage || stderr.String() != want || stdout.Len() != 0 {
		t.Errorf("exit %d, stderr %q, stdout %q; want 2, %q", code, stderr.String(), stdout.String(), want)
	}
	stderr.Reset()
	err = cli.Run(t.Context(), []string{"frobnicate"})
	if code := batchcli.ExitCode(err); code != batchcli.ExitUsage || stderr.String() != "batch: unknown command \"frobnicate\"\n\n"+batchcli.Usage {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}
