package batchcli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
)

func (c *CLI) submit(ctx context.Context, cmd Command) error {
	var in io.Reader = c.cfg.Stdin
	if cmd.File != "-" {
		data, err := c.cfg.ReadFile(cmd.File)
		if err != nil {
			return fmt.Errorf("read targets: %w", err)
		}
		in = bytes.NewReader(data)
	}
	targets, err := ParseTargets(in)
	if err != nil {
		return err
	}
	resp, err := c.cfg.Client.Submit(ctx, targets)
	if err != nil {
		return err
	}
	return c.print(resp)
}

func (c *CLI) status(ctx context.Context, cmd Command) error {
	q := batchhttp.StatusQuery{Results: cmd.Results}
	if !cmd.Wait {
		resp, err := c.cfg.Client.Status(ctx, cmd.ID, q)
		if err != nil {
			return err
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
			return err
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
		return err
	}
	return c.print(resp)
}

// progressLine renders "12/32 done · 1 failed · 00:41 · running".
func progressLine(s batchhttp.StatusResponse, elapsed time.Duration) string {
	failed := 0
	for _, t := range s.Targets {
		if t.Status == batch.TargetFailed {
			failed++
		}
	}
	secs := int(elapsed.Seconds())
	return fmt.Sprintf("%d/%d done · %d failed · %02d:%02d · %s",
		s.TargetsDone, s.TargetsTotal, failed, secs/60, secs%60, s.Status)
}
