package batch_test

import (
	"context"
	"fmt"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// A lenient submit: the targets it refuses end at once at their idx,
// never fetched, and the others are fetched. The host's own refusals
// (here a pre-check's) join the runner's.
func ExampleOnInvalid() {
	r, err := batch.New(batch.Config{Store: batchtest.NewStore(), Fetch: batchtest.StaticFetcher("hello")})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := r.Start(ctx); err != nil {
		panic(err)
	}
	defer r.Close(context.Background())
	caller := batch.Caller{Name: "agent-1"}

	targets := []batch.Target{{URL: "https://example.test/a"}, {URL: ""}, {URL: "http://127.0.0.1/"}}
	job, _, err := r.SubmitWith(ctx, caller, targets, batch.SubmitOptions{
		OnInvalid: batch.OnInvalidSkip,
		Refused:   []batch.Refusal{{Idx: 2, Outcome: batch.OutcomeBlocked, Error: "blocked: loopback address"}},
	})
	if err != nil {
		panic(err)
	}
	for _, s := range job.Skipped {
		fmt.Println("skipped", s.Idx, s.Outcome, s.Error)
	}
	info, err := r.Wait(ctx, caller, job.ID, batch.WaitOptions{Timeout: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	for _, t := range info.Targets {
		fmt.Println(t.Idx, t.Status, t.Outcome, t.Attempts)
	}
	fmt.Println(info.Status)
	// Output:
	// skipped 1 invalid invalid target: empty url
	// skipped 2 blocked blocked: loopback address
	// 0 done ok 1
	// 1 failed invalid 0
	// 2 failed blocked 0
	// partial
}
