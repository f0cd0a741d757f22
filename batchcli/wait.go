package batchcli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
)

// wait follows job id with the long-poll until it is finished, showing
// progress on Stderr, and returns its last summary (without results).
func (c *CLI) wait(ctx context.Context, id string) (batchhttp.StatusResponse, error) {
	// A live line only for a person watching: progress goes to Stderr, and
	// a piped Stdout means a program reads the answer.
	p := &progress{w: c.cfg.Stderr, live: c.cfg.IsTerminal(c.cfg.Stdout) && c.cfg.IsTerminal(c.cfg.Stderr), start: time.Now()}
	defer p.end()

	// One poll is in flight at a time, in its own goroutine, so that the
	// clock can tick while a long-poll waits for a change. wait returns only
	// once the poll in flight has answered (at once, if ctx is cancelled).
	type answer struct {
		resp batchhttp.StatusResponse
		err  error
	}
	answers := make(chan answer, 1)
	poll := func(q batchhttp.StatusQuery) {
		go func() {
			resp, err := c.cfg.Client.Status(ctx, id, q)
			answers <- answer{resp, err}
		}()
	}
	var tick <-chan time.Time
	if p.live {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		tick = t.C
	}
	poll(batchhttp.StatusQuery{}) // the first read answers at once
	for {
		select {
		case <-tick:
			p.draw()
		case a := <-answers:
			if a.err != nil {
				return a.resp, fromClient(a.err)
			}
			p.update(a.resp)
			if a.resp.Status.Finished() {
				return a.resp, nil
			}
			since := a.resp.TargetsDone
			poll(batchhttp.StatusQuery{Wait: c.cfg.PollWait, Since: &since})
		}
	}
}

// progress shows a job's progress: on a terminal one line redrawn on every
// answer and every second, "3 ok / 1 failed / 32 total · 00:41 · running";
// elsewhere the same line, printed once per change of the counts.
type progress struct {
	w     io.Writer
	live  bool
	start time.Time
	s     *batchhttp.StatusResponse // the last answer, nil before the first
	shown string                    // what was last printed, without the clock
	drawn bool                      // a live line is on the screen
}

func (p *progress) update(s batchhttp.StatusResponse) {
	p.s = &s
	if p.live {
		p.draw()
		return
	}
	if c := p.counts(); c != p.shown {
		fmt.Fprintln(p.w, p.line())
		p.shown = c
	}
}

// draw redraws the live line with the time taken so far.
func (p *progress) draw() {
	if p.s == nil {
		return
	}
	fmt.Fprintf(p.w, "\r\033[K%s", p.line())
	p.drawn = true
}

// end moves past the live line, so that what follows starts on a line of
// its own.
func (p *progress) end() {
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}

func (p *progress) counts() string {
	ok, failed := counts(*p.s)
	return fmt.Sprintf("%d ok / %d failed / %d total", ok, failed, p.s.TargetsTotal)
}

func (p *progress) line() string {
	secs := int(time.Since(p.start).Seconds())
	return fmt.Sprintf("%s · %02d:%02d · %s", p.counts(), secs/60, secs%60, printable(string(p.s.Status)))
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
