package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batchstore"
	"github.com/siftfetch/batchkit/batchstore/pgstore"
)

// batchkit itself: the runner with its default two workers on the SQLite
// store at one synchronous setting, or on the PostgreSQL store (one node),
// a fetcher that answers at once with the round's page.

func batchkitSQLite(sync batchstore.Synchronous, group string) *contender {
	return batchkitSQLiteWorkers(sync, group, batch.DefaultWorkers)
}

// batchkitSQLiteWorkers is batchkitSQLite with workers workers: at more
// than the default it is the group-commit contender (peer "batchkit-N"),
// reported against the raw twin in a table of its own.
func batchkitSQLiteWorkers(sync batchstore.Synchronous, group string, workers int) *contender {
	key, name, peer, cfg := "sqlite-"+string(sync)+"/batchkit", "batchkit", "batchkit", "defaults"
	if workers != batch.DefaultWorkers {
		key, name, peer, cfg = fmt.Sprintf("%s-%dw", key, workers), fmt.Sprintf("batchkit, %d workers", workers), fmt.Sprintf("batchkit-%d", workers), "defaults but `Workers`"
	}
	return &contender{
		Key: key, Group: group, Name: name, Peer: peer,
		Model:    "a batchkit job of 32 targets",
		Settings: fmt.Sprintf("`batchstore.Open` with the table's `Synchronous`, default pool (8); `batch.Config` %s (%d workers) with the caps and byte budget raised to fit the burst", cfg, workers),
		Run: func(ctx context.Context, e *drainEnv) (time.Duration, error) {
			dir, remove, err := e.roundDir()
			if err != nil {
				return 0, err
			}
			defer remove()
			s, err := batchstore.Open(ctx, filepath.Join(dir, "batchkit.db"), batchstore.Config{Synchronous: sync})
			if err != nil {
				return 0, err
			}
			defer s.Close()
			return drainRunner(ctx, e, s, workers)
		},
	}
}

func batchkitPG(group string, workers int) *contender {
	return &contender{
		Key: pgKey(group) + "/batchkit", Group: group, Name: "batchkit", Peer: "batchkit",
		Model:    "a batchkit job of 32 targets",
		Settings: fmt.Sprintf("`pgstore.Open` on a schema of its own, `MaxConns: %d`; `batch.Config` defaults, `Workers: %d`, with the caps and byte budget raised to fit the burst", workers+2, workers),
		Run: func(ctx context.Context, e *drainEnv) (time.Duration, error) {
			schema, drop, err := newPGSchema(ctx, e.pgURL)
			if err != nil {
				return 0, err
			}
			defer drop()
			s, err := pgstore.Open(ctx, e.pgURL, pgstore.Config{Schema: schema, MaxConns: int32(workers) + 2})
			if err != nil {
				return 0, err
			}
			defer s.Close()
			return drainNodes(ctx, e, []batchdriver.Store{s}, workers, nil)
		},
	}
}

// drainRunner starts a runner on store, submits the round's jobs in a
// burst and returns the time until every job is done.
func drainRunner(ctx context.Context, e *drainEnv, store batchdriver.Store, workers int) (time.Duration, error) {
	return drainNodes(ctx, e, []batchdriver.Store{store}, workers, nil)
}

// drainNodes starts a runner of workers workers (0: the default) on each
// store, as nodes of one cluster, submits the round's jobs in a burst,
// spread over the nodes, and returns the time until every job is done.
// start, if not nil, is called just before the first submit; the function
// it returns is called when the last job is done.
func drainNodes(ctx context.Context, e *drainEnv, stores []batchdriver.Store, workers int, start func() (func(), error)) (time.Duration, error) {
	w := e.work
	fetch := func(context.Context, batch.Caller, batch.Target) (batch.Result, error) {
		return batch.Result{Content: e.content}, nil
	}
	runners := make([]*batch.Runner, len(stores))
	for i, store := range stores {
		r, err := batch.New(batch.Config{
			Store: store, Fetch: fetch, Options: batchsift.Options, Workers: workers, JobsPerCaller: w.Jobs, JobsTotal: w.Jobs, TargetsPerJob: max(w.Items, 1),
			MaxBytes: 1 << 40, MaxResultBytes: 2 * w.ResultBytes, Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			return 0, err
		}
		if err := r.Start(ctx); err != nil {
			return 0, err
		}
		defer r.Close(context.WithoutCancel(ctx))
		runners[i] = r
	}
	time.Sleep(settle)
	var doneCounters, okCounters []interface{ Get() uint64 }
	for _, r := range runners {
		doneCounters = append(doneCounters, r.Metrics().GetOrCreateCounter(`batch_jobs_total{outcome="done"}`))
		okCounters = append(okCounters, r.Metrics().GetOrCreateCounter(`batch_targets_total{outcome="ok"}`))
	}
	sum := func(cs []interface{ Get() uint64 }) uint64 {
		var n uint64
		for _, c := range cs {
			n += c.Get()
		}
		return n
	}
	stop := func() {}
	if start != nil {
		var err error
		if stop, err = start(); err != nil {
			return 0, err
		}
		defer stop()
	}
	caller := batch.Caller{Name: "bench"}
	jobs := make([][]batch.Target, w.Jobs)
	for j := range jobs {
		jobs[j] = make([]batch.Target, w.Items)
		for i := range jobs[j] {
			jobs[j][i].URL = itemURL(j, i)
		}
	}
	began := time.Now()
	for j := range jobs {
		if _, _, err := runners[j%len(runners)].Submit(ctx, caller, jobs[j]); err != nil {
			return 0, err
		}
	}
	for sum(doneCounters) < uint64(w.Jobs) {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("%d of %d jobs done: %w", sum(doneCounters), w.Jobs, err)
		}
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(began)
	stop()
	if n := sum(okCounters); n != uint64(w.total()) {
		return 0, fmt.Errorf("%w: %d targets ok, want %d", errShort, n, w.total())
	}
	return elapsed, nil
}
