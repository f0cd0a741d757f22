package batch_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// A job submitted with a webhook gets one event when it finishes. The
// runner hands it to Config.Deliver and retries a failed attempt after
// Config.WebhookBackoff. A fake clock makes the retry come when the
// example moves the clock. In a host, batchhttp.NewWebhookSender is the
// Deliver that POSTs the event, signed.
func ExampleRunner_SubmitWith_webhook() {
	clock := batchtest.NewClock()
	attempts := make(chan batch.WebhookEvent)
	deliver := func(ctx context.Context, ev batch.WebhookEvent) error {
		select {
		case attempts <- ev:
		case <-ctx.Done():
			return ctx.Err()
		}
		if ev.Attempt == 1 {
			return errors.New("receiver answered 503") // the runner retries
		}
		return nil // the receiver took the event
	}
	r, err := batch.New(batch.Config{
		Store:          batchtest.NewStore(),
		Fetch:          batchtest.StaticFetcher("ok"),
		Deliver:        deliver,
		WebhookBackoff: batch.Duration(5 * time.Second),
		PollInterval:   batch.Duration(10 * time.Millisecond), // how often the idle deliverer looks again
		Now:            clock.Now,
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
	job, _, err := r.SubmitWith(ctx, caller,
		[]batch.Target{{URL: "https://example.test/a"}, {URL: "https://example.test/b"}},
		batch.SubmitOptions{WebhookURL: "https://hooks.example.test/batch"})
	if err != nil {
		panic(err)
	}

	ev := <-attempts
	fmt.Println("attempt", ev.Attempt, ev.Type, ev.Status, ev.TargetsOK, "of", ev.TargetsTotal, "ok")
	fmt.Println("same job:", ev.JobID == job.ID, "to:", ev.URL)

	clock.Advance(5 * time.Second) // the retry is due
	ev = <-attempts
	fmt.Println("attempt", ev.Attempt, ev.Type, ev.Status)
	// Output:
	// attempt 1 batch.finished done 2 of 2 ok
	// same job: true to: https://hooks.example.test/batch
	// attempt 2 batch.finished done
}
