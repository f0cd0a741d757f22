package batchcli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"strings"

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
	req, err := ParseSubmit(in, c.cfg.Options)
	if err != nil {
		return err
	}
	if cmd.Deadline != "" {
		req.Deadline = cmd.Deadline
	}
	if cmd.SkipInvalid {
		req.OnInvalid = batch.OnInvalidSkip
	}
	if cmd.Events != "" {
		if req.Webhook == nil {
			return usagef(VerbSubmit, `--events needs a webhook in the input: {"targets": […], "webhook": {"url": "…"}}`)
		}
		req.Webhook.Events = strings.Split(cmd.Events, ",")
	}
	resp, err := c.cfg.Client.SubmitWith(ctx, req)
	if err != nil {
		return fromClient(err)
	}
	return c.print(resp)
}

func (c *CLI) status(ctx context.Context, cmd Command) error {
	q := batchhttp.StatusQuery{Results: cmd.Results, Failed: cmd.Failed}
	if !cmd.Wait {
		resp, err := c.cfg.Client.Status(ctx, cmd.ID, q)
		if err != nil {
			return fromClient(err)
		}
		return c.print(resp)
	}
	// Follow the job without results, then fetch them once, if asked.
	resp, err := c.wait(ctx, cmd.ID)
	if err != nil {
		return err
	}
	if cmd.Results || cmd.Failed {
		if resp, err = c.cfg.Client.Status(ctx, cmd.ID, q); err != nil {
			return fromClient(err)
		}
	}
	if err := c.print(resp); err != nil {
		return err
	}
	if resp.Status != batch.JobDone {
		return &jobError{s: resp}
	}
	return nil
}

// results prints the results stream a line at a time, each line written as
// it arrives.
func (c *CLI) results(ctx context.Context, cmd Command) error {
	q := batchhttp.ResultsQuery{Follow: cmd.Follow, After: cmd.After, Failed: cmd.Failed}
	for t, err := range c.cfg.Client.Results(ctx, cmd.ID, q) {
		if err != nil {
			return fromClient(err)
		}
		if err := c.printLine(t); err != nil {
			return err
		}
	}
	return nil
}
