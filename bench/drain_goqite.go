package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"maragu.dev/goqite"
	"maragu.dev/goqite/jobs"
)

// goqite (maragu.dev/goqite) with its jobs runner, on SQLite, set up as
// its README shows (one connection, WAL, its schema, a queue, a runner
// with a registered job), with the runner's Limit and PollInterval either
// as in the README's jobs example or tuned. It stores no results, so each
// item's result goes to the side tables (see side.go).
//
// The models are River's (see drain_river.go), within what goqite
// offers: a handler gets the message body but not its id, and the runner
// deletes the message in a transaction of its own after the handler
// returns, so a chained item's store-and-enqueue commit is followed by a
// second commit that retires the item.

// goqiteCfg is a jobs.Runner configuration under test.
type goqiteCfg struct {
	Limit        int
	PollInterval time.Duration
}

func (c goqiteCfg) String() string {
	return fmt.Sprintf("`Limit: %d`, `PollInterval: %s`", c.Limit, c.PollInterval)
}

// goqiteREADME is the runner of the README's jobs example: "a job limit
// of 1 and a short message poll interval".
var goqiteREADME = goqiteCfg{Limit: 1, PollInterval: 10 * time.Millisecond}

// goqiteSchema is goqite v0.4.0's schema_sqlite.sql, which its README
// asks the user to run (the README's copy lacks the priority column that
// v0.4.0's queries use).
const goqiteSchema = `
create table goqite (
  id text primary key default ('m_' || lower(hex(randomblob(16)))),
  created text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  updated text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  queue text not null,
  body blob not null,
  timeout text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  received integer not null default 0,
  priority integer not null default 0
) strict;

create trigger goqite_updated_timestamp after update on goqite begin
  update goqite set updated = strftime('%Y-%m-%dT%H:%M:%fZ') where id = old.id;
end;

create index goqite_queue_priority_created_idx on goqite (queue, priority desc, created);
`

func goqiteSQLite(sync, group, model string, cfg goqiteCfg, tuned bool) *contender {
	return &contender{
		Key:  fmt.Sprintf("sqlite-%s/goqite-%s-%s", sync, model, tunedWord(tuned)),
		Name: "goqite (jobs runner), " + model + ", " + settingsWord(tuned), Group: group, Peer: "goqite", Tuned: tuned,
		Model: modelText(model), Slow: !tuned && model == modelChain,
		Settings: cfg.String() + "; `database/sql` + modernc, one connection, WAL, the table's `synchronous`", Tuning: cfg.String(),
		Run: func(ctx context.Context, e *drainEnv) (time.Duration, error) {
			return e.withPeerSQLite("goqite.db", sync, func(db *sql.DB) (time.Duration, error) {
				return goqiteRound(ctx, e, db, cfg, model)
			})
		},
	}
}

// goqiteMsg is a job message: one item (chain) or a whole job (loop).
type goqiteMsg struct {
	Job  int      `json:"job"`
	Idx  int      `json:"idx"`
	URLs []string `json:"urls,omitempty"` // loop
	URL  string   `json:"url,omitempty"`  // chain
}

func goqiteRound(ctx context.Context, e *drainEnv, db *sql.DB, cfg goqiteCfg, model string) (time.Duration, error) {
	if _, err := db.ExecContext(ctx, goqiteSchema); err != nil {
		return 0, err
	}
	side, err := newSQLiteSide(ctx, db)
	if err != nil {
		return 0, err
	}
	w := e.work
	q := goqite.New(goqite.NewOpts{DB: db, Name: "jobs"})
	r := jobs.NewRunner(jobs.NewRunnerOpts{Limit: cfg.Limit, PollInterval: cfg.PollInterval, Queue: q})
	finish := newFinishLine(w.Jobs)
	r.Register("bench", func(ctx context.Context, body []byte) error {
		var m goqiteMsg
		err := json.Unmarshal(body, &m)
		if err == nil {
			err = goqiteHandle(ctx, e, side, q, m, model, finish)
		}
		if err != nil {
			finish.failed(fmt.Errorf("job %d item %d: %w", m.Job, m.Idx, err))
		}
		return err
	})
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	stopped := make(chan struct{})
	go func() {
		r.Start(rctx)
		close(stopped)
	}()
	defer func() {
		stop()
		<-stopped
	}()
	time.Sleep(settle)
	start := time.Now()
	for j := range w.Jobs {
		urls := jobURLs(j, w.Items)
		m := goqiteMsg{Job: j, URL: urls[0]}
		if model == modelLoop {
			m = goqiteMsg{Job: j, URLs: urls}
		}
		if err := goqiteSend(ctx, side, q, m, func(tx *sql.Tx) error { return side.submitJob(ctx, tx, j, urls) }); err != nil {
			return 0, err
		}
	}
	if err := finish.wait(ctx); err != nil {
		return 0, err
	}
	elapsed := time.Since(start)
	return elapsed, side.check(ctx, w)
}

// goqiteSend runs before and enqueues m in one transaction.
func goqiteSend(ctx context.Context, side *sqliteSide, q *goqite.Queue, m goqiteMsg, before func(*sql.Tx) error) error {
	body, err := json.Marshal(m)
	if err != nil {
		return err
	}
	tx, err := side.begin(ctx)
	if err != nil {
		return err
	}
	defer side.rollback(ctx, tx)
	if err := before(tx); err != nil {
		return err
	}
	if _, err := jobs.CreateTx(ctx, tx, q, "bench", goqite.Message{Body: body}); err != nil {
		return err
	}
	return side.commit(ctx, tx)
}

func goqiteHandle(ctx context.Context, e *drainEnv, side *sqliteSide, q *goqite.Queue, m goqiteMsg, model string, finish *finishLine) error {
	w := e.work
	if model == modelLoop {
		for idx, u := range m.URLs {
			body := fetchItem(e, u)
			tx, err := side.begin(ctx)
			if err != nil {
				return err
			}
			err = side.storeItem(ctx, tx, m.Job, idx, body)
			if err == nil {
				err = side.commit(ctx, tx)
			}
			if err != nil {
				side.rollback(ctx, tx)
				return err
			}
		}
		finish.jobDone()
		return nil
	}
	body := fetchItem(e, m.URL)
	store := func(tx *sql.Tx) error { return side.storeItem(ctx, tx, m.Job, m.Idx, body) }
	if m.Idx+1 == w.Items {
		tx, err := side.begin(ctx)
		if err != nil {
			return err
		}
		defer side.rollback(ctx, tx)
		if err := store(tx); err != nil {
			return err
		}
		if err := side.commit(ctx, tx); err != nil {
			return err
		}
		finish.jobDone()
		return nil
	}
	return goqiteSend(ctx, side, q, goqiteMsg{Job: m.Job, Idx: m.Idx + 1, URL: itemURL(m.Job, m.Idx+1)}, store)
}
