package batchstore_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batchstore"
)

// A runner on the SQLite store, in a file of its own.
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "batchstore-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	ctx := context.Background()
	store, err := batchstore.Open(ctx, filepath.Join(dir, "batch.db"), batchstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close() // after the runner's Close: the runner uses the store

	runner, err := batch.New(batch.Config{
		Store: store,
		Fetch: func(ctx context.Context, c batchdriver.Caller, t batchdriver.Target) (batch.Result, error) {
			return batch.Result{Content: "fetched " + t.URL}, nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := runner.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer runner.Close(ctx)

	caller := batchdriver.Caller{Name: "agent-1"}
	job, _, err := runner.Submit(ctx, caller, []batchdriver.Target{
		{URL: "https://example.test/a"},
		{URL: "https://example.test/b"},
	})
	if err != nil {
		log.Fatal(err)
	}
	info, err := runner.Wait(ctx, caller, job.ID, batch.WaitOptions{Timeout: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(info.Status, info.TargetsDone, "of", info.TargetsTotal)
	res, err := runner.Result(ctx, caller, job.ID, 1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(res.Result))
	// Output:
	// done 2 of 2
	// {"content":"fetched https://example.test/b"}
}

// A store in a database the host owns and shares: here an in-memory
// database, so nothing touches the disk.
func ExampleNew() {
	ctx := context.Background()
	pool, err := sqlitex.NewPool("file:batchstore-example?mode=memory&cache=shared", sqlitex.PoolOptions{PoolSize: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close() // the host's pool outlives the store

	store, err := batchstore.New(ctx, pool, batchstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	targets := []batchdriver.Target{{URL: "https://example.test/a"}}
	job := batchdriver.CreateParams{
		ID:      "job-1",
		Caller:  batchdriver.Caller{Name: "agent-1"},
		IdemKey: "agent-1 key", // the runner computes keys; a store compares them
		Targets: targets,
		Limits:  batchdriver.Limits{JobsPerCaller: 1, JobsTotal: 8, TTL: time.Hour},
	}
	j, reused, err := store.Create(ctx, job)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(j.ID, j.Status, reused)
	job.ID = "job-2" // the same list again: the first job is reused
	j, reused, err = store.Create(ctx, job)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(j.ID, j.Status, reused)
	// Output:
	// job-1 queued false
	// job-1 queued true
}
