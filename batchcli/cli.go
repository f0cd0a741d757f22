package batchcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
)

// Config configures a [CLI].
type Config struct {
	// Name is the command name as the user types it, such as "sift batch"
	// for a host that mounts the commands as "sift batch …". The usage,
	// each command's help, every error line and every command line the CLI
	// suggests start with it. Defaults to [DefaultName].
	Name string
	// Version is what "<Name> --version" prints after the name. Defaults
	// to [Version], the version of batchkit built into the program; a host
	// may pass its own, so that "sift batch --version" agrees with "sift
	// --version".
	Version string
	// GlobalFlags are the host's own flags, the ones typed between Name
	// and the command, as its usage writes them, with a placeholder for a
	// value: "--server URL", "--key KEY". Given one of them after the
	// command ("batch list --key K"), the usage error says where it goes:
	// "global flags such as --key go before the command: batch --key KEY
	// list". The hint shows the placeholder, never what the user typed.
	// Without GlobalFlags the error only says that the command takes no
	// such flag.
	GlobalFlags []string
	// Client talks to the server. Required by every command but help and
	// --version.
	Client *batchhttp.Client
	// Options are the per-target options the server's runner takes, so
	// that "submit" refuses locally what the server would (see
	// [batch.OptionSet]). Defaults to none: a target is a URL alone.
	Options batch.OptionSet
	// Stdin is read by "submit -". Defaults to os.Stdin.
	Stdin io.Reader
	// Stdout receives the JSON bodies. Defaults to os.Stdout.
	Stdout io.Writer
	// Stderr receives errors and --wait progress. Defaults to os.Stderr.
	Stderr io.Writer
	// IsTerminal reports whether w is a terminal. When both Stdout and
	// Stderr are, --wait redraws one progress line on Stderr; otherwise it
	// prints a line per change. Defaults to checking for a character device.
	IsTerminal func(w io.Writer) bool
	// PollWait is how long one long-poll of --wait may wait. Defaults to
	// 30s.
	PollWait time.Duration
	// ReadFile reads submit's input file. Defaults to os.ReadFile.
	ReadFile func(name string) ([]byte, error)
	// KeyHint is the hint printed with a 401 answer: how to pass the key
	// to this CLI. Defaults to [DefaultKeyHint]; a host that takes the key
	// another way says so here.
	KeyHint string
}

// DefaultName is the [Config.Name] of a CLI that names none: the name of
// the example CLI.
const DefaultName = "batch"

// DefaultKeyHint is the [Config.KeyHint] of a CLI that takes its key as
// the example CLI does.
const DefaultKeyHint = "pass the key with --key KEY or in the BATCH_KEY environment variable"

// CLI runs batch commands. Create one with [New].
type CLI struct {
	cfg Config
}

