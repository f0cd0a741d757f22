package pgstore

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// Group commit. Every drain write is one statement that commits on its
// own, so a store whose workers drain several jobs at once pays one
// commit (one WAL flush, the server's commit work, a round trip) per
// target. Instead, the drain writes of concurrently draining jobs that
// arrive while groups are at the server go together in the next group:
// one pgx.Batch of their statements, which the server runs in one
// implicit transaction (one round trip, one commit, one WAL flush).
//
//   - A write is acknowledged to its worker only once the group's commit
//     has returned: the batch's results are read first, but nothing is
//     answered before Close reports the commit.
//   - Fencing is per job, as before: each statement is the single write's
//     step, fenced by its job's row, and a step that matches no row (a
//     job's last target, a cancelled job, one the runner no longer holds,
//     one that is gone, a repeat) changes nothing and runs after the
//     commit as the full write, on its own, as a single write would.
//   - A write that fails fails its group's transaction, so nothing of the
//     group is stored; then every write of the group runs again on its
//     own, and only the one that fails again gets its error. (That also
//     covers a lost connection whose commit is unknown: a write that did
//     commit finds its target stored and gets its step, as any repeat of
//     a drain write does.)
//   - At most maxFlights groups are at the server at once per store, so a
//     write waits at most for one group in flight and its own, and a
//     write that finds a flight free goes at once. A group holds at most
//     maxGroup writes, and a group of one runs as the single write did.
//   - Within a group the writes run in job id order, so two groups (of
//     two nodes) never lock two jobs' rows in opposite orders; each job is
//     held by one runner anyway, and a step touches no other row.
//
// The caller of the write in flight first, or the first waiting writer
// after it, runs each group ("leads" it): no goroutine of its own, so a
// store that drains one job at a time pays nothing for the queue.

// maxFlights is how many groups may be at the server at once: more than
// one, so that a write that arrives while a group runs can start at once
// when a connection and a core are free, rather than wait for it (two
// workers then drain as fast as without groups); but few, so that writes
// that arrive together share a commit.
var maxFlights = 2

// maxGroup caps the writes of one group: the statements' work delays
// every write of the group, and the results' bytes are sent at once.
const maxGroup = 16

// finishReq is one drain write waiting for, or in, a group.
type finishReq struct {
	ctx  context.Context
	p    batchdriver.FinishParams
	args []any
	// Set by the group's leader before done is closed.
	step batchdriver.Step
	err  error
	// lead tells the waiting caller that it leads the next group; done
	// that its write's outcome is set.
	lead, done chan struct{}
}

// committer queues the drain writes of one store.
type committer struct {
	mu     sync.Mutex
	flying int // groups being led
	queue  []*finishReq
}

// queued reports how many writes wait for the next group (for tests).
func (c *committer) queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// finishGrouped runs the drain write r in the next group and returns its
// outcome once that group has committed, or r's context error if it ends
// before r is taken into a group.
func (s *Store) finishGrouped(r *finishReq) (batchdriver.Step, error) {
	c := &s.group
	c.mu.Lock()
	if c.flying < maxFlights {
		c.flying++
		c.mu.Unlock()
		s.lead(r)
		return r.step, r.err
	}
	r.lead, r.done = make(chan struct{}), make(chan struct{})
	c.queue = append(c.queue, r)
	c.mu.Unlock()
	select {
	case <-r.done:
		return r.step, r.err
	case <-r.lead:
		s.lead(r)
		return r.step, r.err
	case <-r.ctx.Done():
	}
	c.mu.Lock()
	if i := slices.Index(c.queue, r); i >= 0 { // not taken: give up the place
		c.queue = slices.Delete(c.queue, i, i+1)
		c.mu.Unlock()
		return batchdriver.Step{}, context.Cause(r.ctx)
	}
	c.mu.Unlock()
	// Taken into a group (or chosen to lead one): its outcome is coming,
	// within the group's own bound.
	select {
	case <-r.done:
	case <-r.lead:
		s.lead(r)
	}
	return r.step, r.err
}

// lead runs a group of first and the writes waiting behind it, then hands
// the lead to the next waiting write, if any, and answers the group's
// other writes.
func (s *Store) lead(first *finishReq) {
	c := &s.group
	c.mu.Lock()
	n := min(len(c.queue), maxGroup-1)
	group := append([]*finishReq{first}, c.queue[:n]...)
	c.queue = slices.Delete(c.queue, 0, n)
	c.mu.Unlock()

	s.runGroup(group)

	c.mu.Lock()
	if len(c.queue) > 0 {
		next := c.queue[0]
		c.queue = c.queue[1:]
		close(next.lead)
	} else {
		c.flying--
	}
	c.mu.Unlock()
	for _, r := range group[1:] {
		close(r.done)
	}
}

// runGroup writes the group and sets each write's outcome.
func (s *Store) runGroup(group []*finishReq) {
	live := group[:0:0]
	for _, r := range group {
		if err := r.ctx.Err(); err != nil {
			r.err = s.wrap(r.ctx, "finish target", context.Cause(r.ctx))
			continue
		}
		live = append(live, r)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		s.finishAlone(live[0])
		return
	}
	slices.SortFunc(live, func(a, b *finishReq) int { return cmp.Compare(a.p.JobID, b.p.JobID) })
	// The group's own bound: its writes' callers wait for it whatever
	// their contexts say once it has started.
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	b := &pgx.Batch{}
	for _, r := range live {
		b.Queue(s.q.step, r.args...)
	}
	next := make([]int, len(live))
	stepped := make([]bool, len(live))
	br := s.pool.SendBatch(ctx, b)
	var err error
	for i := range live {
		err = br.QueryRow().Scan(&next[i])
		stepped[i] = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
		if err != nil {
			break
		}
	}
	// Close ends the batch's implicit transaction: its error is the
	// commit's. Nothing is answered before it returns.
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if s.closed.Load() {
			for _, r := range live {
				r.err = s.wrap(r.ctx, "finish target", err)
			}
			return
		}
		for _, r := range live { // nothing of the group is stored: each on its own
			s.finishAlone(r)
		}
		return
	}
	var changed []string
	for i, r := range live {
		if !stepped[i] { // a step that did not apply changed nothing
			s.finishFull(r)
			continue
		}
		r.step = batchdriver.Step{Status: batchdriver.JobRunning, Next: next[i]}
		changed = append(changed, r.p.JobID)
	}
	s.feed.changed(changed...)
}

// finishAlone runs one drain write on its own: as a step, and if that
// does not apply, as the full write.
func (s *Store) finishAlone(r *finishReq) {
	var next int
	err := s.pool.QueryRow(r.ctx, s.q.step, r.args...).Scan(&next)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		s.finishFull(r)
	case err != nil:
		r.err = s.wrap(r.ctx, "finish target", err)
	default:
		s.feed.changed(r.p.JobID)
		r.step = batchdriver.Step{Status: batchdriver.JobRunning, Next: next}
	}
}

// finishFull runs one drain write as the full statement, which also
// finishes and releases a job.
func (s *Store) finishFull(r *finishReq) {
	var status string
	var next int
	err := s.pool.QueryRow(r.ctx, s.q.finish, r.args...).Scan(&status, &next)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		step, err := s.finishMissed(r.ctx, r.p)
		r.step, r.err = step, s.wrap(r.ctx, "finish target", err)
	case err != nil:
		r.err = s.wrap(r.ctx, "finish target", err)
	default:
		s.feed.changed(r.p.JobID)
		r.step = batchdriver.Step{Status: batchdriver.JobStatus(status), Next: next}
	}
}
