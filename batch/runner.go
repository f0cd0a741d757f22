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

	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchobserve"
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
	store   batchdriver.Store
	caps    batchdriver.Capabilities
	log     *slog.Logger
	obs     batchobserve.Observer // nil for none
	metrics *runnerMetrics
	waiters waiters
	health  storeHealth
	queued  queuedDeadlines // the deadlines of jobs queued here, for the deadline timer
	gate    *gate           // the per-host limits, and the jobs parked to wait

	// hostClock: the host gave Config.Now, so store calls carry its time
	// (see [Runner.at]).
	hostClock bool

	wake     chan struct{} // a token wakes one idle worker (one of Drains)
	slots    chan struct{} // one token per running fetch goroutine: at most Workers
	hookWake chan struct{} // a token wakes the webhook deliverer

	// accepting is held shared by Submit from its state check until its
	// insert is done, and exclusively by Close while it flips the state, so
	// no job is accepted once Close has begun.
	accepting sync.RWMutex

	mu          sync.Mutex
	state       int                     // stateNew, stateStarted, stateClosed
	stop        chan struct{}           // closed by Close: stop taking work
	closed      chan struct{}           // closed once every goroutine has returned
	fetchCtx    context.Context         // parent of every fetch; cancelled by Close
	cancelFetch context.CancelCauseFunc // cancels fetchCtx with cause ErrClosed
	unsubscribe func()                  // stops the store's change feed, if any
	wg          sync.WaitGroup          // workers, sweeper, deadline timer, heartbeat, webhook deliverer
	fetchWG     sync.WaitGroup          // fetch goroutines, including abandoned ones
	closeOnce   sync.Once

	// unfetched are the jobs whose drain Close stopped before their
	// target in flight reached the fetcher: the hand-back of Close puts
	// those targets back to pending without counting an attempt.
	unfetchedMu sync.Mutex
	unfetched   []string
}

const (
	stateNew = iota
	stateStarted
	stateClosed
)

// storeTimeout bounds each store call the runner makes in the background.
const storeTimeout = 30 * time.Second

// reasonRestart is the error of a job failed because its runner restarted,
// closed or went stale.
const reasonRestart = "restart"

// reasonInterrupted is the error of a target cut short because its runner
// stopped, when its job is handed on (Config.Resume).
const reasonInterrupted = "interrupted"

// New returns a runner for cfg, or an error naming every invalid field. It
// does not touch the store; [Runner.Start] does.
func New(cfg Config) (*Runner, error) {
	hostClock := cfg.Now != nil
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
	r := &Runner{
		cfg:         cfg,
		hostClock:   hostClock,
		store:       cfg.Store,
		caps:        cfg.Store.Capabilities(),
		log:         cfg.Logger,
		obs:         cfg.Observer,
		metrics:     newRunnerMetrics(cfg.MetricsPrefix),
		waiters:     waiters{m: make(map[waitKey]*waiter), writing: make(map[string]int)},
		queued:      queuedDeadlines{m: make(map[string]time.Time), wake: make(chan struct{}, 1)},
		wake:        make(chan struct{}, cfg.Drains),
		slots:       make(chan struct{}, cfg.Workers),
		hookWake:    make(chan struct{}, 1),
		stop:        make(chan struct{}),
		closed:      make(chan struct{}),
		fetchCtx:    fetchCtx,
		cancelFetch: cancel,
	}
	r.gate = newGate(r)
	return r, nil
}

// Metrics returns the runner's metric set. The host exposes it, e.g. with
// batchserver.Metrics (which adds # HELP and # TYPE lines from
// [Runner.MetricsHelp]), [metrics.Set.WritePrometheus] or
// [metrics.RegisterSet].
func (r *Runner) Metrics() *metrics.Set { return r.metrics.set }

// MetricsHelp returns the # HELP text of each metric family in
// [Runner.Metrics], by its full name (with Config.MetricsPrefix), such as
// "batch_jobs_total". Each call returns a new map.
func (r *Runner) MetricsHelp() map[string]string {
	help := make(map[string]string, len(metricsHelp))
	for suffix, text := range metricsHelp {
		help[r.cfg.MetricsPrefix+suffix] = text
	}
	return help
}

// ID returns the runner's id, as recorded on the jobs it drains.
func (r *Runner) ID() string { return r.cfg.RunnerID }

