package batch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// The host gate keeps the runner polite to each host: at most
// Config.FetchesPerHost fetches to it at once, starts at least
// Config.HostInterval (or its crawl delay) apart, and none while it asked
// to be left alone (a Retry-After). It counts this runner's fetches in
// process and, on a store that implements [batchdriver.HostGate], takes a
// slot in the store too, so that the limits hold for every runner sharing
// it.
//
// A job whose next target's host has no room is parked: it joins the
// host's queue and its worker goes to drain another job. One pump per
// host takes slots for the queue's head, in order, and hands each job
// that got one to the ready list, which idle workers drain first. So the
// jobs waiting for one host take turns, target by target, and each job's
// targets still go one at a time in idx order.
//
// Host names stay in memory only for the time it takes to hash them: the
// gate, its metrics and the store know a host by a truncated SHA-256 of
// its name and port.

// gateMinPoll and gateMaxPoll bound the wait before a pump asks the store
// again when the slots of its host are held by other runners, which tell
// it nothing when they release them.
const (
	gateMinPoll = 25 * time.Millisecond
	gateMaxPoll = 500 * time.Millisecond
)

// A runner keeps a store slot it no longer uses for gateLinger, so that
// the next fetch to the host (a job's next target comes one write later,
// or a job waiting here) takes it without a store call; then it frees
// it. A slot in use goes back to the store every gateTenure: the renewal
// gives it up when another runner was refused a slot of the host (for
// gateWant after its refusal), and this runner then waits gateMaxPoll
// before it asks again, so that the other, polling, gets its turn.
const (
	gateLinger = 100 * time.Millisecond
	gateTenure = time.Second
	gateWant   = 2 * gateMaxPoll
)

// Reasons a job waits for its host, the label values of
// <prefix>_host_waits_total.
const (
	waitFull       = "full"
	waitInterval   = "interval"
	waitRetryAfter = "retry_after"
)

// hostWaitReasons is the fixed label set of <prefix>_host_waits_total.
var hostWaitReasons = []string{waitFull, waitInterval, waitRetryAfter}

// hostKey returns the gate key of rawURL's host and port, or "" for a URL
// without a host (whose fetch fails anyway).
func hostKey(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return ""
	}
	port := u.Port()
	if port == "" {
		switch strings.ToLower(u.Scheme) {
		case "https":
			port = "443"
		case "http":
			port = "80"
		}
	}
	sum := sha256.Sum256([]byte("batchkit host\x00" + strings.ToLower(u.Hostname()) + "\x00" + port))
	return hex.EncodeToString(sum[:16])
}

// hostSlot is a slot the gate took for one fetch: its key and, on a store
// with a gate, the store's slot id, when the store last confirmed it, and
// the interval it was taken under (such a slot is never kept: each start
// goes through the store, and the interval counts from the fetch's end
// too). The zero value is no slot.
type hostSlot struct {
	key      string
	store    int64
	taken    time.Time
	interval time.Duration
	idle     time.Time // when it was last released, while kept
}

// gate is the runner's host gate. Its methods are safe for concurrent use.
type gate struct {
	r        *Runner
	store    batchdriver.HostGate // nil: in process only
	limit    int                  // 0: no cap
	interval time.Duration
	lease    time.Duration

	mu       sync.Mutex
	hosts    map[string]*gateHost
	ready    []*jobDrain // parked jobs whose wait ended, oldest first
	sleeping map[*jobDrain]struct{}
	parked   int // jobs queued, asleep or ready
	closed   bool
	lingers  sync.WaitGroup // linger timers armed or running
}

// gateHost is one host's state on this runner.
type gateHost struct {
	held   int         // slots this runner holds, or is asking the store for
	waking int         // queue heads woken to try, not yet back
	next   time.Time   // no start before this (the interval)
	until  time.Time   // no start before this (a Retry-After)
	yield  time.Time   // no start before this (a slot given up to another runner)
	queue  []*jobDrain // jobs waiting for their turn
	timer  *time.Timer // wakes the queue when a wait ends
	poll   time.Duration
	idle   []hostSlot  // store slots kept for the next fetch
	linger *time.Timer // frees the idle slots
}

// Where a parked drain is.
const (
	notParked = iota
	inQueue   // in its host's queue
	asleep    // in g.sleeping, for a back-off of its own
	isReady   // in g.ready
)

