package batch_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// A fetcher whose gates are full returns batch.ErrFetchBusy (or any error
// with outcome busy). That is no failure: the runner backs off and fetches
// the same target again. A target still busy after Config.BusyWait fails
// with outcome busy, which is retryable.
func ExampleErrFetchBusy() {
	var gateCalls atomic.Int64
	fetch := func(ctx context.Context, _ batch.Caller, t batch.Target) (batch.Result, error) {
		switch t.URL {
		case "https://example.test/gate": // busy twice, then free
			if gateCalls.Add(1) <= 2 {
				return batch.Result{}, batch.ErrFetchBusy
			}
			return batch.Result{Content: "ok"}, nil
		default: // never free; the hint reaches the caller
			return batch.Result{}, batch.NewFetchError(batch.OutcomeBusy, "browser", errors.New("all browser slots in use"))
		}
	}
	r, err := batch.New(batch.Config{
		Store:    batchtest.NewStore(),
		Fetch:    fetch,
		BusyWait: batch.Duration(time.Second), // the total back-off for one target
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := r.Start(ctx); err != nil {
		panic(err)
	}
	defer r.Close(ctx)

	caller := batch.Caller{Name: "agent-1"}
	job, _, err := r.Submit(ctx, caller, []batch.Target{
		{URL: "https://example.test/gate"},
		{URL: "https://example.test/render"},
	})
	if err != nil {
		panic(err)
	}
	info, err := r.Wait(ctx, caller, job.ID, batch.WaitOptions{Timeout: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	fmt.Println("job:", info.Status)
	fmt.Println("gate fetched", gateCalls.Load(), "times")
	for _, t := range info.Targets {
		fmt.Printf("%d %s outcome=%s hint=%q retryable=%t\n", t.Idx, t.Status, t.Outcome, t.Hint, t.Outcome.Retryable())
		if t.Error != "" {
			fmt.Println("  error:", t.Error)
		}
	}
	// Output:
	// job: partial
	// gate fetched 3 times
	// 0 done outcome=ok hint="" retryable=false
	// 1 failed outcome=busy hint="browser" retryable=true
	//   error: busy: fetcher still busy after 1s
}
