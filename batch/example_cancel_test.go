package batch_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// Cancelling a running job: the job is cancelled at once, the target in
// flight finishes and is stored, and no later target starts. Cancelling it
// again is ErrFinished.
func ExampleRunner_Cancel() {
	fetcher := batchtest.NewBlockingFetcher() // each fetch waits for Release
	r, err := batch.New(batch.Config{Store: batchtest.NewStore(), Fetch: fetcher.Fetch})
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
		{URL: "https://example.test/a"},
		{URL: "https://example.test/b"},
		{URL: "https://example.test/c"},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("fetching:", <-fetcher.Started)

	if err := r.Cancel(ctx, caller, job.ID); err != nil {
		panic(err)
	}
	info, _ := r.Status(ctx, caller, job.ID, batch.StatusOptions{})
	fmt.Println("after cancel:", info.Status)

	fetcher.Release() // the target in flight returns, and is stored
	info = waitStored(ctx, r, caller, job.ID, 0)
	for _, t := range info.Targets {
		fmt.Println(t.Idx, t.Status)
	}
	fmt.Println("fetched:", fetcher.Calls())

	err = r.Cancel(ctx, caller, job.ID)
	fmt.Println("cancel again:", errors.Is(err, batch.ErrFinished))
	// Output:
	// fetching: https://example.test/a
	// after cancel: cancelled
	// 0 done
	// 1 pending
	// 2 pending
	// fetched: [https://example.test/a]
	// cancel again: true
}

// waitStored polls the job until its target idx is no longer running, and
// returns the job with its targets. A cancelled job is finished at once, so
// [batch.Runner.Wait] returns before the target in flight is stored.
func waitStored(ctx context.Context, r *batch.Runner, caller batch.Caller, id string, idx int) batch.JobInfo {
	for {
		info, err := r.Status(ctx, caller, id, batch.StatusOptions{})
		if err != nil {
			panic(err)
		}
		if info.Targets[idx].Status != batch.TargetRunning {
			return info
		}
		time.Sleep(time.Millisecond)
	}
}
