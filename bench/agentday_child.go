package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"
)

// A case's nodes, run as a child process of this binary (or, in tests,
// in this process), and the line protocol the parent speaks with them.

// nodeChild is a case's running nodes: a child process, or (in tests)
// runNodes in this one.
type nodeChild struct {
	in    io.WriteCloser
	out   *json.Decoder
	ready nodeReady
	wait  func() error // after in is closed: the nodes' end
	ended bool
}

func startNodes(ctx context.Context, cfg nodeConfig) (*nodeChild, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, childFlag, "agentday", string(b))
	cmd.Stderr = os.Stderr
	c := &nodeChild{}
	if c.in, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	c.out = json.NewDecoder(bufio.NewReader(stdout))
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c.wait = func() error {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			return err
		case <-time.After(time.Minute):
			cmd.Process.Kill()
			<-done
			return errors.New("did not exit within a minute of their input's end")
		}
	}
	return c, c.readReady()
}

// startNodesHere runs the nodes in this process, for tests.
func startNodesHere(_ context.Context, cfg nodeConfig) (*nodeChild, error) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := runNodes(cfg, inR, outW)
		outW.CloseWithError(cmp.Or(err, io.EOF))
		done <- err
	}()
	c := &nodeChild{in: inW, out: json.NewDecoder(outR), wait: func() error { return <-done }}
	return c, c.readReady()
}

func (c *nodeChild) readReady() error {
	if err := c.out.Decode(&c.ready); err != nil {
		c.stop()
		return fmt.Errorf("nodes did not start: %w", err)
	}
	return nil
}

// command sends cmd and decodes its answer into v ("ok" when v is nil).
func (c *nodeChild) command(cmd string, v any) error {
	if _, err := io.WriteString(c.in, cmd+"\n"); err != nil {
		return fmt.Errorf("nodes: %s: %w", cmd, err)
	}
	if v == nil {
		var ok string
		if err := c.out.Decode(&ok); err != nil || ok != "ok" {
			return fmt.Errorf("nodes: %s: %q, %w", cmd, ok, err)
		}
		return nil
	}
	if err := c.out.Decode(v); err != nil {
		return fmt.Errorf("nodes: %s: %w", cmd, err)
	}
	return nil
}

// stop closes the nodes' input, which closes them, and waits for their
// end (a child process is killed after a minute).
func (c *nodeChild) stop() error {
	if c.ended {
		return nil
	}
	c.ended = true
	c.in.Close()
	if err := c.wait(); err != nil {
		return fmt.Errorf("nodes: %w", err)
	}
	return nil
}
