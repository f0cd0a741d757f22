// Package batchcli is the batch command set a host CLI mounts: submit,
// status, result, cancel and list, spoken over HTTP through a
// [batchhttp.Client]. It never exits the process: [CLI.Run] returns an error
// and the host's main picks the exit code with [ExitCode] (0 ok, 1 the server
// said no, 2 usage).
//
// Output is the server's JSON body, indented, so that an agent can parse it;
// errors go to standard error with the server's message and hint. status
// --wait follows the job with the long-poll until it is finished; on a
// terminal it redraws one progress line (12/32 done · 1 failed · 00:41), and
// elsewhere it prints one line per change.
package batchcli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/siftfetch/batchkit/batchhttp"
)

// Config configures a [CLI].
type Config struct {
	// Client talks to the server. Required.
	Client *batchhttp.Client
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
}

// CLI runs batch commands. Create one with [New].
type CLI struct {
	cfg Config
}

// New returns a CLI for cfg, filling its defaults.
func New(cfg Config) *CLI {
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
	return &CLI{cfg: cfg}
}

// ErrReported is returned (wrapped) by [CLI.Run] once it has written the
// error to Stderr, so the host need not print it again.
var ErrReported = errors.New("batchcli: error reported")

// Run parses args (the arguments after the command name, e.g.
// ["status", id, "--wait"]) and runs the command. It writes the error to
// Stderr itself and returns it; see [ExitCode].
func (c *CLI) Run(ctx context.Context, args []string) error {
	err := c.run(ctx, args)
	if err == nil {
		return nil
	}
	var ue *UsageError
	var ae *batchhttp.APIError
	switch {
	case errors.As(err, &ue) && ue.Verb != "":
		fmt.Fprintf(c.cfg.Stderr, "batch: %s\n%s\nRun \"batch %s --help\" for details.\n", ue, verbs[ue.Verb].synopsis(), ue.Verb)
	case errors.As(err, &ue):
		fmt.Fprintf(c.cfg.Stderr, "batch: %s\n\n%s", ue, Usage)
	case errors.As(err, &ae):
		fmt.Fprintf(c.cfg.Stderr, "batch: %s (HTTP %d)\n", ae.Message, ae.StatusCode)
		if ae.Hint != "" {
			fmt.Fprintf(c.cfg.Stderr, "hint: %s\n", ae.Hint)
		}
		if ae.RetryAfter > 0 {
			fmt.Fprintf(c.cfg.Stderr, "retry after: %s\n", ae.RetryAfter)
		}
	default:
		fmt.Fprintf(c.cfg.Stderr, "batch: %v\n", err)
	}
	return fmt.Errorf("%w: %w", ErrReported, err)
}

func (c *CLI) run(ctx context.Context, args []string) error {
	cmd, err := Parse(args)
	if err != nil {
		return err
	}
	if cmd.Verb == VerbHelp {
		_, err := io.WriteString(c.cfg.Stdout, helpText(cmd.Topic))
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
			return err
		}
		return c.print(resp)
	case VerbCancel:
		resp, err := c.cfg.Client.Cancel(ctx, cmd.ID)
		if err != nil {
			return err
		}
		return c.print(resp)
	case VerbList:
		resp, err := c.cfg.Client.List(ctx, cmd.Limit)
		if err != nil {
			return err
		}
		return c.print(resp)
	}
	return usagef("", "unknown command %q", cmd.Verb)
}

// print writes v as indented JSON to Stdout.
func (c *CLI) print(v any) error {
	enc := json.NewEncoder(c.cfg.Stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
