package pgstore

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batchstore/pgstore/pgstoretest"
)

// The drain benchmark: the runner's whole write
// path on this store, with one node and with three, against a raw-pgx twin
// doing the least work that stores the same results, all measured in one
// run.
//
// One round submits drainJobs jobs of drainTargets targets in a burst
// (spread over the nodes) to started runners of the default two workers
// each, whose fetcher answers at once with a resultBytes envelope, and
// ends when every job is done. The twin, on a schema of its own with the
// same lz4 column, inserts the same jobs and targets (one transaction per
// job) and then, from as many connections as the store's nodes have
// workers (2, or 6), stores each target in one transaction that writes
// its result and bumps its job's counter, both statements in one
// pgx.Batch (one round trip). Each round uses new schemas, and the four
// runs alternate, so that all see the same machine. A round's ratios are
// taken within the round; the benchmark reports their medians over the
// rounds of one run with the lowest and highest, and every rate over all
// rounds.
//
//	BATCHKIT_PG_URL=… go test -run '^$' -bench BenchmarkDrain -benchtime 10x ./batchstore/pgstore/
const (
	drainJobs    = 64
	drainTargets = 32
	resultBytes  = 10 << 10
)

// drainContent is a fetched page of about resultBytes of English-like
// words, whose envelope lz4 compresses about as much as a real page's
// (a page of one repeated byte would compress to nothing and flatter
// both sides).
var drainContent = func() string {
	words := strings.Fields("the of and to in is was for on that with as by at from his her an were are which this be " +
		"or has had not first one their its new after who they have two been more other also into all but time " +
		"only may over three when most some would such these about world than between city during where state")
	rng := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	for b.Len() < resultBytes-len(`{"content":""}`)-12 {
		b.WriteString(words[rng.IntN(len(words))])
		b.WriteByte(' ')
	}
	return b.String()
}()

func BenchmarkDrain(b *testing.B) {
	pgURL(b)
	var store1, store3, raw2, raw6 time.Duration
	var vsRaw1, vsRaw3, scale []float64
	for range b.N {
		s1 := drainRound(b, 1)
		r2 := rawRound(b, 2*1)
		s3 := drainRound(b, 3)
		r6 := rawRound(b, 2*3)
		store1, store3, raw2, raw6 = store1+s1, store3+s3, raw2+r2, raw6+r6
		vsRaw1 = append(vsRaw1, r2.Seconds()/s1.Seconds())
		vsRaw3 = append(vsRaw3, r6.Seconds()/s3.Seconds())
		scale = append(scale, s1.Seconds()/s3.Seconds())
	}
	n := float64(b.N * drainJobs * drainTargets)
	b.ReportMetric(n/store1.Seconds(), "1node-targets/s")
	b.ReportMetric(n/store3.Seconds(), "3node-targets/s")
	b.ReportMetric(n/raw2.Seconds(), "raw2-targets/s")
	b.ReportMetric(n/raw6.Seconds(), "raw6-targets/s")
	for _, m := range []struct {
		name string
		v    []float64
	}{{"1node/raw2", vsRaw1}, {"3node/raw6", vsRaw3}, {"3node/1node", scale}} {
		slices.Sort(m.v)
		b.ReportMetric(m.v[len(m.v)/2], m.name)
		b.ReportMetric(m.v[0], m.name+"-min")
		b.ReportMetric(m.v[len(m.v)-1], m.name+"-max")
	}
}

// roundSchema returns a new schema for one round and a function that drops
// it: a run writes hundreds of megabytes, which should not pile up.
func roundSchema(b *testing.B) (string, func()) {
	b.Helper()
	var s [6]byte
	for i := range s {
		s[i] = "abcdefghijklmnopqrstuvwxyz"[rand.IntN(26)]
	}
	name := "bkb_" + string(s[:])
	return name, func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := pgstoretest.DropSchema(ctx, pgURL(b), name); err != nil {
			b.Errorf("drop %s: %v", name, err)
		}
	}
}

