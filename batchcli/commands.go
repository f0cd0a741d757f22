package batchcli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
)

func (c *CLI) submit(ctx context.Context, cmd Command) error {
	var in io.Reader = c.cfg.Stdin
	if cmd.File != "-" {
		data, err := c.cfg.ReadFile(cmd.File)
		if pe, ok := errors.AsType[*fs.PathError](err); ok {
			return usagef(VerbSubmit, "cannot read %s: %v", pe.Path, pe.Err)
		}
		if err != nil {
			return usagef(VerbSubmit, "cannot read %s: %v", cmd.File, err)
		}
		in = bytes.NewReader(data)
	}
	targets, err := ParseTargets(in)
	if err != nil {
		return err
	}
	resp, err := c.cfg.Client.Submit(ctx, targets)
	if err != nil {
		return fromClient(err)
	}
	return c.print(resp)
}

func (c *CLI) status(ctx context.Context, cmd Command) error {
	q := batchhttp.StatusQuery{Results: cmd.Results}
	if !cmd.Wait {
		resp, err := c.cfg.Client.Status(ctx, cmd.ID, q)
		if err != nil {
			return fromClient(err)
		}
		return c.print(resp)
	}
	// Follow the job without results, then fetch the final body once.
	start := time.Now()
	// A live line only for a person watching: progress goes to Stderr, and
	// a piped Stdout means a program reads the answer.
	term := c.cfg.IsTerminal(c.cfg.Stdout) && c.cfg.IsTerminal(c.cfg.Stderr)
	last := ""
	since := -1
	for {
		// The first read answers at once; later ones long-poll for a change.
		var poll batchhttp.StatusQuery
		if since >= 0 {
			poll = batchhttp.StatusQuery{Wait: c.cfg.PollWait, Since: &since}
		}
		resp, err := c.cfg.Client.Status(ctx, cmd.ID, poll)
		if err != nil {
			if term && last != "" {
				fmt.Fprintln(c.cfg.Stderr)
			}
			return fromClient(err)
		}
		since = resp.TargetsDone
		line := progressLine(resp, time.Since(start))
		switch {
		case term:
			fmt.Fprintf(c.cfg.Stderr, "\r\033[K%s", line)
		case line != last:
			fmt.Fprintln(c.cfg.Stderr, line)
		}
		last = line
		if resp.Status.Finished() {
			break
		}
	}
	if term {
		fmt.Fprintln(c.cfg.Stderr)
	}
	resp, err := c.cfg.Client.Status(ctx, cmd.ID, q)
	if err != nil {
		return fromClient(err)
	}
	if err := c.print(resp); err != nil {
		return err
	}
	if resp.Status != batch.JobDone {
		return &jobError{s: resp}
	}
	return nil
}

// progressLine renders "12/32 done · 1 failed · 00:41 · running".
func progressLine(s batchhttp.StatusResponse, elapsed time.Duration) string {
	_, failed := counts(s)
	secs := int(elapsed.Seconds())
	return fmt.Sprintf("%d/%d done · %d failed · %02d:%02d · %s",
		s.TargetsDone, s.TargetsTotal, failed, secs/60, secs%60, s.Status)
}

// counts returns how many of the job's targets are done and how many
// failed.
func counts(s batchhttp.StatusResponse) (ok, failed int) {
	for _, t := range s.Targets {
		switch t.Status {
		case batch.TargetDone:
			ok++
		case batch.TargetFailed:
			failed++
		}
	}
	return ok, failed
}
