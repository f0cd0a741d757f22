package batchhttp_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/batchhttp/batchserver"
)

// A host serves the API under a prefix of its own.
func ExampleHandler_Mount() {
	runner := startRunner(batch.Config{})
	defer runner.Close(context.Background())
	auth, err := batchserver.NewKeyAuth([]batchserver.Key{{Name: "agent-1", Secret: "s3cret"}})
	if err != nil {
		log.Fatal(err)
	}
	h, err := batchhttp.NewHandler(runner, &batchhttp.HandlerConfig{Authenticate: auth, Prefix: "/api"})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	h.Mount(mux) // on /api/v1/batch and /api/v1/batch/
	srv := httptest.NewServer(mux)
	defer srv.Close()

	client, err := batchhttp.NewClient(srv.URL+"/api", "s3cret", nil) // the client appends /v1/batch…
	if err != nil {
		log.Fatal(err)
	}
	sub, err := client.Submit(context.Background(), []batch.Target{{URL: "https://example.com/"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(sub.Status, sub.Targets)
	for _, r := range batchhttp.Routes() {
		fmt.Println(r.Method, "/api"+r.Path, r.Name)
	}
	// Output:
	// queued 1
	// POST /api/v1/batch submitBatch
	// GET /api/v1/batch listBatches
	// GET /api/v1/batch/{id} getBatch
	// DELETE /api/v1/batch/{id} cancelBatch
	// GET /api/v1/batch/{id}/{idx} getBatchResult
	// GET /api/v1/batch/{id}/results streamBatchResults
	// POST /api/v1/batch/{id}/retry retryBatch
	// GET /api/v1/batch/webhook-secret getWebhookSecret
}

// startRunner starts a runner on cfg over the in-memory test store, with
// a fetcher that answers "hello".
func startRunner(cfg batch.Config) *batch.Runner {
	cfg.Store, cfg.Fetch = batchtest.NewStore(), batchtest.StaticFetcher("hello")
	r, err := batch.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
	return r
}
