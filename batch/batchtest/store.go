package batchtest

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// Store is an in-memory [batch.Store], safe for concurrent use. Every method
// runs under one mutex, which makes each one atomic as the interface
// requires. It passes [TestStore], [TestRunner] and [TestStoreReopen] and is
// the reference the other stores are checked against. [NewStore] returns one that serves one
// process, like the SQLite store; [NewSharedStore] one that behaves like a
// store shared by several nodes, so that the cluster cases of the suites run
// against it. Its clock, for a call without a Now, is time.Now.
type Store struct {
	shared bool

	mu    sync.Mutex
	jobs  map[string]*memJob
	seq   int64 // insertion order, the tie-break of equal creation times
	bytes int64
	beats map[string]time.Time // runner id → last heartbeat
	hooks map[string]*memHook  // job id → its pending webhook event
	hosts map[string]*memHost  // gate key → its slots and waits
	// slotSeq numbers the host slots.
	slotSeq int64

	subMu   sync.Mutex
	subs    map[int]func(string) // the change feed's subscribers
	nextSub int
}

type memJob struct {
	seq     int64
	job     batchdriver.Job
	targets []batchdriver.TargetRecord
	cursor  int // idx of the target in flight; -1 for none
}

// memHook is a pending webhook event: its delivery as the next claim
// returns it, when it became due, when it is due next, and who claimed it.
// A job with per-target events keeps one from its create on (see
// [batchdriver.HookTargets]): events, cursor, ready, upto and finished are
// its stream's state, and it waits idle (due at never) while nothing is
// to be sent.
type memHook struct {
	d        batchdriver.WebhookDelivery
	dueSince time.Time
	dueAt    time.Time
	runner   string

	events   batchdriver.HookEvents
	cursor   int  // the targets delivered
	ready    int  // the targets finished, as the drain wrote them
	upto     int  // the end of the targets of the event out, fixed at its first claim; cursor for none
	finished bool // the job finished: d holds its snapshot
}

// never is the due time of an idle event.
var never = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// stream reports whether h carries a job's per-target events.
func (h *memHook) stream() bool { return h.events.Has(batchdriver.HookTargets) }

// due makes an idle event due at now.
func (h *memHook) due(now time.Time) {
	if h.runner == "" && h.dueAt.Equal(never) {
		h.dueAt, h.dueSince = now, now
	}
}

var (
	_ batchdriver.Store      = (*Store)(nil)
	_ batchdriver.ChangeFeed = (*Store)(nil)
)

// NewStore returns an empty in-memory store that serves one process: its
// Capabilities say it is not Shared.
func NewStore() *Store {
	return &Store{
		jobs: make(map[string]*memJob), beats: make(map[string]time.Time), hooks: make(map[string]*memHook),
		hosts: make(map[string]*memHost),
		subs:  make(map[int]func(string)),
	}
}

// NewSharedStore returns an empty in-memory store with the semantics of a
// store that several nodes share: its Capabilities say Shared, so a
// starting runner fails only its own and stale jobs.
func NewSharedStore() *Store {
	s := NewStore()
	s.shared = true
	return s
}

// copyTargets returns a deep copy of j's targets, with or without results.
func (j *memJob) copyTargets(withResults bool) []batchdriver.TargetRecord {
	out := slices.Clone(j.targets)
	for i := range out {
		if withResults {
			out[i].Result = slices.Clone(out[i].Result)
		} else {
			out[i].Result = nil
		}
	}
	return out
}