func newGate(r *Runner) *gate {
	g := &gate{
		r: r, hosts: make(map[string]*gateHost), sleeping: make(map[*jobDrain]struct{}),
		interval: time.Duration(r.cfg.HostInterval),
	}
	if r.cfg.FetchesPerHost > 0 {
		g.limit = r.cfg.FetchesPerHost
	}
	if hg, ok := r.store.(batchdriver.HostGate); ok {
		g.store = hg
	}
	// A slot outlives its fetch only when its runner dies (Reap frees it
	// then) or a release failed: the lease bounds both.
	g.lease = time.Duration(r.cfg.TargetTimeout) + FetchOverrunGrace + time.Duration(r.cfg.StaleAfter)
	return g
}

// intervalPad is added to a host's interval between fetch starts: the
// requests of two fetches reach the host after a time of their own (a
// new connection, a reused one), and the margin keeps them the interval
// apart as the host sees them.
const intervalPad = 10 * time.Millisecond

// intervalOf returns the interval before d's next fetch start to its
// host: Config.HostInterval or the host's crawl delay, whichever is
// longer, and the pad; 0 for none.
func (g *gate) intervalOf(d *jobDrain) time.Duration {
	if iv := max(g.interval, d.crawlDelay); iv > 0 {
		return iv + intervalPad
	}
	return 0
}

// on reports whether the runner gates its fetches by host at all.
func (g *gate) on() bool {
	return g.limit > 0 || g.interval > 0 || g.r.cfg.Robots != nil
}

func (g *gate) host(key string) *gateHost {
	h := g.hosts[key]
	if h == nil {
		h = &gateHost{poll: gateMinPoll}
		g.hosts[key] = h
	}
	return h
}

// forget drops h when it holds nothing worth keeping. Called with g.mu
// held.
func (g *gate) forget(key string, h *gateHost) {
	now := time.Now()
	if h.held == 0 && h.waking == 0 && len(h.queue) == 0 && len(h.idle) == 0 && h.timer == nil &&
		!now.Before(h.next) && !now.Before(h.until) && !now.Before(h.yield) {
		delete(g.hosts, key)
	}
}

// enter asks for a slot of d's host for its next target, in the worker's
// goroutine. It returns true when d got one (in d.slot): the worker
// fetches at once. It returns false when d is parked in the host's queue:
// a worker takes it up again from the ready list when its turn comes.
// A job that others wait ahead of joins the end of the queue, unless it
// is the head that the queue woke to try.
func (g *gate) enter(d *jobDrain) bool {
	g.mu.Lock()
	h := g.host(d.key)
	if d.head {
		d.head = false
		h.waking--
	} else if len(h.queue) > 0 || h.waking > 0 {
		g.park(d, h, false)
		g.mu.Unlock()
		return false
	}
	interval := g.intervalOf(d)
	now := time.Now()
	var wait time.Duration
	switch {
	case now.Before(h.until):
		wait = h.until.Sub(now)
	case now.Before(h.yield):
		wait = h.yield.Sub(now)
	case g.limit > 0 && h.held >= g.limit:
		g.park(d, h, true) // a release here wakes it
		g.mu.Unlock()
		return false
	case interval > 0 && now.Before(h.next):
		wait = h.next.Sub(now)
	}
	if wait > 0 {
		g.park(d, h, true)
		g.wakeAfter(d.key, h, wait)
		g.mu.Unlock()
		return false
	}
	h.held++ // before the store is asked: a release meanwhile sees it
	var kept hostSlot
	if interval == 0 && len(h.idle) > 0 {
		kept = h.idle[len(h.idle)-1]
		h.idle = h.idle[:len(h.idle)-1]
	}
	g.mu.Unlock()

	slot := hostSlot{key: d.key, interval: interval}
	if kept.store != 0 && time.Since(kept.taken) >= gateTenure {
		if g.renew(kept) {
			kept.taken = time.Now()
		} else {
			// Given up to a runner waiting for the host: wait a poll, so
			// that it gets the slot before this runner asks again.
			g.mu.Lock()
			h.held--
			h.yield = time.Now().Add(gateMaxPoll)
			g.park(d, h, true)
			g.wakeAfter(d.key, h, gateMaxPoll)
			g.mu.Unlock()
			return false
		}
	}
	switch {
	case kept.store != 0:
		slot = kept
	case g.store != nil:
		got, err := g.acquire(d.key, interval)
		if err != nil || got.Slot == 0 {
			g.mu.Lock()
			h.held--
			wait := got.Wait
			if err != nil || wait <= 0 {
				// Other runners hold the slots, and tell no one when
				// they free them: ask again, less often each time.
				wait = h.poll
				h.poll = min(2*h.poll, gateMaxPoll)
			}
			g.park(d, h, true)
			g.wakeAfter(d.key, h, wait)
			g.mu.Unlock()
			return false
		}
		slot.store, slot.taken = got.Slot, time.Now()
	}
	g.mu.Lock()
	h.poll = gateMinPoll
	if interval > 0 {
		h.next = time.Now().Add(interval)
	}
	g.wake(d.key, h) // the next in turn, if the host has room for it too
	g.mu.Unlock()
	d.slot = slot
	return true
}

