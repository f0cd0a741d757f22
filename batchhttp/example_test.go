package batchhttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/batchhttp/batchserver"
)

func ExampleNewHandler() {
	ctx := context.Background()
	// A runner over the in-memory test store, with a fetcher that answers
	// "hello" and a stopped clock, so the output is the same on every run.
	clock := batchtest.NewClock()
	runner, err := batch.New(batch.Config{
		Store: batchtest.NewStore(),
		Fetch: batchtest.StaticFetcher("hello"),
		// The targets take sift's options (mode, question, grep, …).
		Options: batchsift.Options,
		Now:     clock.Now,
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := runner.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer runner.Close(ctx)

	auth, err := batchserver.NewKeyAuth([]batchserver.Key{{Name: "agent-1", Secret: "s3cret"}})
	if err != nil {
		log.Fatal(err)
	}
	h, err := batchhttp.NewHandler(runner, &batchhttp.HandlerConfig{
		Authenticate: auth,
		Precheck:     batchhttp.PrecheckURL,
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	h.Mount(mux) // on /v1/batch and /v1/batch/
	srv := httptest.NewServer(mux)
	defer srv.Close()

	var jobID string
	// send makes one request and prints it and its answer, with the job id
	// (taken from the first answer) masked.
	send := func(method, path, body string) {
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			log.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer s3cret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		if err != nil {
			log.Fatal(err)
		}
		if jobID == "" {
			var sub batchhttp.SubmitResponse
			if err := json.Unmarshal(out, &sub); err != nil {
				log.Fatal(err)
			}
			jobID = sub.JobID
		}
		fmt.Printf("%s %s\n%d %s", method, strings.ReplaceAll(path, jobID, "<job-id>"),
			resp.StatusCode, strings.ReplaceAll(string(out), jobID, "<job-id>"))
	}

	send("POST", "/v1/batch", `{"targets":[{"url":"https://example.com/a"},{"url":"https://example.com/b","mode":"clean"}]}`)
	// A long-poll answers as soon as the job is finished.
	send("GET", "/v1/batch/"+jobID+"?wait=10s", "")
	send("GET", "/v1/batch/"+jobID+"/1", "")

	// Output:
	// POST /v1/batch
	// 202 {"success":true,"job_id":"<job-id>","status":"queued","targets":2,"reused":false}
	// GET /v1/batch/<job-id>?wait=10s
	// 200 {"job_id":"<job-id>","status":"done","targets_total":2,"targets_done":2,"created_at":"2026-01-02T03:04:05Z","expires_at":"2026-01-03T03:04:05Z","handed_on":0,"outcomes":{"ok":2},"targets":[{"idx":0,"url":"https://example.com/a","status":"done","attempts":1,"outcome":"ok","retryable":false},{"idx":1,"url":"https://example.com/b","status":"done","attempts":1,"outcome":"ok","retryable":false}]}
	// GET /v1/batch/<job-id>/1
	// 200 {"job_id":"<job-id>","idx":1,"url":"https://example.com/b","status":"done","attempts":1,"outcome":"ok","retryable":false,"result":{"content":"hello","mode":"clean","url":"https://example.com/b"},"expires_at":"2026-01-03T03:04:05Z"}
}
