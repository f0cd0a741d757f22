package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
)

// River (github.com/riverqueue/river), on SQLite through riversqlite and
// on PostgreSQL through riverpgxv5, set up as its README shows (a client
// working the default queue with MaxWorkers 100; River's migrations;
// riversqlite's advice of one connection), with its fetch settings either
// left at their defaults or tuned.
//
// Two ways to model a batchkit job of 32 serial items:
//
//   - chain: one River job per item. The handler stores the item's result
//     and, in the same transaction, inserts the job of the next item
//     (InsertTx) and completes its own (JobCompleteTx): one commit per
//     item that stores the item and starts the next, as batchkit's write
//     does.
//   - loop: one River job per batchkit job, whose handler works its items
//     in order and stores each in a transaction of its own; the last
//     one completes the River job (JobCompleteTx).

// riverCfg is a River configuration under test; a zero field is River's
// default.
type riverCfg struct {
	MaxWorkers        int
	FetchCooldown     time.Duration
	FetchPollInterval time.Duration
	PoolConns         int32 // the pgx pool's MaxConns; 0 is pgxpool's default
}

func (c riverCfg) String() string {
	var parts []string
	parts = append(parts, fmt.Sprintf("`MaxWorkers: %d`", c.MaxWorkers))
	if c.FetchCooldown == 0 {
		parts = append(parts, fmt.Sprintf("`FetchCooldown` default (%s)", river.FetchCooldownDefault))
	} else {
		parts = append(parts, fmt.Sprintf("`FetchCooldown: %s`", c.FetchCooldown))
	}
	if c.FetchPollInterval == 0 {
		parts = append(parts, fmt.Sprintf("`FetchPollInterval` default (%s)", river.FetchPollIntervalDefault))
	} else {
		parts = append(parts, fmt.Sprintf("`FetchPollInterval: %s`", c.FetchPollInterval))
	}
	if c.PoolConns > 0 {
		parts = append(parts, fmt.Sprintf("pgx pool `MaxConns: %d`", c.PoolConns))
	}
	return strings.Join(parts, ", ")
}

// riverREADME is the README's client: the default queue with 100 workers,
// every other setting left at its default.
var riverREADME = riverCfg{MaxWorkers: 100}

const (
	modelChain = "chain"
	modelLoop  = "loop"
)

func modelText(model string) string {
	if model == modelLoop {
		return "one peer job per batchkit job, looping its items, one transaction each"
	}
	return "one peer job per item; the handler's transaction stores the item, enqueues the next and completes itself"
}

// riverSQLite is River on riversqlite at one synchronous setting.
func riverSQLite(sync, group, model string, cfg riverCfg, tuned bool) *contender {
	return &contender{
		Key:  fmt.Sprintf("sqlite-%s/river-%s-%s", sync, model, tunedWord(tuned)),
		Name: "River (riversqlite), " + model + ", " + settingsWord(tuned), Group: group, Peer: "river", Tuned: tuned,
		Model: modelText(model), Slow: !tuned && model == modelChain,
		Settings: cfg.String() + "; `database/sql` + modernc, one connection, WAL, the table's `synchronous`", Tuning: cfg.String(),
		Run: func(ctx context.Context, e *drainEnv) (time.Duration, error) {
			return e.withPeerSQLite("river.db", sync, func(db *sql.DB) (time.Duration, error) {
				driver := riversqlite.New(db)
				if err := riverMigrate(ctx, driver, ""); err != nil {
					return 0, err
				}
				side, err := newSQLiteSide(ctx, db)
				if err != nil {
					return 0, err
				}
				return riverRound(ctx, e, driver, side, "", cfg, model)
			})
		},
	}
}

// riverPG is River on riverpgxv5, in a schema of its own.
func riverPG(model string, cfg riverCfg, tuned bool) *contender {
	return &contender{
		Key:  fmt.Sprintf("postgres/river-%s-%s", model, tunedWord(tuned)),
		Name: "River (riverpgxv5), " + model + ", " + settingsWord(tuned), Group: postgres, Peer: "river", Tuned: tuned,
		Model: modelText(model), Slow: !tuned && model == modelChain,
		Settings: cfg.String() + "; River's tables and the side tables in a schema of their own", Tuning: cfg.String(),
		Run: func(ctx context.Context, e *drainEnv) (time.Duration, error) {
			schema, drop, err := newPGSchema(ctx, e.pgURL)
			if err != nil {
				return 0, err
			}
			defer drop()
			pcfg, err := pgxpool.ParseConfig(e.pgURL)
			if err != nil {
				return 0, err
			}
			if cfg.PoolConns > 0 {
				pcfg.MaxConns = cfg.PoolConns
			}
			pool, err := pgxpool.NewWithConfig(ctx, pcfg)
			if err != nil {
				return 0, err
			}
			defer pool.Close()
			driver := riverpgxv5.New(pool)
			if err := riverMigrate(ctx, driver, schema); err != nil {
				return 0, err
			}
			side, err := newPGSide(ctx, pool, schema)
			if err != nil {
				return 0, err
			}
			return riverRound[pgx.Tx](ctx, e, driver, side, schema, cfg, model)
		},
	}
}

func tunedWord(tuned bool) string {
	if tuned {
		return "tuned"
	}
	return "readme"
}

func settingsWord(tuned bool) string {
	if tuned {
		return "tuned"
	}
	return "README settings"
}

// peerLogger gets River's warnings and errors, on stderr, where a broken
// round shows why; River's default logger writes them to stdout.
var peerLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

func riverMigrate[TTx any](ctx context.Context, driver riverdriver.Driver[TTx], schema string) error {
	m, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: schema, Logger: peerLogger})
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