// renew asks the store to keep s for another lease; a slot it does not
// keep is gone.
func (g *gate) renew(s hostSlot) (kept bool) {
	err := g.call("renew host", "taking a new slot", func(ctx context.Context) (err error) {
		kept, err = g.store.RenewHost(ctx, batchdriver.RenewHostParams{Key: s.key, Slot: s.store, Lease: g.lease, Now: g.r.now()})
		return err
	})
	if err != nil {
		g.releaseStore(s)
	}
	return kept
}

// tidy drops the hosts that hold nothing any more: a back-off or an
// interval that ended with no job waiting.
func (g *gate) tidy() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for key, h := range g.hosts {
		g.forget(key, h)
	}
}

// park puts d in h's queue, at its head (it was the next to go) or at its
// end, and counts the wait. Called with g.mu held.
func (g *gate) park(d *jobDrain, h *gateHost, head bool) {
	if head {
		h.queue = append([]*jobDrain{d}, h.queue...)
	} else {
		h.queue = append(h.queue, d)
	}
	d.where = inQueue
	g.parked++
	g.gauge()
	g.r.metrics.hostWait(g.waitReason(h))
	g.armDeadline(d)
}

// waitReason says why the head of h's queue waits. Called with g.mu held.
func (g *gate) waitReason(h *gateHost) string {
	now := time.Now()
	switch {
	case now.Before(h.until):
		return waitRetryAfter
	case now.Before(h.next):
		return waitInterval
	}
	return waitFull
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// armDeadline makes d ready at its job's deadline, if it has one, so that
// a job waiting for its host ends on time. Called with g.mu held.
func (g *gate) armDeadline(d *jobDrain) {
	if d.job.Deadline.IsZero() || d.deadline != nil {
		return
	}
	d.deadline = time.AfterFunc(time.Until(d.job.Deadline), func() { g.wakeDrain(d) })
}

// wake wakes the heads of h's queue that may go now: as many as there
// are free slots, one at a time while an interval spaces the starts, none
// while a wait runs. Each tries in its worker (see enter). Called with
// g.mu held.
func (g *gate) wake(key string, h *gateHost) {
	if g.closed {
		return
	}
	now := time.Now()
	for len(h.queue) > 0 && h.timer == nil {
		if end := later(h.until, h.yield); now.Before(end) {
			g.wakeAfter(key, h, end.Sub(now))
			return
		}
		d := h.queue[0]
		interval := g.intervalOf(d)
		if g.limit > 0 && h.held+h.waking >= g.limit || interval > 0 && h.waking > 0 {
			return
		}
		if interval > 0 && now.Before(h.next) {
			g.wakeAfter(key, h, h.next.Sub(now))
			return
		}
		h.queue = h.queue[1:]
		h.waking++
		d.head = true
		g.makeReady(d)
	}
}

// wakeAfter arms h's timer to wake its queue after wait. Called with g.mu
// held.
func (g *gate) wakeAfter(key string, h *gateHost, wait time.Duration) {
	if h.timer != nil {
		h.timer.Stop()
	}
	h.timer = time.AfterFunc(wait, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.closed || g.hosts[key] != h {
			return
		}
		h.timer = nil
		g.wake(key, h)
		g.forget(key, h)
	})
}

