package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchdriver/batchdrivertest"
	"github.com/siftfetch/batchkit/batchstore"
	"github.com/siftfetch/batchkit/batchstore/pgstore"
)

// The growth phase: what one store operation costs as the store grows.
// Each store is seeded, through the Store API itself, with finished jobs
// of seedTargets targets (not 32: 100k jobs of 32 targets would take this
// phase past its time) with small results; then, in interleaved rounds
// over the sizes, three operations are timed one by one:
//
//   - submit: Store.Create of a job of 32 targets by a new caller (the
//     reuse lookup and both caps are checked);
//   - status: Store.Get of a seeded job's summary by its owner, without
//     results;
//   - claim+finish: Store.Claim of the oldest queued job (one the submits
//     made) and Store.FinishTarget of each of its 32 targets with a 10
//     KiB result: the whole drain of one job, 33 writes.
//
// Submits (and so claim+finish) per size and round are capped at a
// hundredth of the size (at least growthMinOps), so the stores grow by a
// few percent at most while they are measured; status reads are not.

const (
	seedTargets     = 4
	seedResultBytes = 64
	seedConc        = 8
	seedVacuumEvery = 10_000
	growthRounds    = 3
	growthMinOps    = 20
)

var growthOps = []string{"submit", "status", "claim+finish"}

// growthReport is the growth phase's outcome for each store.
type growthReport struct {
	Sizes  []int
	PerOp  time.Duration // the time of one operation per size and round, at most
	MaxOps int           // and its calls, at most
	Stores []growthStoreResult
}

type growthStoreResult struct {
	Name     string
	Settings string
	Seeded   map[int]time.Duration              // time to seed each size
	Lat      map[string]map[int][]time.Duration // op → size → sorted latencies
}

func (g growthStoreResult) median(op string, n int) time.Duration { return quantile(g.Lat[op][n], 0.5) }

type growthTarget struct {
	name, settings string
	open           func(ctx context.Context, n int) (grownStore, error)
}

// grownStore is one store of the growth phase, with what it needs that
// the Store API does not do.
type grownStore struct {
	batchdriver.Store
	close func()
	// vacuum, if not nil, does what a server's autovacuum would have done
	// by now; the servers this runs on may have it off.
	vacuum func(ctx context.Context) error
}

func growthPhase(ctx context.Context, sz sizes, tmp, pgURL string) (*growthReport, error) {
	targets := []growthTarget{{
		name: "SQLite (batchstore)", settings: "`synchronous=NORMAL`, so that the figures are the store's work rather than the disk's fsync; default pool",
		open: func(ctx context.Context, n int) (grownStore, error) {
			s, err := batchstore.Open(ctx, filepath.Join(tmp, fmt.Sprintf("growth-%d.db", n)), batchstore.Config{Synchronous: batchstore.SyncNormal})
			if err != nil {
				return grownStore{}, err
			}
			return grownStore{Store: s, close: func() { s.Close() }}, nil
		},
	}}
	if pgURL != "" {
		targets = append(targets, growthTarget{
			name: "PostgreSQL (pgstore)", settings: fmt.Sprintf("a schema of its own per size, `MaxConns: 8`, vacuumed after every %s seeded jobs and before the rounds", fmtRate(seedVacuumEvery)),
			open: func(ctx context.Context, n int) (grownStore, error) {
				schema, drop, err := newPGSchema(ctx, pgURL)
				if err != nil {
					return grownStore{}, err
				}
				s, err := pgstore.Open(ctx, pgURL, pgstore.Config{Schema: schema, MaxConns: 8})
				if err != nil {
					drop()
					return grownStore{}, err
				}
				return grownStore{Store: s, close: func() { s.Close(); drop() },
					vacuum: func(ctx context.Context) error { return vacuumPGSchema(ctx, pgURL, schema) }}, nil
			},
		})
	}
	rep := &growthReport{Sizes: sz.growth, PerOp: sz.growthFor / growthRounds, MaxOps: sz.growthOps}
	for _, t := range targets {
		res, err := growStore(ctx, sz, t)
		if err != nil {
			return nil, fmt.Errorf("growth %s: %w", t.name, err)
		}
		rep.Stores = append(rep.Stores, res)
	}
	return rep, nil
}

