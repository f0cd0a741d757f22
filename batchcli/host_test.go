package batchcli_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/siftfetch/batchkit/batchcli"
	"github.com/siftfetch/batchkit/batchhttp"
)

// hostRun is one run of a CLI configured as a host configures it.
type hostRun struct {
	stdout, stderr string
	code           int
}

// runHost runs args on a CLI built from cfg, with its streams captured and
// a client for url (none if url is empty).
func runHost(t *testing.T, ctx context.Context, cfg batchcli.Config, url, key string, args ...string) hostRun {
	t.Helper()
	if url != "" {
		client, err := batchhttp.NewClient(url, key, nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Client = client
	}
	var stdout, stderr strings.Builder
	cfg.Stdout, cfg.Stderr = &stdout, &stderr
	cfg.IsTerminal = func(io.Writer) bool { return false }
	err := batchcli.New(cfg).Run(ctx, args)
	if err != nil && !errors.Is(err, batchcli.ErrReported) {
		t.Errorf("%q: error %v is not marked reported", args, err)
	}
	return hostRun{stdout: stdout.String(), stderr: stderr.String(), code: batchcli.ExitCode(err)}
}

// onlyName fails the test if text names the program other than as name:
// a line that starts with "batch" (DefaultName), or "batch" anywhere but
// inside name.
func onlyName(t *testing.T, what, text, name string) {
	t.Helper()
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, batchcli.DefaultName) {
			t.Errorf("%s: line %q starts with %q, not %q", what, line, batchcli.DefaultName, name)
		}
	}
	if rest := strings.ReplaceAll(text, name, ""); strings.Contains(rest, batchcli.DefaultName) {
		t.Errorf("%s names %q other than as %q:\n%s", what, batchcli.DefaultName, name, text)
	}
}

// listedVerbs are the commands the overview lists.
func listedVerbs(t *testing.T) []string {
	t.Helper()
	_, list, ok := strings.Cut(batchcli.Usage, "commands:\n")
	list, _, _ = strings.Cut(list, "\n\n")
	var verbs []string
	for line := range strings.Lines(list) {
		verb, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		verbs = append(verbs, verb)
	}
	if !ok || len(verbs) < 8 {
		t.Fatalf("Usage lists %q as its commands", verbs)
	}
	return verbs
}

func TestUsageFor(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"", "batch"} {
		if got := batchcli.UsageFor(name); got != batchcli.Usage {
			t.Errorf("UsageFor(%q) differs from Usage:\n%s", name, got)
		}
	}
	const name = "sift batch"
	got := batchcli.UsageFor(name)
	if !strings.HasPrefix(got, "usage: sift batch <command> [arguments]\n") {
		t.Errorf("UsageFor(%q) starts %q", name, got[:min(len(got), 60)])
	}
	for _, want := range []string{`Run "sift batch <command> --help"`, `"sift batch --version"`} {
		if !strings.Contains(got, want) {
			t.Errorf("UsageFor(%q) lacks %q:\n%s", name, want, got)
		}
	}
	onlyName(t, "UsageFor", got, name)
	// Only the name changes.
	if back := strings.ReplaceAll(got, name, batchcli.DefaultName); back != batchcli.Usage {
		t.Errorf("UsageFor(%q) differs from Usage in more than the name:\n%s", name, got)
	}
}