// drainRound runs one round on nodes nodes and returns its time.
func drainRound(b *testing.B, nodes int) time.Duration {
	b.Helper()
	b.StopTimer()
	ctx := context.Background()
	schema, drop := roundSchema(b)
	defer drop()
	fetch := func(context.Context, batchdriver.Caller, batchdriver.Target) (batch.Result, error) {
		return batch.Result{Content: drainContent}, nil
	}
	var runners []*batch.Runner
	for i := range nodes {
		s, err := Open(ctx, pgURL(b), Config{Schema: schema, MaxConns: batch.DefaultWorkers + 2})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		r, err := batch.New(batch.Config{
			Store: s, Fetch: fetch, JobsPerCaller: drainJobs, JobsTotal: drainJobs, RunnerID: fmt.Sprint("node-", i),
			MaxBytes: 1 << 40, MaxResultBytes: 2 * resultBytes, Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			b.Fatal(err)
		}
		if err := r.Start(ctx); err != nil {
			b.Fatal(err)
		}
		defer r.Close(ctx)
		runners = append(runners, r)
	}
	done := func() (n uint64) {
		for _, r := range runners {
			n += r.Metrics().GetOrCreateCounter(`batch_jobs_total{outcome="done"}`).Get()
		}
		return n
	}
	caller := batchdriver.Caller{Name: "bench"}
	b.StartTimer()
	start := time.Now()
	for j := range drainJobs {
		ts := make([]batchdriver.Target, drainTargets)
		for i := range ts {
			ts[i].URL = fmt.Sprintf("https://bench.example/%d/%d", j, i)
		}
		if _, _, err := runners[j%nodes].Submit(ctx, caller, ts); err != nil {
			b.Fatal(err)
		}
	}
	for done() < drainJobs {
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	return elapsed
}

// rawRound runs one round of the raw twin on conns connections.
func rawRound(b *testing.B, conns int) time.Duration {
	b.Helper()
	b.StopTimer()
	ctx := context.Background()
	schema, drop := roundSchema(b)
	defer drop()
	cfg, err := pgxpool.ParseConfig(pgURL(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = int32(conns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	sch := pgx.Identifier{schema}.Sanitize()
	for _, q := range []string{
		`CREATE SCHEMA ` + sch,
		`CREATE TABLE ` + sch + `.job (id integer PRIMARY KEY, done integer NOT NULL DEFAULT 0)`,
		`CREATE TABLE ` + sch + `.item (job integer NOT NULL REFERENCES ` + sch + `.job (id), idx integer NOT NULL,
			url text NOT NULL, body bytea COMPRESSION lz4, PRIMARY KEY (job, idx))`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			b.Fatal(q, err)
		}
	}
	body, err := batch.Result{Content: drainContent}.Envelope()
	if err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	start := time.Now()
	for j := range drainJobs {
		urls := make([]string, drainTargets)
		for i := range urls {
			urls[i] = fmt.Sprintf("https://bench.example/%d/%d", j, i)
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO `+sch+`.job (id) VALUES ($1)`, j); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO `+sch+`.item (job, idx, url)
				SELECT $1, i - 1, u FROM unnest($2::text[]) WITH ORDINALITY AS x (u, i)`, j, urls)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	jobs := make(chan int, drainJobs)
	for j := range drainJobs {
		jobs <- j
	}
	close(jobs)
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			for j := range jobs {
				for i := range drainTargets {
					batch := &pgx.Batch{}
					batch.Queue(`UPDATE `+sch+`.item SET body = $1 WHERE job = $2 AND idx = $3`, body, j, i)
					batch.Queue(`UPDATE `+sch+`.job SET done = done + 1 WHERE id = $1`, j)
					if err := pool.SendBatch(ctx, batch).Close(); err != nil {
						b.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	return elapsed
}