// Start fails (with Config.Resume: hands on) the jobs this runner can no
// longer finish, then starts the
// workers, the sweeper, the deadline timer, the heartbeat and, with Config.Deliver, the webhook
// deliverer, and returns. On a store that
// serves one process (see [Capabilities]) that is every queued or running
// job, left by a previous process; on a shared store, the jobs held under
// this runner's id, while queued jobs are left for whoever claims them.
// Those of runners whose heartbeat is older than Config.StaleAfter are
// failed after a first continuous StaleAfter without a store failure (see
// docs/design/liveness.md in the repository), so a node started right after an
// outage does not take the live nodes for dead.
// Failed jobs get error "restart" and so does their target in flight; jobs
// are never resumed, unless Config.Resume: then they are queued again under
// the same id and their target in flight ends "interrupted" (or, with
// Config.RepeatInterrupted, is fetched again). Start returns an error if the runner was already
// started or closed, or if the store fails.
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
	r.health.troubled(now) // nothing known of the store before: see storeHealth
	p := r.reapParams(now)
	if r.caps.Shared {
		p.Runner = r.cfg.RunnerID // stale runners: after StaleAfter (storeHealth)
	} else {
		p.AllLive = true
	}
	msg := "batch jobs failed by restart"
	if p.HandBack {
		msg = "batch jobs handed on"
	}
	if _, err := r.reap(ctx, p, "start", msg); err != nil {
		return fmt.Errorf("batch: start: %w", err)
	}
	if err := r.store.Heartbeat(ctx, batchdriver.HeartbeatParams{Runner: r.cfg.RunnerID, Now: r.at(now)}); err != nil {
		return fmt.Errorf("batch: start: heartbeat: %w", err)
	}
	r.state = stateStarted
	r.unsubscribe = r.subscribe(ctx)
	r.wg.Add(r.cfg.Drains + 3)
	for range r.cfg.Drains {
		go r.worker()
	}
	go r.sweeper()
	go r.deadlines()
	go r.heartbeat()
	if r.cfg.Deliver != nil {
		r.wg.Add(1)
		go r.webhooks()
	}
	return nil
}

// reapParams are the parameters of a reap at now of the jobs of a runner
// that died or restarted: failed as "restart", or with Config.Resume handed
// on, their targets in flight interrupted (or repeated, with
// Config.RepeatInterrupted).
func (r *Runner) reapParams(now time.Time) batchdriver.ReapParams {
	if !r.cfg.Resume {
		return batchdriver.ReapParams{Reason: reasonRestart, Now: r.at(now)}
	}
	return batchdriver.ReapParams{Reason: reasonInterrupted, HandBack: true,
		RepeatInFlight: r.cfg.RepeatInterrupted, Now: r.at(now)}
}

// reap runs one [Store.Reap], counts and logs the jobs it failed or handed
// on.
func (r *Runner) reap(ctx context.Context, p batchdriver.ReapParams, reason, msg string) (n int, err error) {
	ctx, end := r.observeReap(ctx, reason)
	defer func() { end(batchobserve.ReapEnd{Jobs: n, Err: err}) }()
	began := time.Now()
	n, err = r.store.Reap(ctx, p)
	r.recordStoreCall("reap", began, err)
	if err != nil {
		return 0, fmt.Errorf("reap: %w", err)
	}
	if p.HandBack {
		r.metrics.jobs[jobHandedOn].Add(n)
		r.wakeWorkers() // a job handed back is queued again
	} else {
		r.metrics.jobs[jobRestart].Add(n)
	}
	r.wakeWebhooks() // a reaped job may have got its event
	if n > 0 {
		r.log.LogAttrs(ctx, slog.LevelWarn, msg, slog.Int("jobs", n))
	}
	return n, nil
}

