package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/siftfetch/batchkit/batch"
)

// The drain: the workload every contender runs, and the rounds that run
// them.
//
// One round submits drainWork.Jobs jobs of drainWork.Items items in a
// burst to workers that are already running; each item is handled by a
// zero-latency handler whose result (an envelope of ResultBytes) is
// stored, and the items of one job run one at a time, in order. The round
// ends when the last item's result is committed. Each contender runs once
// per round, on a new database file or schema of its own, and the order
// of the contenders turns by one each round, so that all of them see the
// same machine; a round's ratios are taken within the round.

// drainWork is the size of one round.
type drainWork struct {
	Jobs, Items, ResultBytes int
}

func (w drainWork) total() int { return w.Jobs * w.Items }

// drainEnv is what every contender gets.
type drainEnv struct {
	work     drainWork
	content  string // a fetched page whose envelope is ResultBytes long
	envelope []byte // that envelope: what every contender stores per item
	dir      string // where round files go
	pgURL    string // "" when PostgreSQL is not up
}

func newDrainEnv(work drainWork, dir, pgURL string) (*drainEnv, error) {
	content := pageText(work.ResultBytes - len(`{"content":""}`))
	env, err := batch.Result{Content: content}.Envelope()
	if err != nil {
		return nil, err
	}
	return &drainEnv{work: work, content: content, envelope: env, dir: dir, pgURL: pgURL}, nil
}

// pageText returns n bytes of English-like words, so that PostgreSQL's
// lz4 column compresses a result about as much as a real page's (a page of
// one repeated byte would compress to nothing and flatter every
// PostgreSQL contender alike).
func pageText(n int) string {
	words := strings.Fields("the of and to in is was for on that with as by at from his her an were are which this be " +
		"or has had not first one their its new after who they have two been more other also into all but time " +
		"only may over three when most some would such these about world than between city during where state")
	rng := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(words[rng.IntN(len(words))])
		b.WriteByte(' ')
	}
	return b.String()[:n]
}

// itemURL is item idx of job j: every contender handles the same URLs.
func itemURL(j, idx int) string { return fmt.Sprintf("https://bench.example/%d/%d", j, idx) }

// roundDir makes a directory for one round's files and returns a function
// that removes it: a run writes gigabytes, and files left until the end
// would leave their dirty pages to the kernel's writeback, stalling later
// rounds at random.
func (e *drainEnv) roundDir() (string, func(), error) {
	dir, err := os.MkdirTemp(e.dir, "round-")
	if err != nil {
		return "", nil, err
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}

// contender is one way of draining the workload.
type contender struct {
	Key      string // stable id, e.g. "sqlite-normal/batchkit"
	Group    string // the table it belongs to: sqliteNormal, sqliteFull or postgres
	Name     string // e.g. "River (riversqlite), tuned"
	Peer     string // "batchkit", "raw", "river", "goqite"
	Tuned    bool   // a tuned peer configuration (else README settings)
	Model    string // how it models a job of serial items
	Settings string // its configuration, as it is reported
	Tuning   string // the peer's own settings alone, for the sweep table
	// Slow contenders run only in the first slowRounds rounds of a run.
	Slow bool
	Run  func(ctx context.Context, e *drainEnv) (time.Duration, error)
}

// Table groups.
const (
	sqliteNormal = "SQLite, synchronous=NORMAL"
	sqliteFull   = "SQLite, synchronous=FULL"
	postgres     = "PostgreSQL"
	postgres4    = "PostgreSQL, 4 workers"
)

// pgKey is the key prefix of a PostgreSQL group's contenders.
func pgKey(group string) string {
	if group == postgres4 {
		return "postgres4"
	}
	return "postgres"
}

// drainResult is what a run measured: each contender's items/s per round
// (NaN where it did not run).
type drainResult struct {
	Work       drainWork
	Rounds     int
	Contenders []*contender
	Rates      map[string][]float64
	Elapsed    time.Duration
}

// runDrain runs rounds rounds of every contender, slow ones in the first
// slowRounds only, and fails on the first contender that breaks.
func runDrain(ctx context.Context, e *drainEnv, cs []*contender, rounds, slowRounds int, logf func(string, ...any)) (*drainResult, error) {
	res := &drainResult{Work: e.work, Rounds: rounds, Contenders: cs, Rates: map[string][]float64{}}
	start := time.Now()
	for _, c := range cs {
		res.Rates[c.Key] = make([]float64, rounds)
		for i := range rounds {
			res.Rates[c.Key][i] = math.NaN()
		}
	}
	for round := range rounds {
		for k := range cs {
			c := cs[(k+round)%len(cs)]
			if c.Slow && round >= slowRounds {
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, roundTimeout)
			d, err := c.Run(rctx, e)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("drain round %d, %s: %w", round+1, c.Key, err)
			}
			rate := float64(e.work.total()) / d.Seconds()
			res.Rates[c.Key][round] = rate
			logf("drain round %d/%d  %-48s %8.0f items/s (%s)", round+1, rounds, c.Key, rate, d.Round(time.Millisecond))
		}
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// roundTimeout bounds one contender's round: a contender that takes longer
// is broken.
const roundTimeout = 3 * time.Minute

// finishLine counts the jobs whose last item is stored and tells when all
// are, or when a handler failed: a peer would retry a failed item with
// back-off, and the round must end at once instead.
type finishLine struct {
	want int64
	done atomic.Int64
	all  chan struct{}
	once sync.Once
	err  atomic.Pointer[error]
	fail chan struct{}
	fo   sync.Once
}

func newFinishLine(jobs int) *finishLine {
	return &finishLine{want: int64(jobs), all: make(chan struct{}), fail: make(chan struct{})}
}

// jobDone records that one job's last item is stored.
func (f *finishLine) jobDone() {
	if f.done.Add(1) == f.want {
		f.once.Do(func() { close(f.all) })
	}
}

// failed records a handler's error; the first one ends the round.
func (f *finishLine) failed(err error) {
	f.fo.Do(func() {
		f.err.Store(&err)
		close(f.fail)
	})
}

// wait returns when every job is done, a handler failed, or ctx ends.
func (f *finishLine) wait(ctx context.Context) error {
	select {
	case <-f.all:
		return nil
	case <-f.fail:
		return *f.err.Load()
	case <-ctx.Done():
		return fmt.Errorf("%d of %d jobs done: %w", f.done.Load(), f.want, ctx.Err())
	}
}

// errShort is returned by a check that found fewer stored results than
// the round handled.
var errShort = errors.New("stored results do not match the work")

// checkCounts fails unless results rows and jobs rows, each counting
// items, match the work.
func checkCounts(w drainWork, results, fullJobs int) error {
	if results != w.total() || fullJobs != w.Jobs {
		return fmt.Errorf("%w: %d results, %d complete jobs; want %d and %d", errShort, results, fullJobs, w.total(), w.Jobs)
	}
	return nil
}
