package batch_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// A runner with an in-memory store and a fetcher that upper-cases the path:
// submit a list, wait for the job, read each target.
func ExampleRunner() {
	fetch := func(ctx context.Context, c batch.Caller, t batch.Target) (batch.Result, error) {
		if strings.HasSuffix(t.URL, "/missing") {
			return batch.Result{}, batch.NewFetchError(batch.OutcomeUpstream4xx, "", fmt.Errorf("upstream: status 404"))
		}
		return batch.Result{Content: strings.ToUpper(t.URL[len("https://example.test/"):])}, nil
	}
	r, err := batch.New(batch.Config{Store: batchtest.NewStore(), Fetch: fetch, Options: batchsift.Options})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := r.Start(ctx); err != nil {
		panic(err)
	}
	defer r.Close(ctx)

	caller := batch.Caller{Name: "agent-1"}
	job, reused, err := r.Submit(ctx, caller, []batch.Target{
		{URL: "https://example.test/alpha"},
		{URL: "https://example.test/missing"},
		{URL: "https://example.test/gamma", Options: batchsift.Fields{Mode: batchsift.ModeRaw}.JSON()},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("status:", job.Status, "reused:", reused)

	info, err := r.Wait(ctx, caller, job.ID, batch.WaitOptions{Timeout: 10 * time.Second, StatusOptions: batch.StatusOptions{Results: true}})
	if err != nil {
		panic(err)
	}
	fmt.Printf("job %s: %d/%d targets\n", info.Status, info.TargetsDone, info.TargetsTotal)
	for _, t := range info.Targets {
		if t.Status == batch.TargetDone {
			res, _ := batch.DecodeEnvelope(t.Result)
			fmt.Printf("%d %s %q\n", t.Idx, t.Status, res.Content)
		} else {
			fmt.Printf("%d %s %s (%s)\n", t.Idx, t.Status, t.Error, t.Outcome)
		}
	}
	// Output:
	// status: queued reused: false
	// job partial: 3/3 targets
	// 0 done "ALPHA"
	// 1 failed upstream: status 404 (upstream_4xx)
	// 2 done "GAMMA"
}

// Submitting the same list again while the first job's lease is unexpired
// returns the same job.
func ExampleRunner_Submit_idempotent() {
	r, _ := batch.New(batch.Config{Store: batchtest.NewStore(), Fetch: batchtest.StaticFetcher("ok")})
	ctx := context.Background()
	_ = r.Start(ctx)
	defer r.Close(ctx)

	caller := batch.Caller{Name: "agent-1"}
	targets := []batch.Target{{URL: "https://example.test/a"}}
	first, _, _ := r.Submit(ctx, caller, targets)
	second, reused, _ := r.Submit(ctx, caller, targets)
	fmt.Println(first.ID == second.ID, reused)
	// Output: true true
}