// locked runs fn under the store's lock, unless ctx is already done.
func (s *Store) locked(ctx context.Context, fn func() error) error {
	if err := context.Cause(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return fn()
}

// withOwned runs fn under the lock on the caller's job, or returns
// ErrNotFound for an unknown or foreign id.
func (s *Store) withOwned(ctx context.Context, caller, jobID string, fn func(j *memJob) error) error {
	return s.locked(ctx, func() error {
		j, ok := s.jobs[jobID]
		if !ok || j.job.Caller.Name != caller {
			return batch.ErrNotFound
		}
		return fn(j)
	})
}

// Subscribe implements [batch.ChangeFeed]: every change made through any
// runner is reported, as a database's notifications would report it to
// every node. (A store that serves one process needs no feed; this one has
// it either way, so that the cluster cases can check how runners use it.)
func (s *Store) Subscribe(fn func(jobID string)) (stop func()) {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	id := s.nextSub
	s.nextSub++
	s.subs[id] = fn
	return func() {
		s.subMu.Lock()
		defer s.subMu.Unlock()
		delete(s.subs, id)
	}
}

// emit reports changed job ids ("" for a queued job) to the subscribers.
// It runs outside the store's lock.
func (s *Store) emit(ids ...string) {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	for _, fn := range s.subs {
		for _, id := range ids {
			fn(id)
		}
	}
}

// Capabilities implements [batch.Store].
func (s *Store) Capabilities() batchdriver.Capabilities {
	return batchdriver.Capabilities{Shared: s.shared}
}

// Create implements [batch.Store].
func (s *Store) Create(ctx context.Context, p batchdriver.CreateParams) (job batchdriver.Job, reused bool, err error) {
	now := memNow(p.Now)
	if len(p.Skipped) >= len(p.Targets) {
		return batchdriver.Job{}, false, batch.ErrNoTargets // nothing to drain
	}
	for i, f := range p.Skipped {
		if f.Idx < 0 || f.Idx >= len(p.Targets) || i > 0 && f.Idx <= p.Skipped[i-1].Idx {
			return batchdriver.Job{}, false, fmt.Errorf("batchtest: create: skipped targets must be the job's, in idx order, each once")
		}
	}
	err = s.locked(ctx, func() error {
		var reuse *memJob
		callerLive, totalLive := 0, 0
		for _, j := range s.jobs {
			if j.job.Status.Live() {
				totalLive++
				if j.job.Caller.Name == p.Caller.Name {
					callerLive++
				}
			}
			if j.job.Caller.Name != p.Caller.Name || j.job.IdemKey != p.IdemKey ||
				j.job.Status == batch.JobCancelled || j.job.Status == batch.JobFailed ||
				!j.job.Lease.Add(p.Limits.TTL).After(now) {
				continue
			}
			if reuse == nil || j.seq > reuse.seq {
				reuse = j
			}
		}
		if reuse != nil {
			reuse.job.Lease = now
			job, reused = reuse.job, true
			return nil
		}
		if callerLive >= p.Limits.JobsPerCaller {
			return batch.ErrCallerBusy
		}
		if p.WebhookURL != "" && p.Limits.WebhooksPerCaller > 0 &&
			s.pendingHooks(p.Caller.Name) >= p.Limits.WebhooksPerCaller {
			return batch.ErrWebhooksBusy
		}
		if totalLive >= p.Limits.JobsTotal {
			return batch.ErrBusy
		}
		if _, dup := s.jobs[p.ID]; dup {
			return fmt.Errorf("batchtest: create: job id %s exists", p.ID)
		}
		s.seq++
		if p.WebhookURL != "" && p.WebhookEvents.Has(batchdriver.HookTargets) {
			s.hooks[p.ID] = &memHook{
				d: batchdriver.WebhookDelivery{JobID: p.ID, Caller: p.Caller.Name, URL: p.WebhookURL,
					TargetsTotal: len(p.Targets), CreatedAt: now, Deadline: p.Deadline, Metadata: maps.Clone(p.Metadata)},
				events: p.WebhookEvents, dueAt: never,
			}
		}
		j := &memJob{seq: s.seq, cursor: -1, job: batchdriver.Job{
			ID:            p.ID,
			Caller:        p.Caller,
			IdemKey:       p.IdemKey,
			Status:        batch.JobQueued,
			TargetsTotal:  len(p.Targets),
			CreatedAt:     now,
			Lease:         now,
			RetryOf:       p.RetryOf,
			RetryIdx:      slices.Clone(p.RetryIdx),
			WebhookURL:    p.WebhookURL,
			WebhookEvents: p.WebhookEvents,
			Trace:         p.Trace,
			Deadline:      p.Deadline,
			Metadata:      maps.Clone(p.Metadata),
			CustomIDs:     slices.Clone(p.CustomIDs),
		}}
		for i, t := range p.Targets {
			j.targets = append(j.targets, batchdriver.TargetRecord{Idx: i, Target: t, Status: batch.TargetPending, Attempts: 1})
		}
		for _, f := range p.Skipped {
			t := &j.targets[f.Idx]
			t.Status, t.Error, t.Hint, t.Outcome = batch.TargetFailed, f.Error, f.Hint, f.Outcome
			j.job.Skipped = append(j.job.Skipped, f.Idx)
			j.job.TargetsDone++
			s.addBytes(j, t.Bytes())
		}
		s.jobs[p.ID] = j
		job = j.job
		return nil
	})
	if err == nil && !reused {
		s.emit("")
	}
	return job, reused, err
}

// Claim implements [batch.Store].
func (s *Store) Claim(ctx context.Context, p batchdriver.ClaimParams) (c batchdriver.Claimed, ok bool, err error) {
	now := memNow(p.Now)
	err = s.locked(ctx, func() error {
		var oldest *memJob
		queued := 0
		for _, j := range s.jobs {
			if j.job.Status != batch.JobQueued {
				continue
			}
			queued++
			if oldest == nil || j.job.CreatedAt.Before(oldest.job.CreatedAt) ||
				j.job.CreatedAt.Equal(oldest.job.CreatedAt) && j.seq < oldest.seq {
				oldest = j
			}
		}
		if oldest == nil {
			return nil
		}
		oldest.job.Status = batch.JobRunning
		oldest.job.Runner = p.Runner
		next := slices.IndexFunc(oldest.targets, func(t batchdriver.TargetRecord) bool { return t.Status == batch.TargetPending })
		oldest.cursor = next // a queued job has a pending target: see handBack
		oldest.targets[next].Status = batch.TargetRunning
		s.beats[p.Runner] = later(s.beats[p.Runner], now)
		c = batchdriver.Claimed{Job: oldest.job, Targets: oldest.copyTargets(false), Next: next, Queued: queued - 1}
		ok = true
		return nil
	})
	if ok {
		s.emit(c.Job.ID)
	}
	return c, ok, err
}

// FinishTarget implements [batch.Store].
func (s *Store) FinishTarget(ctx context.Context, p batchdriver.FinishParams) (step batchdriver.Step, err error) {
	now := memNow(p.Now)
	fin := p.Target
	if !fin.Status.Finished() {
		return batchdriver.Step{}, fmt.Errorf("batchtest: finish target: status must be done or failed, got %q", fin.Status)
	}
	err = s.locked(ctx, func() error {
		j, ok := s.jobs[p.JobID]
		switch {
		case !ok:
			return batch.ErrNotFound
		case j.job.Runner != p.Runner || fin.Idx < 0 || fin.Idx >= len(j.targets):
			return batchdriver.ErrNotHeld
		case j.cursor != fin.Idx:
			if j.targets[fin.Idx].Status.Finished() { // a repeat of an applied write
				step = batchdriver.Step{Status: j.job.Status, Next: j.cursor}
				return nil
			}
			return batchdriver.ErrNotHeld
		}
		t := &j.targets[fin.Idx]
		t.Status, t.Error, t.Hint, t.Outcome = fin.Status, fin.Error, fin.Hint, fin.Outcome
		t.Result = slices.Clone(fin.Result)
		s.addBytes(j, t.Bytes())
		j.job.TargetsDone++
		j.job.Lease = now
		if h := s.hooks[j.job.ID]; h != nil && h.stream() {
			h.ready = max(h.ready, fin.Idx+1)
			h.due(now)
		}
		if p.Expire && j.job.Status == batch.JobRunning {
			s.expire(j)
		}
		if next := j.pendingAfter(fin.Idx); j.job.Status == batch.JobRunning && next >= 0 && !p.Expire {
			j.cursor = next
			j.targets[next].Status = batch.TargetRunning
			step = batchdriver.Step{Status: batch.JobRunning, Next: next}
			return nil
		}
		s.release(j, now)
		step = batchdriver.Step{Status: j.job.Status, Next: -1}
		return nil
	})
	if err == nil {
		s.emit(p.JobID)
	}
	return step, err
}

// pendingAfter returns the idx of j's first pending target after idx, or
// -1 for none: the targets skipped at create are never started.
func (j *memJob) pendingAfter(idx int) int {
	for i := idx + 1; i < len(j.targets); i++ {
		if j.targets[i].Status == batch.TargetPending {
			return i
		}
	}
	return -1
}

// expire ends j's pending targets as expired and, if there were any, gives
// it the deadline as its error; the caller gives it its final status.
func (s *Store) expire(j *memJob) int {
	n := 0
	for i := range j.targets {
		if t := &j.targets[i]; t.Status == batch.TargetPending {
			t.Status, t.Outcome, t.Error = batch.TargetFailed, batch.OutcomeExpired, batchdriver.DeadlineReason
			s.addBytes(j, t.Bytes())
			j.job.TargetsDone++
			n++
		}
	}
	if n > 0 {
		j.job.Error = batchdriver.DeadlineReason
	}
	return n
}

// Expire implements [batch.Store].
func (s *Store) Expire(ctx context.Context, p batchdriver.ExpireParams) (ended []batchdriver.Expired, err error) {
	now := memNow(p.Now)
	err = s.locked(ctx, func() error {
		for _, j := range s.jobs {
			if j.job.Status != batch.JobQueued || j.job.Deadline.IsZero() || j.job.Deadline.After(now) {
				continue
			}
			n := s.expire(j)
			j.job.Status = batch.JobRunning // so that release aggregates
			j.job.Lease = later(j.job.Lease, now)
			s.release(j, now)
			ended = append(ended, batchdriver.Expired{JobID: j.job.ID, Caller: j.job.Caller.Name, Status: j.job.Status,
				Targets: n, Webhook: j.job.WebhookURL != ""})
		}
		return nil
	})
	for _, e := range ended {
		s.emit(e.JobID)
	}
	return ended, err
}

// release ends a held job: a running job gets its final status from its
// targets, and the job no longer has a runner or a target in flight.
func (s *Store) release(j *memJob, now time.Time) {
	if j.job.Status == batch.JobRunning {
		okN, failedN := 0, 0
		for _, t := range j.targets {
			switch t.Status {
			case batch.TargetDone:
				okN++
			case batch.TargetFailed:
				failedN++
			}
		}
		j.job.Status = batchdriver.AggregateStatus(okN, failedN)
	}
	if j.job.FinishedAt.IsZero() {
		j.job.FinishedAt = now
	}
	j.job.Runner = ""
	j.cursor = -1
	s.finished(j, now)
}

// finished writes the webhook event of a job that has just become
// finished and released, if it has a webhook: under the same lock as the
// change, as a database store writes it in the same transaction.
// A job with per-target events has its event already: it takes the
// snapshot, and is due for the targets not yet delivered or the
// completion, or deleted when it has neither to send (a stream whose
// entry was dropped stays without one).
func (s *Store) finished(j *memJob, now time.Time) {
	if j.job.WebhookURL == "" {
		return
	}
	d := batchdriver.WebhookDelivery{
		JobID: j.job.ID, Caller: j.job.Caller.Name, URL: j.job.WebhookURL, Status: j.job.Status, Error: j.job.Error,
		TargetsTotal: j.job.TargetsTotal, CreatedAt: j.job.CreatedAt, FinishedAt: j.job.FinishedAt, Lease: j.job.Lease,
		Deadline: j.job.Deadline, Metadata: j.job.Metadata,
	}
	for _, t := range j.targets {
		switch t.Status {
		case batch.TargetDone:
			d.TargetsOK++
		case batch.TargetFailed:
			d.TargetsFailed++
		}
	}
	if j.job.WebhookEvents.Has(batchdriver.HookTargets) {
		h := s.hooks[j.job.ID]
		if h == nil || h.finished {
			return
		}
		d.Attempt = h.d.Attempt
		h.d, h.finished, h.ready = d, true, d.TargetsOK+d.TargetsFailed
		s.next(h, now)
		return
	}
	if _, dup := s.hooks[j.job.ID]; !dup {
		s.hooks[j.job.ID] = &memHook{d: d, dueSince: now, dueAt: now, finished: true}
	}
}

// next settles an idle stream: due for its next event, or deleted once
// it has none left.
func (s *Store) next(h *memHook, now time.Time) {
	switch {
	case h.runner != "" || !h.dueAt.Equal(never):
	case h.ready > h.cursor || h.finished && h.events.Has(batchdriver.HookFinished):
		h.due(now)
	case h.finished:
		delete(s.hooks, h.d.JobID)
	}
}

// pendingHooks counts the caller's pending webhook events: its events in
// the outbox and its jobs with a webhook that will get one (live, or held
// with a target in flight).
func (s *Store) pendingHooks(caller string) int {
	n := 0
	for _, h := range s.hooks {
		if h.d.Caller == caller && h.finished { // a live job's counts below
			n++
		}
	}
	for _, j := range s.jobs {
		if j.job.Caller.Name == caller && j.job.WebhookURL != "" && (j.job.Status.Live() || j.job.Runner != "") {
			n++
		}
	}
	return n
}

func (s *Store) addBytes(j *memJob, n int64) {
	j.job.Bytes += n
	s.bytes += n
}

// Cancel implements [batch.Store].
func (s *Store) Cancel(ctx context.Context, p batchdriver.CancelParams) error {
	now := memNow(p.Now)
	err := s.withOwned(ctx, p.Caller, p.JobID, func(j *memJob) error {
		if j.job.Status.Finished() {
			return batch.ErrFinished
		}
		j.job.Status = batch.JobCancelled
		j.job.FinishedAt = now
		j.job.Lease = now
		if j.cursor < 0 { // nothing in flight: the job is finished now
			s.finished(j, now)
		}
		return nil
	})
	if err == nil {
		s.emit(p.JobID)
	}
	return err
}

// Get implements [batch.Store].
func (s *Store) Get(ctx context.Context, p batchdriver.GetParams) (job batchdriver.Job, targets []batchdriver.TargetRecord, err error) {
	err = s.withOwned(ctx, p.Caller, p.JobID, func(j *memJob) error {
		job = j.job
		if !p.JobOnly {
			targets = j.copyTargets(p.Results)
		}
		return nil
	})
	return job, targets, err
}

// GetTarget implements [batch.Store].
func (s *Store) GetTarget(ctx context.Context, p batchdriver.GetTargetParams) (job batchdriver.Job, target batchdriver.TargetRecord, err error) {
	err = s.withOwned(ctx, p.Caller, p.JobID, func(j *memJob) error {
		if p.Idx < 0 || p.Idx >= len(j.targets) {
			return batch.ErrNotFound
		}
		job, target = j.job, j.targets[p.Idx]
		target.Result = slices.Clone(target.Result)
		return nil
	})
	return job, target, err
}

// List implements [batch.Store].
func (s *Store) List(ctx context.Context, p batchdriver.ListParams) (jobs []batchdriver.Job, err error) {
	err = s.locked(ctx, func() error {
		var mine []*memJob
		for _, j := range s.jobs {
			if j.job.Caller.Name == p.Caller && holds(j.job.Metadata, p.Metadata) {
				mine = append(mine, j)
			}
		}
		slices.SortFunc(mine, func(a, b *memJob) int {
			return cmp.Or(b.job.CreatedAt.Compare(a.job.CreatedAt), cmp.Compare(b.seq, a.seq))
		})
		for _, j := range mine[:min(len(mine), max(p.Limit, 0))] {
			jobs = append(jobs, j.job)
		}
		return nil
	})
	return jobs, err
}

// holds reports whether metadata holds every pair of want.
func holds(metadata, want map[string]string) bool {
	for k, v := range want {
		if got, ok := metadata[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Touch implements [batch.Store]. It writes every touch; it has nothing to
// gain from coalescing.
func (s *Store) Touch(ctx context.Context, p batchdriver.TouchParams) error {
	now := memNow(p.Now)
	return s.withOwned(ctx, p.Caller, p.JobID, func(j *memJob) error {
		j.job.Lease = later(j.job.Lease, now)
		return nil
	})
}

// remove deletes a job and takes its bytes off the total.
func (s *Store) remove(j *memJob) {
	delete(s.jobs, j.job.ID)
	s.bytes -= j.job.Bytes
}

// Sweep implements [batch.Store].
func (s *Store) Sweep(ctx context.Context, p batchdriver.SweepParams) (n int, err error) {
	now := memNow(p.Now)
	err = s.locked(ctx, func() error {
		for _, j := range s.jobs {
			if j.job.Status.Finished() && j.cursor < 0 && j.job.Lease.Before(now.Add(-p.TTL)) {
				s.remove(j)
				n++
			}
		}
		return nil
	})
	return n, err
}

// Evict implements [batch.Store]: while over budget, the oldest-lease
// evictable job of the caller holding the most bytes goes, one at a time,
// as long as that caller holds more than its share (p.MaxBytes divided by
// the number of callers holding bytes).
func (s *Store) Evict(ctx context.Context, p batchdriver.EvictParams) (n int, err error) {
	err = s.locked(ctx, func() error {
		if s.bytes <= p.MaxBytes {
			return nil
		}
		callers := shares{held: map[string]int64{}, evictable: map[string]int64{}, queues: map[string][]*memJob{}}
		for _, j := range s.jobs {
			callers.add(j)
		}
		for _, q := range callers.queues {
			slices.SortFunc(q, func(a, b *memJob) int {
				return cmp.Or(a.job.Lease.Compare(b.job.Lease), cmp.Compare(a.seq, b.seq))
			})
		}
		holders := int64(0)
		for _, b := range callers.held {
			if b > 0 {
				holders++
			}
		}
		for s.bytes > p.MaxBytes {
			c, ok := callers.largest()
			// Every other caller with an evictable job holds no more than
			// c: once c is within its share, so are they.
			if !ok || callers.held[c]*holders <= p.MaxBytes {
				break
			}
			j := callers.queues[c][0]
			callers.queues[c] = callers.queues[c][1:]
			callers.held[c] -= j.job.Bytes
			callers.evictable[c] -= j.job.Bytes
			if callers.held[c] == 0 {
				holders--
			}
			s.remove(j)
			n++
		}
		return nil
	})
	return n, err
}

// shares is what each caller holds, for Evict: its bytes (live jobs'
// included), the bytes of its evictable jobs, and those jobs.
type shares struct {
	held, evictable map[string]int64
	queues          map[string][]*memJob
}

func (c *shares) add(j *memJob) {
	name := j.job.Caller.Name
	c.held[name] += j.job.Bytes
	if j.job.Status.Finished() && j.cursor < 0 {
		c.evictable[name] += j.job.Bytes
		c.queues[name] = append(c.queues[name], j)
	}
}

// largest returns the caller that holds the most bytes among those whose
// evictable jobs hold any, the smaller name of equals.
func (c *shares) largest() (string, bool) {
	best, ok := "", false
	for name, b := range c.evictable {
		if b <= 0 {
			continue
		}
		if !ok || c.held[name] > c.held[best] || c.held[name] == c.held[best] && name < best {
			best, ok = name, true
		}
	}
	return best, ok
}

// Heartbeat implements [batch.Store].
func (s *Store) Heartbeat(ctx context.Context, p batchdriver.HeartbeatParams) error {
	now := memNow(p.Now)
	return s.locked(ctx, func() error {
		s.beats[p.Runner] = later(s.beats[p.Runner], now)
		return nil
	})
}

// Reap implements [batch.Store].
func (s *Store) Reap(ctx context.Context, p batchdriver.ReapParams) (n int, err error) {
	now := memNow(p.Now)
	var reaped []string
	defer func() { s.emit(reaped...) }()
	err = s.locked(ctx, func() error {
		stale := func(runner string) bool {
			if p.StaleAfter <= 0 {
				return false
			}
			beat, ok := s.beats[runner]
			return !ok || beat.Before(now.Add(-p.StaleAfter))
		}
		for _, j := range s.jobs {
			held := j.job.Runner != ""
			selected := p.AllLive && (j.job.Status.Live() || j.cursor >= 0) ||
				held && (j.job.Runner == p.Runner || stale(j.job.Runner))
			if !selected {
				continue
			}
			if p.HandBack {
				if s.handBack(j, p, now) {
					n++
					reaped = append(reaped, j.job.ID) // wakes the idle workers of a shared store
				}
				continue
			}
			if j.cursor >= 0 {
				t := &j.targets[j.cursor]
				t.Status, t.Error, t.Hint, t.Outcome = batch.TargetFailed, p.Reason, "", batch.OutcomeOther
				s.addBytes(j, t.Bytes())
				j.job.TargetsDone++
			}
			if j.job.Status.Live() {
				j.job.Status = batch.JobFailed
				j.job.Error = p.Reason
				j.job.FinishedAt = now
				j.job.Lease = now
				n++
			}
			j.job.Runner = ""
			j.cursor = -1
			s.finished(j, now)
			reaped = append(reaped, j.job.ID)
		}
		forgot := func(runner string) bool { return p.AllLive || runner == p.Runner || stale(runner) }
		s.forgetSlots(forgot)
		for runner := range s.beats {
			if forgot(runner) {
				delete(s.beats, runner)
			}
		}
		for _, h := range s.hooks {
			if h.runner != "" && (p.AllLive || h.runner == p.Runner) {
				h.runner, h.dueAt = "", earlier(h.dueAt, now)
			}
		}
		return nil
	})
	return n, err
}

// handBack hands a selected job back (see [batchdriver.ReapParams.HandBack])
// and reports whether it was live and so counts. A job no runner holds is
// left as it is.
func (s *Store) handBack(j *memJob, p batchdriver.ReapParams, now time.Time) bool {
	if j.job.Runner == "" && j.cursor < 0 {
		return false
	}
	if j.cursor >= 0 {
		t := &j.targets[j.cursor]
		if p.RepeatInFlight {
			t.Status = batch.TargetPending
			if !slices.Contains(p.Unfetched, j.job.ID) {
				t.Attempts++
			}
		} else {
			t.Status, t.Error, t.Hint, t.Outcome = batch.TargetFailed, p.Reason, "", batch.OutcomeInterrupted
			s.addBytes(j, t.Bytes())
			j.job.TargetsDone++
		}
	}
	live := j.job.Status.Live()
	pending := slices.ContainsFunc(j.targets, func(t batchdriver.TargetRecord) bool { return t.Status == batch.TargetPending })
	if j.job.Status != batch.JobRunning || !pending {
		s.release(j, now) // cancelled, or nothing left: finished by its targets
		return live
	}
	j.job.Status = batch.JobQueued
	j.job.Runner = ""
	j.job.HandedOn++
	j.job.Lease = later(j.job.Lease, now)
	j.cursor = -1
	return true
}

// ClaimWebhooks implements [batch.Store]: round-robin across callers,
// each caller's due events ranked oldest due first, within p.PerCaller.
func (s *Store) ClaimWebhooks(ctx context.Context, p batchdriver.ClaimWebhooksParams) (ds []batchdriver.WebhookDelivery, err error) {
	now := memNow(p.Now)
	err = s.locked(ctx, func() error {
		claimed := map[string]int{} // caller → events claimed under a live lease
		var due []*memHook
		for _, h := range s.hooks {
			switch {
			case !h.dueAt.After(now):
				due = append(due, h)
			case h.runner != "":
				claimed[h.d.Caller]++
			}
		}
		slices.SortFunc(due, func(a, b *memHook) int {
			return cmp.Or(a.dueAt.Compare(b.dueAt), cmp.Compare(a.d.JobID, b.d.JobID))
		})
		rank := make(map[*memHook]int, len(due))
		seen := map[string]int{}
		var pick []*memHook
		for _, h := range due {
			seen[h.d.Caller]++
			rank[h] = seen[h.d.Caller]
			if p.PerCaller <= 0 || claimed[h.d.Caller]+rank[h] <= p.PerCaller {
				pick = append(pick, h)
			}
		}
		slices.SortStableFunc(pick, func(a, b *memHook) int { return cmp.Compare(rank[a], rank[b]) })
		for _, h := range pick[:min(len(pick), max(p.Limit, 0))] {
			h.d.Attempt++
			h.runner, h.dueAt = p.Runner, now.Add(p.Lease)
			d := h.d
			d.Age, d.Since, d.Event = now.Sub(h.dueSince), h.dueSince, batchdriver.HookFinished
			if h.stream() {
				if h.upto <= h.cursor {
					h.upto = min(h.ready, h.cursor+batchdriver.MaxEventTargets)
				}
				d.Cursor = h.cursor
				if h.upto > h.cursor {
					d.Event, d.Targets = batchdriver.HookTargets, s.eventTargets(h)
					d.Status, d.Error, d.TargetsOK, d.TargetsFailed = "", "", 0, 0
					d.FinishedAt, d.Lease = time.Time{}, time.Time{}
				}
			}
			ds = append(ds, d)
		}
		return nil
	})
	return ds, err
}

// eventTargets reads the finished targets of h's event out, [cursor,
// upto), from its job; none once the job is gone.
func (s *Store) eventTargets(h *memHook) []batchdriver.WebhookTarget {
	out := []batchdriver.WebhookTarget{}
	j, ok := s.jobs[h.d.JobID]
	if !ok {
		return out
	}
	for _, t := range j.targets[h.cursor:min(h.upto, len(j.targets))] {
		if !t.Status.Finished() {
			continue
		}
		wt := batchdriver.WebhookTarget{Idx: t.Idx, Status: t.Status, Outcome: t.Outcome}
		if t.Idx < len(j.job.CustomIDs) {
			wt.CustomID = j.job.CustomIDs[t.Idx]
		}
		out = append(out, wt)
	}
	return out
}

// FinishWebhook implements [batch.Store].
func (s *Store) FinishWebhook(ctx context.Context, p batchdriver.FinishWebhookParams) error {
	now := memNow(p.Now)
	return s.locked(ctx, func() error {
		h, ok := s.hooks[p.JobID]
		if !ok || h.runner != p.Runner || h.d.Attempt != p.Attempt || h.cursor != p.Cursor {
			return batchdriver.ErrNotHeld
		}
		switch {
		case p.Retry:
			h.runner, h.dueAt = "", now.Add(p.RetryIn)
		case p.Drop || !h.stream() || h.upto <= h.cursor: // given up, or the last event
			delete(s.hooks, p.JobID)
		default: // the targets event is done: on to the next
			h.cursor, h.d.Attempt, h.runner, h.dueAt = h.upto, 0, "", never
			s.next(h, now)
		}
		return nil
	})
}

// Stats implements [batch.Store].
func (s *Store) Stats(ctx context.Context) (st batchdriver.Stats, err error) {
	err = s.locked(ctx, func() error {
		st.Bytes = s.bytes
		for _, j := range s.jobs {
			switch j.job.Status {
			case batch.JobQueued:
				st.Queued++
			case batch.JobRunning:
				st.Running++
			}
		}
		return nil
	})
	return st, err
}

// earlier returns the earlier of a and b.
func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// memNow is the time of a call whose Now is now: time.Now for nil, the
// store's own clock (see the clock note on [batch.CreateParams]).
func memNow(now *time.Time) time.Time {
	if now == nil {
		return time.Now()
	}
	return *now
}