// A host that mounts the commands as "sift batch" sees "sift batch" in the
// usage, every help, every error line and every command the CLI suggests,
// and never "batch" alone.
func TestCLI_Name(t *testing.T) {
	t.Parallel()
	const name = "sift batch"
	cfg := batchcli.Config{Name: name}

	t.Run("APIError", func(t *testing.T) {
		t.Parallel()
		_, url := serve(t, nil)
		r := runHost(t, t.Context(), cfg, url, "", "list")
		if want := "sift batch: unauthorized (HTTP 401)\nhint: " + batchcli.DefaultKeyHint + "\n"; r.code != batchcli.ExitRefused || r.stderr != want {
			t.Errorf("401: exit %d, stderr %q; want 1, %q", r.code, r.stderr, want)
		}
		onlyName(t, "401", r.stderr, name)
		r = runHost(t, t.Context(), cfg, url, "alice-key", "status", "no-such-job")
		if want := "sift batch: not found (HTTP 404)\n"; r.code != batchcli.ExitRefused || r.stderr != want {
			t.Errorf("404: exit %d, stderr %q; want 1, %q", r.code, r.stderr, want)
		}
	})
	t.Run("Help", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{{"help"}, {"--help"}} {
			r := runHost(t, t.Context(), cfg, "", "", args...)
			if r.code != batchcli.ExitOK || r.stderr != "" || r.stdout != batchcli.UsageFor(name) {
				t.Errorf("%q: exit %d, stderr %q, stdout %q; want UsageFor(%q)", args, r.code, r.stderr, r.stdout, name)
			}
		}
		for _, verb := range listedVerbs(t) {
			r := runHost(t, t.Context(), cfg, "", "", verb, "--help")
			if r.code != batchcli.ExitOK || !strings.HasPrefix(r.stdout, "usage: sift batch "+verb+" ") {
				t.Errorf("%s --help: exit %d, stdout %q", verb, r.code, r.stdout)
			}
			onlyName(t, verb+" --help", r.stdout, name)
			// The same text as the default CLI's, but for the name.
			def := runHost(t, t.Context(), batchcli.Config{}, "", "", verb, "--help")
			if got := strings.ReplaceAll(r.stdout, name, batchcli.DefaultName); got != def.stdout {
				t.Errorf("%s --help differs from the default CLI's in more than the name:\n%s", verb, r.stdout)
			}
		}
	})
	t.Run("Interrupted", func(t *testing.T) {
		t.Parallel()
		// Cancelled before it starts, the wait's first read fails at once,
		// without a connection.
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		r := runHost(t, ctx, cfg, "http://127.0.0.1:1", "k", "status", "j1", "--wait")
		if want := "sift batch: interrupted; stopped waiting; the job goes on (sift batch cancel j1 stops it)\n"; r.code != batchcli.ExitInterrupted || r.stderr != want {
			t.Errorf("exit %d, stderr %q; want %d, %q", r.code, r.stderr, batchcli.ExitInterrupted, want)
		}
	})
	t.Run("NoAnswer", func(t *testing.T) {
		t.Parallel()
		r := runHost(t, t.Context(), cfg, "http://127.0.0.1:1", "k", "list")
		if r.code != batchcli.ExitServerError || !strings.HasPrefix(r.stderr, "sift batch: no answer from http://127.0.0.1:1: ") {
			t.Errorf("exit %d, stderr %q", r.code, r.stderr)
		}
		onlyName(t, "no answer", r.stderr, name)
	})
	t.Run("UsageError", func(t *testing.T) {
		t.Parallel()
		r := runHost(t, t.Context(), cfg, "", "", "status", "a", "b")
		want := "sift batch: status: unexpected argument \"b\"\nusage: sift batch status <id> [--results] [--wait] [--failed]\nRun \"sift batch status --help\" for details.\n"
		if r.code != batchcli.ExitUsage || r.stderr != want || r.stdout != "" {
			t.Errorf("exit %d, stderr %q, stdout %q; want 2, %q", r.code, r.stderr, r.stdout, want)
		}
		r = runHost(t, t.Context(), cfg, "", "", "frobnicate")
		if want := "sift batch: unknown command \"frobnicate\"\n\n" + batchcli.UsageFor(name); r.code != batchcli.ExitUsage || r.stderr != want {
			t.Errorf("unknown command: exit %d, stderr %q", r.code, r.stderr)
		}
		onlyName(t, "unknown command", r.stderr, name)
		for _, verb := range listedVerbs(t) {
			r := runHost(t, t.Context(), cfg, "", "", verb, "--bogus")
			if r.code != batchcli.ExitUsage || !strings.HasPrefix(r.stderr, "sift batch: "+verb+": unknown flag \"--bogus\"") ||
				!strings.HasSuffix(r.stderr, "\nRun \"sift batch "+verb+" --help\" for details.\n") {
				t.Errorf("%s --bogus: exit %d, stderr %q", verb, r.code, r.stderr)
			}
			onlyName(t, verb+" --bogus", r.stderr, name)
		}
	})
}

// --version prints the name and the version; it is a flag of the command
// set, given alone, not a command.
func TestCLI_Version(t *testing.T) {
	t.Parallel()
	r := runHost(t, t.Context(), batchcli.Config{}, "", "", "--version")
	if want := "batch " + batchcli.Version() + "\n"; r.code != batchcli.ExitOK || r.stdout != want || r.stderr != "" {
		t.Errorf("default: exit %d, stdout %q, stderr %q; want %q", r.code, r.stdout, r.stderr, want)
	}
	host := batchcli.Config{Name: "sift batch", Version: "v1.4.0"}
	for _, flag := range []string{"--version", "-version"} {
		r := runHost(t, t.Context(), host, "", "", flag)
		if r.code != batchcli.ExitOK || r.stdout != "sift batch v1.4.0\n" || r.stderr != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %q", flag, r.code, r.stdout, r.stderr, "sift batch v1.4.0\n")
		}
	}
	f := func(wantInStderr string, args ...string) {
		t.Helper()
		r := runHost(t, t.Context(), host, "", "", args...)
		if r.code != batchcli.ExitUsage || r.stdout != "" || !strings.HasPrefix(r.stderr, wantInStderr) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q", args, r.code, r.stdout, r.stderr, wantInStderr)
		}
	}
	f(`sift batch: unexpected argument "list" after --version`, "--version", "list")
	f(`sift batch: unknown command "version"`, "version")
	f(`sift batch: status: unknown flag "--version"`, "status", "j", "--version")
}

