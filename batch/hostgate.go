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
// with a gate, the store's slot id. The zero value is no slot.
type hostSlot struct {
	key   string
	store int64
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
	parked   int // jobs queued, sleeping or ready
	closed   bool
	pumps    sync.WaitGroup
}

// gateHost is one host's state on this runner.
type gateHost struct {
	held    int         // slots this runner holds
	next    time.Time   // no start before this (the interval)
	until   time.Time   // no start before this (a Retry-After)
	queue   []*jobDrain // jobs waiting for a slot, in turn
	pumping bool
	timer   *time.Timer // wakes the pump when a wait ends
	poll    time.Duration
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
	if h.held == 0 && len(h.queue) == 0 && !h.pumping && h.timer == nil && !now.Before(h.next) && !now.Before(h.until) {
		delete(g.hosts, key)
	}
}

// enter asks for a slot of d's host for its next target. It returns true
// when d got one (in d.slot) and its worker fetches at once, and false
// when d is parked: a worker takes it up again from the ready list.
func (g *gate) enter(d *jobDrain) bool {
	g.mu.Lock()
	h := g.host(d.key)
	h.queue = append(h.queue, d)
	d.where = inQueue
	g.parked++
	pump := !h.pumping && h.timer == nil
	if pump {
		h.pumping = true
	}
	g.mu.Unlock()
	if pump {
		g.pump(d.key)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if d.where == isReady { // it got its slot in this call: no park
		g.ready = slices.DeleteFunc(g.ready, func(x *jobDrain) bool { return x == d })
		g.parked--
		d.where = notParked
		g.gauge()
		return true
	}
	g.r.metrics.hostWait(g.waitReason(g.hosts[d.key]))
	g.armDeadline(d)
	return false
}

// waitReason says why the head of h's queue waits. Called with g.mu held.
func (g *gate) waitReason(h *gateHost) string {
	now := time.Now()
	switch {
	case h == nil:
		return waitFull
	case now.Before(h.until):
		return waitRetryAfter
	case now.Before(h.next):
		return waitInterval
	}
	return waitFull
}

// armDeadline makes d ready at its job's deadline, if it has one, so that
// a job waiting for its host ends on time. Called with g.mu held.
func (g *gate) armDeadline(d *jobDrain) {
	if d.job.Deadline.IsZero() || d.deadline != nil {
		return
	}
	d.deadline = time.AfterFunc(time.Until(d.job.Deadline), func() { g.wakeDrain(d) })
}

// wakeDrain makes d ready at once, without a slot, if it is queued or
// asleep: its worker then checks the job's cancel and deadline before it
// asks again.
func (g *gate) wakeDrain(d *jobDrain) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return
	}
	switch d.where {
	case inQueue:
		h := g.hosts[d.key]
		head := len(h.queue) > 0 && h.queue[0] == d
		h.queue = slices.DeleteFunc(h.queue, func(x *jobDrain) bool { return x == d })
		if head && len(h.queue) > 0 && !h.pumping {
			if h.timer != nil {
				h.timer.Stop()
				h.timer = nil
			}
			g.startPump(d.key, h)
		}
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

// startPump starts h's pump in a goroutine of its own. Called with g.mu
// held.
func (g *gate) startPump(key string, h *gateHost) {
	h.pumping = true
	g.pumps.Add(1)
	go func() {
		defer g.pumps.Done()
		g.pump(key)
	}()
}

// wakeAfter arms h's timer to start its pump after wait. Called with g.mu
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
		if len(h.queue) > 0 && !h.pumping {
			g.startPump(key, h)
		}
		g.forget(key, h)
	})
}

