package batch_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// No log line carries a target URL or an error's text, for any caller. For
// a restricted caller the log line also leaves out how a target failed: it
// says ok=false instead of the outcome. The owner still reads the error.
func ExampleCaller_restricted() {
	fetch := func(ctx context.Context, _ batch.Caller, t batch.Target) (batch.Result, error) {
		return batch.Result{}, batch.NewFetchError(batch.OutcomeUpstream4xx, "", errors.New("upstream: status 404"))
	}
	r, err := batch.New(batch.Config{
		Store:   batchtest.NewStore(),
		Fetch:   fetch,
		Workers: 1, // one job after the other, so that the log lines come in order
		Logger:  targetLines(os.Stdout),
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := r.Start(ctx); err != nil {
		panic(err)
	}

	alice := batch.Caller{Name: "alice"}
	agency := batch.Caller{Name: "agency", Restricted: true}
	var agencyJob string
	for _, c := range []batch.Caller{alice, agency} {
		job, _, err := r.Submit(ctx, c, []batch.Target{{URL: "https://example.test/private?token=abc"}})
		if err != nil {
			panic(err)
		}
		agencyJob = job.ID
	}
	info, err := r.Wait(ctx, agency, agencyJob, batch.WaitOptions{Timeout: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	if err := r.Close(ctx); err != nil { // waits for the last log line
		panic(err)
	}
	fmt.Println("agency reads:", info.Targets[0].Outcome, info.Targets[0].Error)
	// Output:
	// level=INFO msg="batch target finished" caller=alice idx=0 outcome=upstream_4xx
	// level=INFO msg="batch target finished" caller=agency idx=0 ok=false
	// agency reads: upstream_4xx upstream: status 404
}

// targetLines returns a logger that writes the runner's "batch target
// finished" lines to w, without the attributes that change from run to run.
func targetLines(w io.Writer) *slog.Logger {
	drop := map[string]bool{slog.TimeKey: true, "job_id": true, "duration": true}
	return slog.New(slog.NewTextHandler(lineFilter{w, "batch target finished"}, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if drop[a.Key] {
				return slog.Attr{}
			}
			return a
		},
	}))
}

// lineFilter writes only the lines that contain msg.
type lineFilter struct {
	w   io.Writer
	msg string
}

func (f lineFilter) Write(p []byte) (int, error) {
	if strings.Contains(string(p), f.msg) {
		return f.w.Write(p)
	}
	return len(p), nil
}