func TestParse_HostFlags(t *testing.T) {
	t.Parallel()
	if got, err := batchcli.Parse([]string{"--version"}); err != nil || got != (batchcli.Command{Verb: batchcli.VerbVersion}) {
		t.Errorf("Parse(--version) = %+v, %v", got, err)
	}
	f := func(args, wantFlag, wantMsg string) {
		t.Helper()
		_, err := batchcli.Parse(strings.Fields(args))
		ue, ok := errors.AsType[*batchcli.UsageError](err)
		if !ok {
			t.Fatalf("Parse(%q) error = %v, want a UsageError", args, err)
		}
		if ue.Flag != wantFlag || ue.Error() != wantMsg {
			t.Errorf("Parse(%q) = Flag %q, %q; want %q, %q", args, ue.Flag, ue.Error(), wantFlag, wantMsg)
		}
	}
	f("list --key K", "--key", `list: unknown flag "--key" (list takes --limit, --metadata)`)
	// The value of a flag may be a key: it is never repeated.
	f("list --key=s3cret", "--key", `list: unknown flag "--key" (list takes --limit, --metadata)`)
	f("status abc -server http://a.test", "-server", `status: unknown flag "-server" (status takes --failed, --results, --wait)`)
	f("results abc --bogus", "--bogus", `results: unknown flag "--bogus" (results takes --after, --failed, --follow)`)
	f("cancel abc --wait", "--wait", `cancel: unknown flag "--wait" (cancel takes no flags)`)
	f("status", "", "status: missing <id>")
}

// A global flag of the host given after the command is an error that says
// where it goes, when the host declares its global flags.
func TestCLI_GlobalFlagAfterCommand(t *testing.T) {
	t.Parallel()
	cfg := batchcli.Config{GlobalFlags: []string{"--server URL", "--key KEY"}}
	r := runHost(t, t.Context(), cfg, "", "", "list", "--key", "K")
	want := `batch: list: unknown flag "--key" (list takes --limit, --metadata)
hint: global flags such as --key go before the command: batch --key KEY list
usage: batch list [--limit N] [--metadata KEY=VALUE[,KEY=VALUE…]]
Run "batch list --help" for details.
`
	if r.code != batchcli.ExitUsage || r.stderr != want || r.stdout != "" {
		t.Errorf("list --key K: exit %d, stdout %q, stderr\n%s\nwant 2 and\n%s", r.code, r.stdout, r.stderr, want)
	}

	f := func(cfg batchcli.Config, args []string, want ...string) {
		t.Helper()
		r := runHost(t, t.Context(), cfg, "", "", args...)
		if r.code != batchcli.ExitUsage {
			t.Errorf("%q: exit %d, want 2", args, r.code)
		}
		for _, w := range want {
			if neg, ok := strings.CutPrefix(w, "!"); ok {
				if strings.Contains(r.stderr, neg) {
					t.Errorf("%q: stderr holds %q:\n%s", args, neg, r.stderr)
				}
			} else if !strings.Contains(r.stderr, w) {
				t.Errorf("%q: stderr lacks %q:\n%s", args, w, r.stderr)
			}
		}
	}
	// Any spelling of the flag; the hint shows the placeholder, never the
	// value given; "…" stands for the command's arguments.
	f(cfg, []string{"status", "abc", "--wait", "-server=http://secret.test"},
		"batch: status: unknown flag \"-server\"",
		"\nhint: global flags such as --server go before the command: batch --server URL status …\n",
		"!secret.test")
	f(cfg, []string{"submit", "--key=s3cret", "-"},
		"\nhint: global flags such as --key go before the command: batch --key KEY submit …\n", "!s3cret")
	// A flag the host does not declare is a typo: no hint.
	f(cfg, []string{"list", "--bogus"}, `batch: list: unknown flag "--bogus" (list takes --limit, --metadata)`, "!hint:")
	// Without GlobalFlags, no hint.
	f(batchcli.Config{}, []string{"list", "--key", "K"}, `batch: list: unknown flag "--key" (list takes --limit, --metadata)`, "!hint:")
	// A mounted CLI names itself.
	sift := batchcli.Config{Name: "sift batch", GlobalFlags: []string{"--profile NAME", "--verbose"}}
	f(sift, []string{"cancel", "j", "--profile", "work"},
		"sift batch: cancel: unknown flag \"--profile\" (cancel takes no flags)\n"+
			"hint: global flags such as --profile go before the command: sift batch --profile NAME cancel …\n"+
			"usage: sift batch cancel <id>\n", "!work")
	f(sift, []string{"list", "--verbose"}, "hint: global flags such as --verbose go before the command: sift batch --verbose list\n")
}
