package batchconsole_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchconsole"
)

// A host mounts the console beside its own routes, under a prefix of its
// choosing, with the runner's retention settings so that the ages and
// shares on the pages match them.
func ExampleNew() {
	store := batchtest.NewStore() // any store that implements batch.Inspector
	cfg := batch.Config{TTL: batch.Duration(12 * time.Hour), MaxBytes: 32 << 20}
	console, err := batchconsole.New(batchconsole.Config{
		Store:  store,
		Keys:   []string{"operator-key-0123456789"},
		Prefix: "/ops/console",
		TTL:    time.Duration(cfg.TTL), StaleAfter: time.Duration(cfg.StaleAfter), MaxBytes: cfg.MaxBytes,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	console.Mount(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, key := range []string{"", "operator-key-0123456789"} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/ops/console", nil)
		if key != "" {
			req.SetBasicAuth("operator", key) // as a browser sends it
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	// Output:
	// 401 text/plain; charset=utf-8
	// 200 text/html; charset=utf-8
}
