package batchrobots_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchnet"
	"github.com/siftfetch/batchkit/batchrobots"
)

// A checker for a runner's Config.Robots. The test server listens on
// loopback, which the guarded client refuses unless it is on the allow
// list.
func ExampleNew() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "User-agent: *\nDisallow: /\n\nUser-agent: mybot\nDisallow: /private\nCrawl-delay: 2\n")
	}))
	defer srv.Close()
	client, err := batchnet.NewClient(batchnet.ClientConfig{Allow: []string{srv.Listener.Addr().String()}})
	if err != nil {
		panic(err)
	}
	defer client.CloseIdleConnections()

	robots, err := batchrobots.New(batchrobots.Config{Client: client, UserAgent: "mybot"})
	if err != nil {
		panic(err)
	}
	var check batch.RobotsFunc = robots.Check // for batch.Config{Robots: check}

	for _, path := range []string{"/docs/page", "/private/page"} {
		verdict, err := check(context.Background(), batch.Target{URL: srv.URL + path})
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: disallowed %v, crawl delay %s\n", path, verdict.Disallowed, verdict.CrawlDelay)
	}
	// Output:
	// /docs/page: disallowed false, crawl delay 2s
	// /private/page: disallowed true, crawl delay 2s
}
