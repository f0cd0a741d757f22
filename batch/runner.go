package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/google/uuid"
)

// ErrNotStarted is returned by [Runner.Submit] before [Runner.Start]: Start
// fails every live job it finds, so a job accepted earlier would be lost.
var ErrNotStarted = errors.New("batch: runner not started")

// MaxWait caps the wait of [Runner.Wait].
const MaxWait = 60 * time.Second

// Runner accepts jobs, drains them in the background through the configured
// [FetchFunc], and answers owner-scoped reads. It is safe for concurrent use.
// Create one with [New], then call [Runner.Start]; call [Runner.Close] to
// stop it.
type Runner struct {
	cfg     Config
	store   Store
	log     *slog.Logger
	metrics *runnerMetrics

	wake  chan struct{} // a token wakes one idle worker
	slots chan struct{} // one token per running fetch goroutine: at most Workers

	// accepting is held shared by Submit from its state check until its
	// insert is done, and exclusively by Close while it flips the state, so
	// no job is accepted once Close has begun.
	accepting sync.RWMutex

	mu          sync.Mutex
	state       int // stateNew, stateStarted, stateClosed
	changed     chan struct{}
	stop        chan struct{}           // closed by Close: stop taking work
	closed      chan struct{}           // closed once every goroutine has returned
	fetchCtx    context.Context         // parent of every fetch; cancelled by Close
	cancelFetch context.CancelCauseFunc // cancels fetchCtx with cause ErrClosed
	wg          sync.WaitGroup          // workers and sweeper
	fetchWG     sync.WaitGroup          // fetch goroutines, including abandoned ones
	closeOnce   sync.Once
}

const (
	stateNew = iota
	stateStarted
	stateClosed
)

// storeTimeout bounds each store call the runner makes in the background.
const storeTimeout = 30 * time.Second

// New returns a runner for cfg, or an error naming every invalid field. It
// does not touch the store; [Runner.Start] does.
func New(cfg Config) (*Runner, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.RunnerID == "" {
		id, err := uuid.NewRandom()
		if err != nil {
			return nil, fmt.Errorf("batch: runner id: %w", err)
		}
		cfg.RunnerID = id.String()
	}
	fetchCtx, cancel := context.WithCancelCause(context.Background())
	return &Runner{
		cfg:         cfg,
		store:       cfg.Store,
		log:         cfg.Logger,
		metrics:     newRunnerMetrics(cfg.MetricsPrefix),
		wake:        make(chan struct{}, cfg.Workers),
		slots:       make(chan struct{}, cfg.Workers),
		changed:     make(chan struct{}),
		stop:        make(chan struct{}),
		closed:      make(chan struct{}),
		fetchCtx:    fetchCtx,
		cancelFetch: cancel,
	}, nil
}

// Metrics returns the runner's metric set. The host exposes it, e.g. with
// [metrics.Set.WritePrometheus] or [metrics.RegisterSet].
func (r *Runner) Metrics() *metrics.Set { return r.metrics.set }

// ID returns the runner's id, as recorded on the jobs it drains.
func (r *Runner) ID() string { return r.cfg.RunnerID }

// Start fails every job a previous process left queued or running (error
// "restart"; jobs are never resumed), then starts the workers and the
// sweeper and returns. It returns an error if the runner was already started
// or closed, or if the store fails.
func (r *Runner) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch r.state {
	case stateStarted:
		return errors.New("batch: runner already started")
	case stateClosed:
		return ErrClosed
	}
	now := r.cfg.Now()
	n, err := r.store.MarkInFlightFailed(ctx, r.cfg.RunnerID, "restart", now, now)
	if err != nil {
		return fmt.Errorf("batch: start: mark in-flight jobs failed: %w", err)
	}
	r.metrics.jobs[jobRestart].Add(n)
	if n > 0 {
		r.log.LogAttrs(ctx, slog.LevelWarn, "batch jobs failed by restart", slog.Int("jobs", n))
	}
	r.state = stateStarted
	r.wg.Add(r.cfg.Workers + 1)
	for range r.cfg.Workers {
		go r.worker()
	}
	go r.sweeper()
	return nil
}

// Close stops the runner: it takes no more work, cancels in-flight fetches
// (their context's cause is [ErrClosed]) and waits for the workers, the
// sweeper and every fetch goroutine to return, or for ctx to be done. A job
// whose fetch was cut short stays running in the store and is failed by the
// next Start. Close is idempotent and safe on a runner never started.
func (r *Runner) Close(ctx context.Context) error {
	r.closeOnce.Do(func() {
		r.accepting.Lock()
		r.mu.Lock()
		r.state = stateClosed
		r.mu.Unlock()
		r.accepting.Unlock()
		close(r.stop)
		r.cancelFetch(ErrClosed)
		go func() { // one waiter, however often Close is called
			r.wg.Wait()
			r.fetchWG.Wait()
			close(r.closed)
		}()
	})
	done := r.closed
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		select {
		case <-done: // finished at the same moment
			return nil
		default:
			return fmt.Errorf("batch: close: %w", context.Cause(ctx))
		}
	}
}

// acceptErr returns why Submit may not accept work now, or nil.
func (r *Runner) acceptErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch r.state {
	case stateNew:
		return ErrNotStarted
	case stateClosed:
		return ErrClosed
	}
	return nil
}

// changes returns a channel closed at the next local state change.
func (r *Runner) changes() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// notify wakes everything waiting on changes.
func (r *Runner) notify() {
	r.mu.Lock()
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// refreshGauges sets the queue depth from the store.
func (r *Runner) refreshGauges(ctx context.Context) {
	st, err := r.store.Stats(ctx)
	if err != nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "batch stats failed", slog.String("err", err.Error()))
		return
	}
	r.metrics.queueDepth.Set(float64(st.Queued))
}