// wakeDrain makes d ready at once, out of turn, if it is queued or asleep:
// its worker then checks the job's cancel and deadline before it asks
// again.
func (g *gate) wakeDrain(d *jobDrain) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return
	}
	switch d.where {
	case inQueue:
		h := g.hosts[d.key]
		h.queue = slices.DeleteFunc(h.queue, func(x *jobDrain) bool { return x == d })
		g.wake(d.key, h) // d may have been the head
	case asleep:
		delete(g.sleeping, d)
		d.sleeper.Stop()
	default:
		return
	}
	g.makeReady(d)
}

// wakeJob wakes the parked drain of job id, if this runner has one: a
// cancel that it should see at once.
func (g *gate) wakeJob(id string) {
	g.mu.Lock()
	var found *jobDrain
	for _, h := range g.hosts {
		for _, d := range h.queue {
			if d.job.ID == id {
				found = d
			}
		}
	}
	for d := range g.sleeping {
		if d.job.ID == id {
			found = d
		}
	}
	g.mu.Unlock()
	if found != nil {
		g.wakeDrain(found)
	}
}

// unwake gives back the turn of a woken head that will not try after all
// (its job was cancelled, or its deadline passed).
func (g *gate) unwake(d *jobDrain) {
	if !d.head {
		return
	}
	d.head = false
	g.mu.Lock()
	defer g.mu.Unlock()
	if h := g.hosts[d.key]; h != nil {
		h.waking--
		g.wake(d.key, h)
		g.forget(d.key, h)
	}
}

// makeReady puts d on the ready list and wakes a worker. Called with g.mu
// held.
func (g *gate) makeReady(d *jobDrain) {
	d.where = isReady
	g.ready = append(g.ready, d)
	select {
	case g.r.wake <- struct{}{}:
	default: // every worker has a wake-up pending, or is busy and will look
	}
}

// gauge sets <prefix>_jobs_waiting. Called with g.mu held.
func (g *gate) gauge() { g.r.metrics.hostWaiting.Set(float64(g.parked)) }

// take returns the oldest ready drain, or nil.
func (g *gate) take() *jobDrain {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || len(g.ready) == 0 {
		return nil
	}
	d := g.ready[0]
	g.ready = g.ready[1:]
	g.parked--
	g.gauge()
	d.where = notParked
	if d.deadline != nil {
		d.deadline.Stop()
		d.deadline = nil
	}
	return d
}

// sleep parks d for wait, off any host's queue: a busy fetcher's back-off,
// or a Retry-After of a target without a host key.
func (g *gate) sleep(d *jobDrain, wait time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.parked++
	g.gauge()
	d.where = asleep
	g.sleeping[d] = struct{}{}
	d.sleeper = time.AfterFunc(wait, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.closed || d.where != asleep {
			return
		}
		delete(g.sleeping, d)
		g.makeReady(d)
	})
	g.armDeadline(d)
}

// started marks the start of a fetch with slot s: its interval counts
// from it.
func (g *gate) started(s hostSlot) {
	if s.key == "" || s.interval <= 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if h := g.hosts[s.key]; h != nil {
		h.next = time.Now().Add(s.interval)
	}
}

// call makes one store call of the gate, op, recorded as the runner's
// store calls are; a failure is logged with what it means (then).
func (g *gate) call(op, then string, fn func(ctx context.Context) error) error {
	ctx, cancel := storeCtx()
	defer cancel()
	began := time.Now()
	err := fn(ctx)
	g.r.recordStoreCall(op, began, err)
	if err != nil {
		g.r.log.LogAttrs(context.Background(), storeErrLevel(err), "batch host gate: "+op+" failed; "+then, storeErrAttrs(err)...)
	}
	return err
}

// acquire asks the store for a slot of key.
func (g *gate) acquire(key string, interval time.Duration) (got batchdriver.HostSlot, err error) {
	err = g.call("acquire host", "retrying", func(ctx context.Context) (err error) {
		got, err = g.store.AcquireHost(ctx, batchdriver.AcquireHostParams{
			Key: key, Runner: g.r.cfg.RunnerID, Limit: g.limit, Interval: interval, Lease: g.lease, Want: gateWant, Now: g.r.now(),
		})
		return err
	})
	return got, err
}

