package batchhttp_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchhttp"
)

// A host serves the API under a prefix of its own.
func ExampleHandler_Mount() {
	runner := startRunner(batch.Config{})
	defer runner.Close(context.Background())
	auth, err := batchhttp.NewKeyAuth([]batchhttp.Key{{Name: "agent-1", Secret: "s3cret"}})
	if err != nil {
		log.Fatal(err)
	}
	h, err := batchhttp.NewHandler(runner, &batchhttp.HandlerOpts{Authenticate: auth, Prefix: "/api"})
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

func ExampleParseKeys() {
	keys, err := batchhttp.ParseKeys(strings.NewReader("# callers\nalice=correct-horse-battery\nagency=t0ps3cret-t0ps3cret:restricted\n"))
	if err != nil {
		log.Fatal(err)
	}
	for _, k := range keys {
		fmt.Println(k.Name, k.Restricted)
	}
	_, err = batchhttp.ParseKeys(strings.NewReader("alice=correct-horse-battery\nbob\ncarol=s3cret\n"))
	fmt.Println(err)
	_, err = batchhttp.ParseKeys(strings.NewReader("carol=s3cret\n"))
	fmt.Println(err)
	// Output:
	// alice false
	// agency true
	// line 2: key "…": want NAME=SECRET or NAME=SECRET:restricted
	// line 1: key of "carol": secret shorter than 16 bytes (make one with: openssl rand -hex 16)
}

// A host's GET /metrics: the runner's series and every route's, with
// # HELP and # TYPE lines.
func ExampleNewMetrics() {
	runner := startRunner(batch.Config{MetricsPrefix: "sift_batch"})
	defer runner.Close(context.Background())
	m, err := batchhttp.NewMetrics(batchhttp.MetricsOpts{Prefix: "sift", NoProcessMetrics: true})
	if err != nil {
		log.Fatal(err)
	}
	m.Add(runner.Metrics(), runner.MetricsHelp())
	health := batchhttp.Instrument("/healthz", batchhttp.HealthHandler(), m.Observe, nil)
	health.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/healthz", nil))

	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for line := range strings.Lines(rec.Body.String()) {
		if strings.Contains(line, "sift_http_requests_total") || strings.Contains(line, "sift_batch_queue_depth") {
			fmt.Print(line)
		}
	}
	// Output:
	// # HELP sift_http_requests_total HTTP requests by fixed route label and status.
	// # TYPE sift_http_requests_total counter
	// sift_http_requests_total{route="/healthz",status="200"} 1
	// # HELP sift_batch_queue_depth Batch jobs queued and waiting for a worker.
	// # TYPE sift_batch_queue_depth gauge
	// sift_batch_queue_depth 0
}

// Serve runs a host's mux until its context ends, then closes the runner,
// the requests in flight and the store, in that order.
func ExampleServe() {
	runner := startRunner(batch.Config{})
	mux := http.NewServeMux()
	mux.Handle("GET /readyz", batchhttp.ReadyHandler(runner))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background()) // signal.NotifyContext in a daemon
	done := make(chan error, 1)
	go func() {
		done <- batchhttp.Serve(ctx, ln, batchhttp.ServerOpts{
			Handler: mux, Runner: runner,
			AfterShutdown: func() error { fmt.Println("store closed"); return nil },
		})
	}()
	resp, err := http.Get("http://" + ln.Addr().String() + "/readyz")
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Print(resp.StatusCode, " ", string(body))

	stop() // SIGTERM
	select {
	case err := <-done:
		fmt.Println("served:", err)
	case <-time.After(30 * time.Second):
		log.Fatal("Serve did not return")
	}
	fmt.Println("ready after shutdown:", runner.Ready(context.Background()) == nil)
	// Output:
	// 200 {"ok":true}
	// store closed
	// served: <nil>
	// ready after shutdown: false
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