// settle is how long every library contender's workers run before the
// burst, so that each has finished starting (River's listener, say) and
// the burst meets running workers.
const settle = 250 * time.Millisecond

// riverRound runs one round on a started River client.
func riverRound[TTx any, D riverdriver.Driver[TTx]](ctx context.Context, e *drainEnv, driver D, side sideStore[TTx],
	schema string, cfg riverCfg, model string) (time.Duration, error) {
	w := e.work
	finish := newFinishLine(w.Jobs)
	workers := river.NewWorkers()
	if model == modelLoop {
		river.AddWorker(workers, &riverLoopWorker[TTx, D]{e: e, side: side, finish: finish})
	} else {
		river.AddWorker(workers, &riverChainWorker[TTx, D]{e: e, side: side, finish: finish})
	}
	client, err := river.NewClient[TTx](driver, &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.MaxWorkers}},
		Workers:           workers,
		FetchCooldown:     cfg.FetchCooldown,
		FetchPollInterval: cfg.FetchPollInterval,
		Logger:            peerLogger,
		Schema:            schema,
	})
	if err != nil {
		return 0, err
	}
	if err := client.Start(ctx); err != nil {
		return 0, err
	}
	defer client.Stop(context.WithoutCancel(ctx))
	time.Sleep(settle)
	start := time.Now()
	for j := range w.Jobs {
		tx, err := side.begin(ctx)
		if err != nil {
			return 0, err
		}
		urls := jobURLs(j, w.Items)
		var args river.JobArgs = riverItemArgs{Job: j, Idx: 0, URL: urls[0]}
		if model == modelLoop {
			args = riverJobArgs{Job: j, URLs: urls}
		}
		err = side.submitJob(ctx, tx, j, urls)
		if err == nil {
			_, err = client.InsertTx(ctx, tx, args, nil)
		}
		if err == nil {
			err = side.commit(ctx, tx)
		}
		if err != nil {
			side.rollback(ctx, tx)
			return 0, err
		}
	}
	if err := finish.wait(ctx); err != nil {
		return 0, err
	}
	elapsed := time.Since(start)
	return elapsed, side.check(ctx, w)
}

// riverItemArgs is one item's River job (chain).
type riverItemArgs struct {
	Job int    `json:"job"`
	Idx int    `json:"idx"`
	URL string `json:"url"`
}

func (riverItemArgs) Kind() string { return "bench_item" }

// riverJobArgs is a whole batchkit job's River job (loop).
type riverJobArgs struct {
	Job  int      `json:"job"`
	URLs []string `json:"urls"`
}

func (riverJobArgs) Kind() string { return "bench_job" }

type riverChainWorker[TTx any, D riverdriver.Driver[TTx]] struct {
	river.WorkerDefaults[riverItemArgs]
	e      *drainEnv
	side   sideStore[TTx]
	finish *finishLine
}

func (w *riverChainWorker[TTx, D]) Work(ctx context.Context, job *river.Job[riverItemArgs]) error {
	a := job.Args
	last := a.Idx+1 == w.e.work.Items
	err := w.step(ctx, job, func(tx TTx) error {
		if last {
			return nil
		}
		next := riverItemArgs{Job: a.Job, Idx: a.Idx + 1, URL: itemURL(a.Job, a.Idx+1)}
		_, err := river.ClientFromContext[TTx](ctx).InsertTx(ctx, tx, next, nil)
		return err
	})
	if err != nil {
		w.finish.failed(fmt.Errorf("job %d item %d: %w", a.Job, a.Idx, err))
		return err
	}
	if last {
		w.finish.jobDone()
	}
	return nil
}

// step stores the item in one transaction that also runs more (the next
// item's insert) and completes the River job.
func (w *riverChainWorker[TTx, D]) step(ctx context.Context, job *river.Job[riverItemArgs], more func(TTx) error) error {
	tx, err := w.side.begin(ctx)
	if err != nil {
		return err
	}
	defer w.side.rollback(ctx, tx)
	body := fetchItem(w.e, job.Args.URL)
	if err := w.side.storeItem(ctx, tx, job.Args.Job, job.Args.Idx, body); err != nil {
		return err
	}
	if err := more(tx); err != nil {
		return err
	}
	if _, err := river.JobCompleteTx[D](ctx, tx, job); err != nil {
		return err
	}
	return w.side.commit(ctx, tx)
}

type riverLoopWorker[TTx any, D riverdriver.Driver[TTx]] struct {
	river.WorkerDefaults[riverJobArgs]
	e      *drainEnv
	side   sideStore[TTx]
	finish *finishLine
}

func (w *riverLoopWorker[TTx, D]) Work(ctx context.Context, job *river.Job[riverJobArgs]) error {
	if err := w.work(ctx, job); err != nil {
		w.finish.failed(fmt.Errorf("job %d: %w", job.Args.Job, err))
		return err
	}
	w.finish.jobDone()
	return nil
}

func (w *riverLoopWorker[TTx, D]) work(ctx context.Context, job *river.Job[riverJobArgs]) error {
	for idx, u := range job.Args.URLs {
		body := fetchItem(w.e, u)
		tx, err := w.side.begin(ctx)
		if err != nil {
			return err
		}
		err = w.side.storeItem(ctx, tx, job.Args.Job, idx, body)
		if err == nil && idx == len(job.Args.URLs)-1 {
			_, err = river.JobCompleteTx[D](ctx, tx, job)
		}
		if err == nil {
			err = w.side.commit(ctx, tx)
		}
		if err != nil {
			w.side.rollback(ctx, tx)
			return err
		}
	}
	return nil
}

// fetchItem is every peer's zero-latency handler: the round's page, as
// the envelope batchkit would store for it.
func fetchItem(e *drainEnv, _ string) []byte { return e.envelope }
