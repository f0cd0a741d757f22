// Command inprocess shows batchkit as a library, without HTTP: a runner on
// the SQLite store (a file in a temporary directory) and the host's own
// fetcher. It serves a few local pages, submits them as one batch, follows
// the job's progress and prints each target's result.
//
//	go run ./examples/inprocess
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batchstore"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// pages is the little site the example fetches from.
var pages = map[string]string{
	"/alpha": "Alpha is the first page.",
	"/beta":  "Beta is the second page.",
	"/gamma": "Gamma is the third page.",
}

func run(ctx context.Context, out io.Writer) error {
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := pages[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		time.Sleep(100 * time.Millisecond) // a page takes a moment
		fmt.Fprint(w, body)
	}))
	defer site.Close()

	// The fetcher is the host's: here a plain GET of a local page.
	fetch := func(ctx context.Context, _ batch.Caller, t batch.Target) (batch.Result, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
		if err != nil {
			return batch.Result{}, err
		}
		resp, err := site.Client().Do(req)
		if err != nil {
			return batch.Result{}, errors.New("fetch failed")
		}
		defer resp.Body.Close()
		if resp.StatusCode >= 400 {
			return batch.Result{}, batch.NewFetchError(batch.OutcomeUpstream4xx, "", fmt.Errorf("upstream: status %d", resp.StatusCode))
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			return batch.Result{}, errors.New("read failed")
		}
		return batch.Result{Content: string(body), Meta: map[string]any{"status": resp.StatusCode}}, nil
	}

	dir, err := os.MkdirTemp("", "batchkit-inprocess-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	store, err := batchstore.Open(ctx, filepath.Join(dir, "batch.db"), batchstore.Config{})
	if err != nil {
		return err
	}
	defer store.Close() // after the runner's Close below

	r, err := batch.New(batch.Config{Store: store, Fetch: fetch, Options: batchsift.Options})
	if err != nil {
		return err
	}
	if err := r.Start(ctx); err != nil {
		return err
	}
	defer r.Close(ctx)

	caller := batch.Caller{Name: "demo-agent"}
	targets := []batch.Target{
		{URL: site.URL + "/alpha"},
		batchsift.Fields{Mode: batchsift.ModeRaw}.Target(site.URL + "/beta"),
		{URL: site.URL + "/missing"},
		{URL: site.URL + "/gamma"},
	}
	idJob, _, err := r.Submit(ctx, caller, targets)
	if err != nil {
		return err
	}
	id := idJob.ID
	fmt.Fprintf(out, "submitted job %s with %d targets\n", id, len(targets))

	since := 0
	for {
		info, err := r.Wait(ctx, caller, id, batch.WaitOptions{Since: &since, Timeout: 30 * time.Second})
		if err != nil {
			return err
		}
		since = info.TargetsDone
		fmt.Fprintf(out, "  %s: %d/%d done\n", info.Status, info.TargetsDone, info.TargetsTotal)
		if info.Status.Finished() {
			break
		}
	}

	info, err := r.Status(ctx, caller, id, batch.StatusOptions{Results: true})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "job %s\n", info.Status)
	for _, t := range info.Targets {
		if t.Status != batch.TargetDone {
			fmt.Fprintf(out, "  [%d] %s: %s\n", t.Idx, t.Status, t.Error)
			continue
		}
		res, err := batch.DecodeEnvelope(t.Result)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  [%d] %s: %q\n", t.Idx, t.Status, res.Content)
	}
	return nil
}
