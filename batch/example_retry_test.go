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

// A fetcher reports how a target failed with an outcome; the outcome says
// whether trying again can help. Runner.Retry makes a new job of the
// targets that did not end done, and each new target names its idx in the
// old job.
func ExampleRunner_Retry() {
	var flaky atomic.Int64 // the flaky site fails its first fetch only
	fetch := func(ctx context.Context, _ batch.Caller, t batch.Target) (batch.Result, error) {
		switch t.URL {
		case "https://example.test/missing":
			return batch.Result{}, batch.NewFetchError(batch.OutcomeUpstream4xx, "", errors.New("upstream: status 404"))
		case "https://example.test/flaky":
			if flaky.Add(1) == 1 {
				return batch.Result{}, batch.NewFetchError(batch.OutcomeUpstream5xx, "", errors.New("upstream: status 503"))
			}
		}
		return batch.Result{Content: "ok"}, nil
	}
	r, err := batch.New(batch.Config{Store: batchtest.NewStore(), Fetch: fetch})
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
		{URL: "https://example.test/ok"},
		{URL: "https://example.test/flaky"},
		{URL: "https://example.test/missing"},
	})
	if err != nil {
		panic(err)
	}
	info, err := r.Wait(ctx, caller, job.ID, batch.WaitOptions{Timeout: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	fmt.Println("first job:", info.Status)
	for _, t := range info.Targets {
		fmt.Printf("  %d %s outcome=%s retryable=%t\n", t.Idx, t.Status, t.Outcome, t.Outcome.Retryable())
	}

	retry, reused, err := r.Retry(ctx, caller, job.ID)
	if err != nil {
		panic(err)
	}
	fmt.Println("retry of the first job:", retry.RetryOf == job.ID, "reused:", reused)
	info, err = r.Wait(ctx, caller, retry.ID, batch.WaitOptions{Timeout: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	fmt.Println("retry job:", info.Status)
	for _, t := range info.Targets {
		fmt.Printf("  %d (was %d) %s outcome=%s\n", t.Idx, *t.RetryOfIdx, t.URL, t.Outcome)
	}

	again, reused, err := r.Retry(ctx, caller, job.ID) // idempotent while the retry's lease lasts
	if err != nil {
		panic(err)
	}
	fmt.Println("retry again: the same job:", again.ID == retry.ID, "reused:", reused)
	// Output:
	// first job: partial
	//   0 done outcome=ok retryable=false
	//   1 failed outcome=upstream_5xx retryable=true
	//   2 failed outcome=upstream_4xx retryable=false
	// retry of the first job: true reused: false
	// retry job: partial
	//   0 (was 1) https://example.test/flaky outcome=ok
	//   1 (was 2) https://example.test/missing outcome=upstream_4xx
	// retry again: the same job: true reused: true
}