// release frees a slot once its fetch has returned, and wakes the next
// job waiting for the host. A store slot is kept for gateLinger, for the
// next fetch to the host, unless it was taken under an interval.
func (g *gate) release(s hostSlot) {
	if s.key == "" {
		return
	}
	g.mu.Lock()
	h := g.hosts[s.key]
	if h == nil {
		g.mu.Unlock()
		g.releaseStore(s)
		return
	}
	h.held--
	key := s.key
	if next := time.Now().Add(s.interval); s.interval > 0 && next.After(h.next) {
		h.next = next // from the fetch's end too: the host sees the requests that far apart
	}
	if s.store != 0 && s.interval == 0 && !g.closed {
		s.idle = time.Now()
		h.idle = append(h.idle, s)
		if h.linger == nil {
			g.armLinger(key, h, gateLinger)
		}
		s = hostSlot{}
	}
	g.wake(key, h)
	g.forget(key, h)
	g.mu.Unlock()
	g.releaseStore(s)
}

// armLinger arms h's timer that frees its slots kept idle for
// gateLinger. Called with g.mu held.
func (g *gate) armLinger(key string, h *gateHost, after time.Duration) {
	g.lingers.Add(1)
	h.linger = time.AfterFunc(after, func() {
		defer g.lingers.Done()
		g.dropIdle(key, h)
	})
}

// dropIdle frees the store slots h kept idle for gateLinger, and arms
// its timer again for the others.
func (g *gate) dropIdle(key string, h *gateHost) {
	g.mu.Lock()
	h.linger = nil
	now := time.Now()
	var drop []hostSlot
	kept := h.idle[:0]
	for _, s := range h.idle {
		if now.Sub(s.idle) >= gateLinger {
			drop = append(drop, s)
		} else {
			kept = append(kept, s)
		}
	}
	h.idle = kept
	if len(kept) > 0 && !g.closed {
		g.armLinger(key, h, gateLinger-now.Sub(kept[0].idle))
	}
	if g.hosts[key] == h {
		g.forget(key, h)
	}
	g.mu.Unlock()
	for _, s := range drop {
		g.releaseStore(s)
	}
}

// releaseStore frees the store's side of s, if it has one.
func (g *gate) releaseStore(s hostSlot) {
	if s.store == 0 {
		return
	}
	g.call("release host", "its lease frees the slot", func(ctx context.Context) error {
		return g.store.ReleaseHost(ctx, batchdriver.ReleaseHostParams{Key: s.key, Slot: s.store, Interval: s.interval, Now: g.r.now()})
	})
}

// backOff keeps every job, on every runner sharing a store with a gate,
// from fetching from key for wait.
func (g *gate) backOff(key string, wait time.Duration) {
	g.mu.Lock()
	h := g.host(key)
	if until := time.Now().Add(wait); until.After(h.until) {
		h.until = until
	}
	g.mu.Unlock()
	g.r.metrics.retryAfter.Inc()
	if g.store == nil {
		return
	}
	g.call("back off host", "this runner keeps the back-off alone", func(ctx context.Context) error {
		return g.store.BackOffHost(ctx, batchdriver.BackOffHostParams{Key: key, For: wait, Now: g.r.now()})
	})
}

// close stops the gate once the workers have returned, frees the store
// slots it kept, and returns the jobs parked in it: Close ends their
// drains.
func (g *gate) close() []*jobDrain {
	g.mu.Lock()
	var idle []hostSlot
	defer func() {
		g.mu.Unlock()
		g.lingers.Wait() // a linger that fired frees its slots first
		for _, s := range idle {
			g.releaseStore(s)
		}
	}()
	g.closed = true
	out := g.ready
	g.ready = nil
	for _, h := range g.hosts {
		if h.timer != nil {
			h.timer.Stop()
		}
		if h.linger != nil && h.linger.Stop() {
			g.lingers.Done()
		}
		idle = append(idle, h.idle...)
		h.idle = nil
		out = append(out, h.queue...)
		h.queue = nil
	}
	for d := range g.sleeping {
		d.sleeper.Stop()
		out = append(out, d)
	}
	clear(g.sleeping)
	g.parked = 0
	g.gauge()
	for _, d := range out {
		d.where = notParked
		if d.deadline != nil {
			d.deadline.Stop()
		}
	}
	return out
}