// pump takes slots of key for the jobs in its queue, in turn, until the
// host has no room. It arms the host's timer when the wait has an end it
// knows (an interval, a back-off, other runners' slots); a release on
// this runner starts it again. The caller set h.pumping.
func (g *gate) pump(key string) {
	for {
		g.mu.Lock()
		h := g.hosts[key]
		if g.closed || len(h.queue) == 0 {
			h.pumping = false
			g.forget(key, h)
			g.mu.Unlock()
			return
		}
		head := h.queue[0]
		interval := max(g.interval, head.crawlDelay)
		now := time.Now()
		var wait time.Duration
		switch {
		case now.Before(h.until):
			wait = h.until.Sub(now)
		case g.limit > 0 && h.held >= g.limit:
			h.pumping = false // a release here starts the pump again
			g.mu.Unlock()
			return
		case interval > 0 && now.Before(h.next):
			wait = h.next.Sub(now)
		}
		if wait > 0 {
			h.pumping = false
			g.wakeAfter(key, h, wait)
			g.mu.Unlock()
			return
		}
		h.held++ // before the store is asked: a release meanwhile sees it
		g.mu.Unlock()

		slot := hostSlot{key: key}
		if g.store != nil {
			got, err := g.acquire(key, interval)
			if err != nil || got.Slot == 0 {
				g.mu.Lock()
				h.held--
				wait := got.Wait
				if err != nil || wait <= 0 {
					wait = h.poll
					h.poll = min(2*h.poll, gateMaxPoll)
				}
				h.pumping = false
				if !g.closed {
					g.wakeAfter(key, h, wait)
				}
				g.mu.Unlock()
				return
			}
			slot.store = got.Slot
		}
		g.mu.Lock()
		h.poll = gateMinPoll
		if interval > 0 {
			h.next = now.Add(interval)
		}
		if g.closed || len(h.queue) == 0 || h.queue[0] != head {
			// Close, or the head left (its deadline, a cancel) while the
			// store was asked: the slot goes back.
			h.held--
			g.mu.Unlock()
			g.releaseStore(slot)
			continue
		}
		h.queue = h.queue[1:]
		head.slot = slot
		g.makeReady(head)
		g.mu.Unlock()
	}
}

// acquire asks the store for a slot of key.
func (g *gate) acquire(key string, interval time.Duration) (batchdriver.HostSlot, error) {
	ctx, cancel := storeCtx()
	defer cancel()
	began := time.Now()
	got, err := g.store.AcquireHost(ctx, batchdriver.AcquireHostParams{
		Key: key, Runner: g.r.cfg.RunnerID, Limit: g.limit, Interval: interval, Lease: g.lease, Now: g.r.now(),
	})
	g.r.recordStoreCall("acquire host", began, err)
	if err != nil {
		g.r.log.LogAttrs(context.Background(), storeErrLevel(err), "batch host gate: acquire failed; retrying", storeErrAttrs(err)...)
	}
	return got, err
}

// release frees a slot once its fetch has returned, and lets the next job
// waiting for the host have it.
func (g *gate) release(s hostSlot) {
	if s.key == "" {
		return
	}
	g.releaseStore(s)
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.hosts[s.key]
	if h == nil {
		return
	}
	h.held--
	if g.closed {
		return
	}
	if len(h.queue) > 0 && !h.pumping && h.timer == nil {
		g.startPump(s.key, h)
	}
	g.forget(s.key, h)
}

// releaseStore frees the store's side of s, if it has one.
func (g *gate) releaseStore(s hostSlot) {
	if s.store == 0 {
		return
	}
	ctx, cancel := storeCtx()
	defer cancel()
	began := time.Now()
	err := g.store.ReleaseHost(ctx, batchdriver.ReleaseHostParams{Key: s.key, Slot: s.store})
	g.r.recordStoreCall("release host", began, err)
	if err != nil {
		g.r.log.LogAttrs(context.Background(), storeErrLevel(err), "batch host gate: release failed; its lease frees the slot", storeErrAttrs(err)...)
	}
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
	ctx, cancel := storeCtx()
	defer cancel()
	began := time.Now()
	err := g.store.BackOffHost(ctx, batchdriver.BackOffHostParams{Key: key, For: wait, Now: g.r.now()})
	g.r.recordStoreCall("back off host", began, err)
	if err != nil {
		g.r.log.LogAttrs(context.Background(), storeErrLevel(err), "batch host gate: back-off not shared; this runner keeps it", storeErrAttrs(err)...)
	}
}

// close stops the gate once the workers have returned, and returns the
// jobs parked in it, with the slots of the ready ones freed: Close ends
// their drains.
func (g *gate) close() []*jobDrain {
	g.mu.Lock()
	g.closed = true
	var out []*jobDrain
	var slots []hostSlot
	for _, d := range g.ready {
		out = append(out, d)
		slots = append(slots, d.slot)
		d.slot = hostSlot{}
	}
	g.ready = nil
	for _, h := range g.hosts {
		if h.timer != nil {
			h.timer.Stop()
		}
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
	g.mu.Unlock()
	g.pumps.Wait()
	for _, s := range slots {
		g.releaseStore(s)
	}
	return out
}
