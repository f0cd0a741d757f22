package batch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// A host whose fetch takes its own per-target options declares them; the
// runner refuses targets that do not fit and hands the rest to the fetch.
func ExampleOptionSet() {
	options := batch.OptionSet{Fields: []batch.OptionField{
		{Name: "wait_for", Type: batch.OptionString, Description: "A CSS selector to wait for."},
		{Name: "format", Type: batch.OptionString, Enum: []string{"", "text", "html"}},
		{Name: "full_page", Type: batch.OptionBool},
	}}
	fetch := func(_ context.Context, _ batch.Caller, t batch.Target) (batch.Result, error) {
		var o struct {
			WaitFor  string `json:"wait_for"`
			Format   string `json:"format"`
			FullPage bool   `json:"full_page"`
		}
		if len(t.Options) > 0 {
			if err := json.Unmarshal(t.Options, &o); err != nil {
				return batch.Result{}, err
			}
		}
		return batch.Result{Content: fmt.Sprintf("waited for %q, format %q, full page %t", o.WaitFor, o.Format, o.FullPage)}, nil
	}
	r, err := batch.New(batch.Config{Store: batchtest.NewStore(), Fetch: fetch, Options: options})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := r.Start(ctx); err != nil {
		panic(err)
	}
	defer r.Close(context.Background())
	caller := batch.Caller{Name: "agent-1"}

	_, _, err = r.Submit(ctx, caller, []batch.Target{{URL: "https://example.test/", Options: json.RawMessage(`{"format":"pdf"}`)}})
	var te *batch.TargetError
	fmt.Println(errors.As(err, &te), err)

	job, _, err := r.Submit(ctx, caller, []batch.Target{
		{URL: "https://example.test/", Options: json.RawMessage(`{"full_page": true, "wait_for": "#main"}`)},
	})
	if err != nil {
		panic(err)
	}
	info, err := r.Wait(ctx, caller, job.ID, batch.WaitOptions{Timeout: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	res, err := r.Result(ctx, caller, job.ID, 0)
	if err != nil {
		panic(err)
	}
	result, err := batch.DecodeEnvelope(res.Result)
	if err != nil {
		panic(err)
	}
	fmt.Println(info.Status, result.Content)
	// Output:
	// true batch: target 0: unknown format "pdf"
	// done waited for "#main", format "", full page true
}