// Close stops the runner: it takes no more work, cancels in-flight fetches
// and webhook deliveries (their context's cause is [ErrClosed]), waits for
// the workers, the sweeper, the deadline timer, the heartbeat and the deliverer to return,
// fails the jobs it still holds as "restart" (a fetch cut short is not
// stored) and releases its webhook claims (a delivery cut short is
// attempted again), and waits for every fetch goroutine, or for ctx to be
// done. Close is idempotent and safe on a
// runner never started.
//
// With Config.Resume, Close hands its jobs on instead: a drain between two
// targets starts no next one, the fetches in flight (and deliveries) get
// Config.CloseGrace, or until ctx is done, to finish and be stored, and a
// fetch still running then is cut short and its target stored failed with
// outcome "interrupted" (with Config.RepeatInterrupted it is left pending
// instead). Every job it still holds is then queued again, released, with
// its pending targets pending, for any runner sharing the store (or the
// next Start) to continue under the same id.
func (r *Runner) Close(ctx context.Context) error {
	r.closeOnce.Do(func() {
		r.accepting.Lock()
		r.mu.Lock()
		started := r.state == stateStarted
		r.state = stateClosed
		r.mu.Unlock()
		r.accepting.Unlock()
		close(r.stop)
		cutShort := func() {}
		if r.cfg.Resume && started {
			// The fetches in flight get their grace, or what is left of
			// ctx; the drains start no next target meanwhile.
			grace := time.AfterFunc(time.Duration(r.cfg.CloseGrace), func() { r.cancelFetch(ErrClosed) })
			stopCtx := context.AfterFunc(ctx, func() { r.cancelFetch(ErrClosed) })
			cutShort = func() { grace.Stop(); stopCtx(); r.cancelFetch(ErrClosed) }
		} else {
			r.cancelFetch(ErrClosed)
		}
		go func() { // one waiter, however often Close is called
			r.wg.Wait()
			cutShort()
			if started {
				r.unsubscribe()
				r.endParked(r.gate.close())
				r.release()
			}
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

// release fails the jobs this runner still holds, once its workers have
// returned, and forgets its heartbeat.
func (r *Runner) release() {
	ctx, cancel := storeCtx()
	defer cancel()
	p := batchdriver.ReapParams{Runner: r.cfg.RunnerID, Reason: reasonRestart, Now: r.now()}
	msg := "batch jobs failed by close"
	if r.cfg.Resume {
		// Every target still in flight in the store was never fetched
		// (Unfetched: no attempt counted), or was cut short with
		// RepeatInterrupted (or its write failed) and may have reached the
		// upstream: the drains stored the interrupted ones themselves.
		p.Reason, p.HandBack, p.RepeatInFlight = reasonInterrupted, true, true
		r.unfetchedMu.Lock()
		p.Unfetched = r.unfetched
		r.unfetchedMu.Unlock()
		msg = "batch jobs handed on"
	}
	if _, err := r.reap(ctx, p, "close", msg); err != nil {
		r.log.LogAttrs(ctx, slog.LevelError, "batch close failed to release its jobs", storeErrAttrs(err)...)
	}
}

// endParked ends the drains that Close found parked, waiting for their
// host or a busy fetcher: their target in hand was not fetched in this
// turn, so with Resume the hand-back puts it back to pending, and
// otherwise the release fails the job.
func (r *Runner) endParked(ds []*jobDrain) {
	for _, d := range ds {
		d.stopped = "closed"
		if r.cfg.Resume {
			r.notFetched(d.job.ID)
			d.stopped = "handed_on"
		}
		d.log.LogAttrs(context.Background(), slog.LevelInfo, "batch job stopped by close while it waited", slog.Int("next_idx", d.next))
		r.endDrain(d)
	}
}

// notFetched records that Close stopped the drain of jobID before its
// target in flight reached the fetcher.
func (r *Runner) notFetched(jobID string) {
	r.unfetchedMu.Lock()
	r.unfetched = append(r.unfetched, jobID)
	r.unfetchedMu.Unlock()
}

// wakeWorkers wakes every idle worker, for jobs queued again.
func (r *Runner) wakeWorkers() {
	for range cap(r.wake) {
		select {
		case r.wake <- struct{}{}:
		default: // every worker already has a wake-up pending
			return
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

// waiters are the per-job wake-ups of [Runner.Wait]: a change to one job
// wakes the waiters of that job only, and a waiter for the job's end only
// sleeps through this runner's target writes that leave the job live.
type waiters struct {
	mu sync.Mutex
	m  map[waitKey]*waiter
	// writing counts this runner's target writes under way per job. The
	// store's change feed reports such a write before it returns, and the
	// runner itself as it returns; the first is dropped, so that a waiter
	// reads the job once per write, not twice. A change by another runner
	// reported meanwhile is dropped too: it was committed before its
	// report, so the read that the write's end wakes sees it, but a waiter
	// for the job's end that the write leaves asleep finds that change at
	// its next poll.
	writing map[string]int
}

// waitKey is a job and whether its waiters wait for the job's end only.
type waitKey struct {
	id      string
	endOnly bool
}

type waiter struct {
	ch   chan struct{} // closed at the job's next change
	refs int
}

// watch returns a channel closed at the next change to job id (endOnly:
// at the next that may end the job), and a function to call once the
// channel is no longer waited on.
func (w *waiters) watch(id string, endOnly bool) (<-chan struct{}, func()) {
	k := waitKey{id, endOnly}
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.m[k]
	if !ok {
		e = &waiter{ch: make(chan struct{})}
		w.m[k] = e
	}
	e.refs++
	return e.ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if e.refs--; e.refs == 0 && w.m[k] == e {
			delete(w.m, k)
		}
	}
}

// notify wakes the waiters of job id.
func (w *waiters) notify(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wake(id, true)
}

// wake wakes the waiters of job id, and those for its end if ends. Called
// with w.mu held.
func (w *waiters) wake(id string, ends bool) {
	for _, k := range [2]waitKey{{id, false}, {id, true}} {
		if e, ok := w.m[k]; ok && (ends || !k.endOnly) {
			close(e.ch)
			delete(w.m, k)
		}
	}
}

// fed is notify for a change the store's feed reported: dropped while this
// runner writes to the job, whose end wakes the waiters.
func (w *waiters) fed(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.writing[id] == 0 {
		w.wake(id, true)
	}
}

// write marks a write to job id under way; the function it returns ends it
// and wakes the job's waiters, those for its end only if the write may
// have ended it.
func (w *waiters) write(id string) (end func(ended bool)) {
	w.mu.Lock()
	w.writing[id]++
	w.mu.Unlock()
	return func(ended bool) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.writing[id]--; w.writing[id] == 0 {
			delete(w.writing, id)
		}
		w.wake(id, ended)
	}
}

// now is the Now of a store call made at this moment: nil, the store's own
// clock, unless the host gave Config.Now (see the clock note on
// [CreateParams]).
func (r *Runner) now() *time.Time {
	if !r.hostClock {
		return nil
	}
	return r.at(r.cfg.Now())
}

// at is the Now of a store call at t, a time of Config.Now: nil unless the
// host gave Config.Now, so that several calls of one step carry one time.
func (r *Runner) at(t time.Time) *time.Time {
	if !r.hostClock {
		return nil
	}
	return &t
}
