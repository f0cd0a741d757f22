package batchhttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchhttp"
)

// A runner that delivers completion webhooks with the Standard Webhooks
// sender, and a caller's receiver that verifies them with the caller's own
// secret, which the operator derived from the deployment's master secret
// and gave the caller. (A host gives the sender a
// client with its fetcher's connect-time guard; this receiver is on
// loopback, which such a client refuses, so the example uses the default
// client.)
func ExampleNewWebhookSender() {
	secret, err := batchhttp.NewWebhookSecret() // the deployment's master secret: it keeps its own, whsec_…
	if err != nil {
		log.Fatal(err)
	}
	caller := batch.Caller{Name: "agent-1"}
	callerSecret, err := batchhttp.CallerWebhookSecret(secret, caller.Name) // agent-1's alone
	if err != nil {
		log.Fatal(err)
	}
	got := make(chan batchhttp.WebhookPayload, 1)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := batchhttp.VerifyWebhook(callerSecret, r.Header, body, time.Now()); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var p batchhttp.WebhookPayload
		if err := json.Unmarshal(body, &p); err != nil {
			http.Error(w, "bad payload", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent) // answer at once; do the work later
		got <- p
	}))
	defer receiver.Close()

	sender, err := batchhttp.NewWebhookSender(http.DefaultClient, secret)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	runner, err := batch.New(batch.Config{
		Store:   batchtest.NewStore(),
		Fetch:   batchtest.StaticFetcher("hello"),
		Deliver: sender.Deliver,
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := runner.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer runner.Close(ctx)

	targets := []batch.Target{{URL: "https://example.test/a"}, {URL: "https://example.test/b"}}
	job, _, err := runner.SubmitWith(ctx, caller, targets, batch.SubmitOptions{WebhookURL: receiver.URL + "/hooks/batch"})
	if err != nil {
		log.Fatal(err)
	}
	p := <-got
	fmt.Println(p.Type, p.Data.JobID == job.ID, p.Data.Status, p.Data.TargetsOK, "of", p.Data.TargetsTotal)
	// Output: batch.finished true done 2 of 2
}
