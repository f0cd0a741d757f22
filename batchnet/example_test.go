package batchnet_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchnet"
)

// A fetch through the guarded client. The test server listens on
// loopback, which the guard refuses unless its address is on the allow
// list.
func ExampleNewClient() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /page", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })
	srv := httptest.NewServer(mux)
	defer srv.Close()

	client, err := batchnet.NewClient(batchnet.ClientConfig{
		Allow:   []string{srv.Listener.Addr().String()},
		Timeout: 10 * time.Second,
	})
	if err != nil {
		panic(err)
	}
	defer client.CloseIdleConnections()

	fetch := func(rawURL string) (string, error) {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, rawURL, nil)
		if err != nil {
			return "", err
		}
		resp, err := client.Do(req) // a clean error: no URL, host or address in it
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		if err := batchnet.StatusError(resp.StatusCode); err != nil {
			return "", err
		}
		body, err := io.ReadAll(resp.Body)
		return string(body), err
	}

	for _, rawURL := range []string{
		srv.URL + "/page",
		srv.URL + "/missing",
		"http://127.0.0.1:8709/secret-path?token=abc", // loopback, not on the allow list
		"http://169.254.169.254/latest/meta-data/",
	} {
		body, err := fetch(rawURL)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Println(body)
	}
	// Output:
	// hello
	// error: upstream: status 404
	// error: blocked: port not allowed
	// error: blocked: link-local address
}

// The connect-time half of the guard: a name that resolves to a private
// address is refused at dial, whatever the pre-check saw. Lookup stands in
// for DNS here.
func ExampleClient_Do() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.Host)
		fmt.Fprint(w, "served to ", host)
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	answers := map[string]string{"svc.test": "127.0.0.1", "internal.test": "10.0.0.7"}
	client, err := batchnet.NewClient(batchnet.ClientConfig{
		// The name for the pre-check, the address for the dial.
		Allow: []string{"svc.test:" + port, "127.0.0.1:" + port},
		Lookup: func(_ context.Context, host string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr(answers[host])}, nil
		},
	})
	if err != nil {
		panic(err)
	}
	defer client.CloseIdleConnections()

	for _, rawURL := range []string{"http://svc.test:" + port + "/", "http://internal.test/"} {
		req, err := http.NewRequest(http.MethodGet, rawURL, nil)
		if err != nil {
			panic(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			var oe batch.OutcomeError
			errors.As(err, &oe)
			fmt.Printf("%s (outcome %s)\n", err, oe.Outcome())
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(string(body))
	}
	// Output:
	// served to svc.test
	// blocked: private address (outcome blocked)
}

// A plain net/http client's error names the URL and the address it dialled;
// CleanError keeps only what happened and its outcome.
func ExampleCleanError() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	closed := "http://" + ln.Addr().String() + "/secret-path?token=abc"
	ln.Close() // nothing listens there any more

	plain := &http.Client{Transport: &http.Transport{}}
	ctx := context.Background()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, closed, nil)
	_, err = plain.Do(req) // Get "http://127.0.0.1:…/secret-path?token=abc": dial tcp 127.0.0.1:…: connect: connection refused

	clean := batchnet.CleanError(ctx, err)
	var oe batch.OutcomeError
	errors.As(clean, &oe)
	fmt.Println(clean, "/", oe.Outcome(), "/ retryable:", oe.Outcome().Retryable())

	// When the fetch's context has ended, the error says so.
	expired, cancel := context.WithDeadline(ctx, time.Unix(0, 0))
	defer cancel()
	clean = batchnet.CleanError(expired, err)
	fmt.Println(clean, "/", errors.Is(clean, context.DeadlineExceeded))
	// Output:
	// connect: connection refused / upstream_5xx / retryable: true
	// timeout: no response before the deadline / true
}

func ExampleStatusError() {
	for _, code := range []int{200, 404, 503, 304} {
		err := batchnet.StatusError(code)
		var oe batch.OutcomeError
		if errors.As(err, &oe) {
			fmt.Printf("%d: %s (%s)\n", code, err, oe.Outcome())
			continue
		}
		fmt.Printf("%d: %v\n", code, err)
	}
	// Output:
	// 200: <nil>
	// 404: upstream: status 404 (upstream_4xx)
	// 503: upstream: status 503 (upstream_5xx)
	// 304: upstream: status 304 (other)
}

// The guard's pre-check as the pre-check hook of a batchhttp handler
// (HandlerConfig{Precheck: guard.PrecheckFunc}), here assigned to a variable
// of the hook's type.
func ExampleGuard_PrecheckFunc() {
	guard := batchnet.NewGuard([]string{"127.0.0.1:8081"})
	var precheck func(ctx context.Context, caller batch.Caller, rawURL string) error = guard.PrecheckFunc

	caller := batch.Caller{Name: "agent"}
	for _, rawURL := range []string{
		"https://example.com/",
		"http://127.0.0.1:8081/", // on the allow list
		"http://127.0.0.1/",
		"http://2130706433/",
		"ftp://example.com/",
	} {
		fmt.Println(precheck(context.Background(), caller, rawURL))
	}
	// Output:
	// <nil>
	// <nil>
	// blocked: loopback address
	// blocked: non-canonical ip address
	// blocked: scheme not allowed
}

// A fetcher turns an upstream's request to wait into [batch.RetryAfter]:
// the runner holds the host back and fetches the target again.
func ExampleResponseError() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/busy":
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
		case "/down":
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			fmt.Fprint(w, "ok")
		}
	}))
	defer srv.Close()
	client, err := batchnet.NewClient(batchnet.ClientConfig{Allow: []string{srv.Listener.Addr().String()}})
	if err != nil {
		panic(err)
	}
	defer client.CloseIdleConnections()

	for _, path := range []string{"/page", "/busy", "/down"} {
		resp, err := client.Get(context.Background(), srv.URL+path)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		err = batchnet.ResponseError(resp)
		wait, ok := batch.RetryAfterOf(err)
		fmt.Printf("%s: %v (wait %s: %v)\n", path, err, wait, ok)
	}
	// Output:
	// /page: <nil> (wait 0s: false)
	// /busy: upstream: status 429 (wait 30s: true)
	// /down: upstream: status 503 (wait 0s: false)
}