func growStore(ctx context.Context, sz sizes, t growthTarget) (growthStoreResult, error) {
	res := growthStoreResult{Name: t.name, Settings: t.settings, Seeded: map[int]time.Duration{},
		Lat: map[string]map[int][]time.Duration{}}
	for _, op := range growthOps {
		res.Lat[op] = map[int][]time.Duration{}
	}
	stores := map[int]grownStore{}
	for _, n := range sz.growth {
		s, err := t.open(ctx, n)
		if err != nil {
			return res, err
		}
		defer s.close()
		start := time.Now()
		// Without vacuum each claim and create reads more dead index
		// entries than the last, and seeding slows as the store grows.
		for from := 0; from < n; from += seedVacuumEvery {
			if err := seedStore(ctx, s, from, min(from+seedVacuumEvery, n)); err != nil {
				return res, err
			}
			if s.vacuum != nil {
				if err := s.vacuum(ctx); err != nil {
					return res, err
				}
			}
		}
		res.Seeded[n] = time.Since(start)
		logf("growth %s: seeded %d jobs in %s", t.name, n, res.Seeded[n].Round(time.Millisecond))
		stores[n] = s
	}
	result := []byte(pageText(10 << 10))
	seq := 0
	for round := range growthRounds {
		for _, n := range sz.growth {
			s := stores[n]
			// Writes are capped so that measuring barely grows the store;
			// reads are not.
			maxWrites := max(growthMinOps, min(sz.growthOps, n/100))
			per := sz.growthFor / growthRounds
			rng := rand.New(rand.NewPCG(uint64(round), uint64(n)))
			for _, op := range growthOps {
				var fn func() error
				switch op {
				case "submit":
					fn = func() error {
						seq++
						caller := batch.Caller{Name: fmt.Sprint("g-", seq)}
						ts := make([]batch.Target, 32)
						for i := range ts {
							ts[i].URL = fmt.Sprintf("https://growth.example/%d/%d", seq, i)
						}
						_, _, err := s.Create(ctx, batchdriver.CreateParams{ID: fmt.Sprint("g-", seq), Caller: caller,
							IdemKey: batchdrivertest.IdemKey(caller.Name, ts), Targets: ts, Limits: growthLimits})
						return err
					}
				case "status":
					fn = func() error {
						j := rng.IntN(n)
						_, ts, err := s.Get(ctx, batchdriver.GetParams{Caller: seedCaller(j), JobID: seedID(j)})
						if err == nil && len(ts) != seedTargets {
							err = fmt.Errorf("status of %s: %d targets", seedID(j), len(ts))
						}
						return err
					}
				case "claim+finish":
					fn = func() error { return drainOne(ctx, s, "growth", result) }
				}
				maxOps := maxWrites
				if op == "status" {
					maxOps = sz.growthOps
				}
				lat, err := timeOps(fn, maxOps, per)
				if err != nil {
					return res, fmt.Errorf("%s at %d jobs: %w", op, n, err)
				}
				res.Lat[op][n] = append(res.Lat[op][n], lat...)
			}
		}
	}
	for _, n := range sz.growth {
		for _, op := range growthOps {
			slices.Sort(res.Lat[op][n])
		}
		logf("growth %s %7d jobs: submit %s  status %s  claim+finish %s", t.name, n,
			fmtDur(res.median("submit", n)), fmtDur(res.median("status", n)), fmtDur(res.median("claim+finish", n)))
	}
	return res, nil
}

var growthLimits = batchdriver.Limits{JobsPerCaller: 1, JobsTotal: 1 << 30, TTL: 24 * time.Hour}

func seedID(j int) string     { return fmt.Sprint("seed-", j) }
func seedCaller(j int) string { return fmt.Sprint("seeder-", j%997) }

// timeOps runs fn until it has run maxOps times or for d, whichever comes
// first, at least once, and returns each run's time.
func timeOps(fn func() error, maxOps int, d time.Duration) ([]time.Duration, error) {
	var lat []time.Duration
	end := time.Now().Add(d)
	for len(lat) == 0 || (len(lat) < maxOps && time.Now().Before(end)) {
		t0 := time.Now()
		if err := fn(); err != nil {
			return lat, err
		}
		lat = append(lat, time.Since(t0))
	}
	return lat, nil
}

// seedStore adds to s the finished jobs numbered from to n-1, seedConc
// at a time.
func seedStore(ctx context.Context, s batchdriver.Store, from, n int) error {
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	errs := make(chan error, seedConc)
	result := make([]byte, seedResultBytes)
	for range seedConc {
		wg.Go(func() {
			for {
				j := int(next.Add(1)) - 1
				if j >= n {
					return
				}
				ts := make([]batch.Target, seedTargets)
				for i := range ts {
					ts[i].URL = fmt.Sprintf("https://seed.example/%d/%d", j, i)
				}
				caller := batch.Caller{Name: seedCaller(j)}
				_, _, err := s.Create(ctx, batchdriver.CreateParams{ID: seedID(j), Caller: caller,
					IdemKey: batchdrivertest.IdemKey(caller.Name, ts), Targets: ts, Limits: growthLimits})
				if err == nil {
					err = drainOne(ctx, s, "seeder", result)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// drainOne claims the oldest queued job as runner and finishes each of its
// targets with result. A shared store's claim may find no row while
// another claim holds the last ones (SKIP LOCKED); it then tries again.
func drainOne(ctx context.Context, s batchdriver.Store, runner string, result []byte) error {
	var c batchdriver.Claimed
	for {
		var ok bool
		var err error
		c, ok, err = s.Claim(ctx, batchdriver.ClaimParams{Runner: runner})
		if err != nil {
			return err
		}
		if ok {
			break
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(time.Millisecond)
	}
	for next := c.Next; next >= 0; {
		st, err := s.FinishTarget(ctx, batchdriver.FinishParams{JobID: c.Job.ID, Runner: runner,
			Target: batchdriver.TargetFinish{Idx: next, Status: batch.TargetDone, Outcome: batch.OutcomeOK, Result: result}})
		if err != nil {
			return err
		}
		next = st.Next
	}
	return nil
}
