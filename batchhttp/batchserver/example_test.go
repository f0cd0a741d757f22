package batchserver_test

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
	"github.com/siftfetch/batchkit/batchhttp/batchserver"
)

// A daemon that serves the API: keys, the handler, metrics and probes on
// one mux, served until its context ends.
func Example() {
	runner := startRunner(batch.Config{MetricsPrefix: "demo_batch"})
	keys, err := batchserver.ParseKeys(strings.NewReader("agent-1=correct-horse-battery\n")) // or ReadKeyFile
	if err != nil {
		log.Fatal(err)
	}
	auth, err := batchserver.NewKeyAuth(keys)
	if err != nil {
		log.Fatal(err)
	}
	m, err := batchserver.NewMetrics(batchserver.MetricsConfig{Prefix: "demo", Authenticate: auth})
	if err != nil {
		log.Fatal(err)
	}
	m.Add(runner.Metrics(), runner.MetricsHelp())
	h, err := batchhttp.NewHandler(runner, &batchhttp.HandlerConfig{Authenticate: auth, Observe: m.Observe})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	h.Mount(mux)
	mux.Handle("GET /healthz", batchhttp.Instrument("/healthz", batchserver.HealthHandler(), m.Observe, nil))
	mux.Handle("GET /readyz", batchhttp.Instrument("/readyz", batchserver.ReadyHandler(runner), m.Observe, nil))
	mux.Handle("GET /metrics", batchhttp.Instrument("/metrics", m, m.Observe, nil))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background()) // signal.NotifyContext in a daemon
	done := make(chan error, 1)
	go func() {
		done <- batchserver.Serve(ctx, ln, batchserver.ServerConfig{Handler: mux, Runner: runner})
	}()

	client, err := batchhttp.NewClient("http://"+ln.Addr().String(), "correct-horse-battery", nil)
	if err != nil {
		log.Fatal(err)
	}
	sub, err := client.Submit(context.Background(), []batch.Target{{URL: "https://example.com/"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("submitted:", sub.Status)
	resp, err := http.Get("http://" + ln.Addr().String() + "/readyz")
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println("readyz:", resp.StatusCode)

	stop() // SIGTERM
	fmt.Println("served:", <-done)
	// Output:
	// submitted: queued
	// readyz: 200
	// served: <nil>
}

func ExampleParseKeys() {
	keys, err := batchserver.ParseKeys(strings.NewReader("# callers\nalice=correct-horse-battery\nagency=t0ps3cret-t0ps3cret:restricted\n"))
	if err != nil {
		log.Fatal(err)
	}
	for _, k := range keys {
		fmt.Println(k.Name, k.Restricted)
	}
	_, err = batchserver.ParseKeys(strings.NewReader("alice=correct-horse-battery\nbob\ncarol=s3cret\n"))
	fmt.Println(err)
	_, err = batchserver.ParseKeys(strings.NewReader("carol=s3cret\n"))
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
	m, err := batchserver.NewMetrics(batchserver.MetricsConfig{Prefix: "sift", NoProcessMetrics: true})
	if err != nil {
		log.Fatal(err)
	}
	m.Add(runner.Metrics(), runner.MetricsHelp())
	health := batchhttp.Instrument("/healthz", batchserver.HealthHandler(), m.Observe, nil)
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
	mux.Handle("GET /readyz", batchserver.ReadyHandler(runner))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background()) // signal.NotifyContext in a daemon
	done := make(chan error, 1)
	go func() {
		done <- batchserver.Serve(ctx, ln, batchserver.ServerConfig{
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