// New returns a CLI for cfg, filling its defaults.
func New(cfg Config) *CLI {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.Version == "" {
		cfg.Version = Version()
	}
	if cfg.Stdin == nil {
		cfg.Stdin = os.Stdin
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	if cfg.IsTerminal == nil {
		cfg.IsTerminal = isTerminal
	}
	if cfg.PollWait <= 0 {
		cfg.PollWait = 30 * time.Second
	}
	if cfg.ReadFile == nil {
		cfg.ReadFile = os.ReadFile
	}
	if cfg.KeyHint == "" {
		cfg.KeyHint = DefaultKeyHint
	}
	return &CLI{cfg: cfg}
}

// ErrReported is returned (wrapped) by [CLI.Run] once it has written the
// error to Stderr, so the host need not print it again. Every line it
// writes starts with [Config.Name] ("sift batch: not found (HTTP 404)") or
// continues one that does ("hint: …").
var ErrReported = errors.New("batchcli: error reported")

// Run parses args (the arguments after the command name, e.g.
// ["status", id, "--wait"]) and runs the command; "--help" prints the
// usage and "--version" the name and version, on Stdout. It writes the error to
// Stderr itself and returns it wrapped in [ErrReported]; [ExitCode] maps
// it to the exit code. If ctx is cancelled (the host's Ctrl-C), Run ends
// with a short note of what became of the request, and ExitCode gives
// [ExitInterrupted].
func (c *CLI) Run(ctx context.Context, args []string) error {
	cmd, err := Parse(args)
	if err == nil {
		err = c.run(ctx, cmd)
	}
	if err == nil {
		return nil
	}
	_, usage := errors.AsType[*UsageError](err)
	_, ended := errors.AsType[*jobError](err)
	if errors.Is(ctx.Err(), context.Canceled) && !usage && !ended {
		err = &interruptedError{err: err, note: interruptNote(c.cfg.Name, cmd)}
	}
	c.report(err)
	return fmt.Errorf("%w: %w", ErrReported, err)
}

// report writes err to Stderr for a person: the server's message and hint,
// or what went wrong on the way, never a raw "context canceled".
func (c *CLI) report(err error) {
	w, name := c.cfg.Stderr, c.cfg.Name
	if ie, ok := errors.AsType[*interruptedError](err); ok {
		if ie.note != "" {
			fmt.Fprintf(w, "%s: interrupted; %s\n", name, ie.note)
		} else {
			fmt.Fprintf(w, "%s: interrupted\n", name)
		}
		return
	}
	if ue, ok := errors.AsType[*UsageError](err); ok {
		if ue.Verb == "" {
			fmt.Fprintf(w, "%s: %s\n\n%s", name, ue, UsageFor(name))
			return
		}
		fmt.Fprintf(w, "%s: %s\n", name, ue)
		if hint := c.globalFlagHint(ue); hint != "" {
			fmt.Fprintf(w, "hint: %s\n", hint)
		}
		fmt.Fprintf(w, "%s\nRun \"%s %s --help\" for details.\n", verbs[ue.Verb].synopsis(name), name, ue.Verb)
		return
	}
	if ae, ok := errors.AsType[*batchhttp.APIError](err); ok {
		fmt.Fprintf(w, "%s: %s (HTTP %d)\n", name, printable(ae.Message), ae.StatusCode)
		hint := printable(ae.Hint)
		if ae.StatusCode == http.StatusUnauthorized {
			// The server's hint speaks HTTP ("send Authorization: Bearer");
			// the user needs this CLI's way of passing the key.
			hint = c.cfg.KeyHint
		}
		if hint != "" {
			fmt.Fprintf(w, "hint: %s\n", hint)
		}
		if ae.RetryAfter > 0 {
			fmt.Fprintf(w, "retry after: %s\n", ae.RetryAfter)
		}
		return
	}
	if ue, ok := errors.AsType[*url.Error](err); ok {
		// The request's URL holds a job id and a query; the server's
		// origin is what the user gave.
		origin := "the server"
		if u, perr := url.Parse(ue.URL); perr == nil && u.Host != "" {
			origin = u.Scheme + "://" + u.Host
		}
		if ue.Timeout() {
			fmt.Fprintf(w, "%s: no answer from %s in time: %s\n", name, printable(origin), printable(ue.Err.Error()))
		} else {
			fmt.Fprintf(w, "%s: no answer from %s: %s\n", name, printable(origin), printable(ue.Err.Error()))
		}
		return
	}
	fmt.Fprintf(w, "%s: %s\n", name, printable(err.Error()))
}

// globalFlagHint says where a global flag goes when ue is one of
// [Config.GlobalFlags] given after the command: "global flags such as
// --key go before the command: batch --key KEY list". It is empty for any
// other error, and for a flag the host does not declare (a typo of one of
// the command's flags, most likely).
func (c *CLI) globalFlagHint(ue *UsageError) string {
	given := strings.TrimLeft(ue.Flag, "-")
	if given == "" {
		return ""
	}
	for _, g := range c.cfg.GlobalFlags {
		flag, _, _ := strings.Cut(strings.TrimSpace(g), " ")
		if strings.TrimLeft(flag, "-") != given {
			continue
		}
		line := c.cfg.Name + " " + strings.TrimSpace(g) + " " + ue.Verb
		if len(verbs[ue.Verb].args) > 0 {
			line += " …"
		}
		return fmt.Sprintf("global flags such as %s go before the command: %s", flag, line)
	}
	return ""
}

func (c *CLI) run(ctx context.Context, cmd Command) error {
	switch cmd.Verb {
	case VerbHelp:
		_, err := io.WriteString(c.cfg.Stdout, helpText(c.cfg.Name, cmd.Topic))
		return err
	case VerbVersion:
		_, err := fmt.Fprintf(c.cfg.Stdout, "%s %s\n", c.cfg.Name, c.cfg.Version)
		return err
	}
	if c.cfg.Client == nil {
		return errors.New("no server client configured")
	}
	switch cmd.Verb {
	case VerbSubmit:
		return c.submit(ctx, cmd)
	case VerbStatus:
		return c.status(ctx, cmd)
	case VerbResult:
		resp, err := c.cfg.Client.Result(ctx, cmd.ID, cmd.Idx)
		if err != nil {
			return fromClient(err)
		}
		return c.print(resp)
	case VerbRetry:
		resp, err := c.cfg.Client.Retry(ctx, cmd.ID)
		if err != nil {
			return fromClient(err)
		}
		return c.print(resp)
	case VerbResults:
		return c.results(ctx, cmd)
	case VerbCancel:
		resp, err := c.cfg.Client.Cancel(ctx, cmd.ID)
		if err != nil {
			return fromClient(err)
		}
		return c.print(resp)
	case VerbList:
		resp, err := c.cfg.Client.ListWith(ctx, batchhttp.ListQuery{Limit: cmd.Limit, Metadata: cmd.Labels()})
		if err != nil {
			return fromClient(err)
		}
		return c.print(resp)
	}
	return usagef("", "unknown command %q", cmd.Verb)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
