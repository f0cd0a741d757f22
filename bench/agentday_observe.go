package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchobserve"
)

// The nodes' own measurements, taken through the runner's Observer: where
// the drains' time goes between fetches, how long a target's result
// takes to be readable once its fetch returned, and when each job ended.

// recorder collects what every node of the child observes.
type recorder struct {
	on atomic.Bool // inside the window

	live, running atomic.Int64 // jobs submitted and not finished; of those, claimed
	fetching      atomic.Int64 // fetches in flight

	fetch, beforeFetch, afterFetch, write, claim atomic.Int64 // ns, inside the window
	targets                                      atomic.Int64
	pg                                           *costMeter // the PostgreSQL pools' tracer

	mu       sync.Mutex
	inflight map[*fetchState]bool // the fetches running, for the window's end
	readable []time.Duration
	writes   []time.Duration
	claims   []time.Duration
	ends     map[string]jobEnd

	// The window's start and its samplers.
	t0        time.Time
	cpu0      time.Duration
	disk0     int64
	rssIdle   int64
	stopSamp  chan struct{}
	sampled   chan sampleSums
	rssSample func() int64
}

type sampleSums struct {
	n                                    int
	rss, live, queued, running, fetching float64
	rssMax                               int64
}

func newRecorder() *recorder {
	return &recorder{ends: map[string]jobEnd{}, inflight: map[*fetchState]bool{}, rssSample: rss, pg: &costMeter{}}
}

// start opens the window.
func (r *recorder) start() {
	r.t0, r.cpu0, r.disk0 = time.Now(), selfCPU(), diskWritten()
	r.stopSamp, r.sampled = make(chan struct{}), make(chan sampleSums, 1)
	go r.sample(r.stopSamp, r.sampled)
	r.pg.countingOn.Store(true)
	r.mu.Lock()
	r.on.Store(true)
	r.mu.Unlock()
}

// sample reads the RSS and the live and queued jobs every 100 ms.
func (r *recorder) sample(stop <-chan struct{}, out chan<- sampleSums) {
	var s sampleSums
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			out <- s
			return
		case <-t.C:
		}
		m := r.rssSample()
		live, running := r.live.Load(), r.running.Load()
		s.n++
		s.rss += float64(m)
		s.rssMax = max(s.rssMax, m)
		s.live += float64(live)
		s.queued += float64(max(live-running, 0))
		s.running += float64(running)
		s.fetching += float64(r.fetching.Load())
	}
}

// end closes the window and returns its figures (without the job ends).
func (r *recorder) end() nodeResult {
	r.mu.Lock()
	r.on.Store(false)
	w1 := time.Now()
	for f := range r.inflight { // their part inside the window
		r.fetch.Add(int64(w1.Sub(later(f.began, r.t0))))
	}
	r.mu.Unlock()
	r.pg.countingOn.Store(false)
	res := nodeResult{Window: time.Since(r.t0), CPU: selfCPU() - r.cpu0, DiskBytes: diskWritten() - r.disk0, RSSIdle: r.rssIdle}
	close(r.stopSamp)
	s := <-r.sampled
	if s.n > 0 {
		res.RSSMean, res.RSSMax = int64(s.rss/float64(s.n)), s.rssMax
		res.LiveMean, res.QueueMean = s.live/float64(s.n), s.queued/float64(s.n)
		res.RunningMean, res.FetchingMean = s.running/float64(s.n), s.fetching/float64(s.n)
	}
	res.Targets = int(r.targets.Load())
	res.PGRoundTrips, res.PGBatches, res.PGBatchStatements = r.pg.rts.Load(), r.pg.batches.Load(), r.pg.batchStmts.Load()
	res.Slots = slotTimes{
		Fetch: time.Duration(r.fetch.Load()), BeforeFetch: time.Duration(r.beforeFetch.Load()),
		AfterFetch: time.Duration(r.afterFetch.Load()), Write: time.Duration(r.write.Load()), Claim: time.Duration(r.claim.Load()),
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	res.Readable, res.Write, res.Claim = summarize(r.readable), summarize(r.writes), summarize(r.claims)
	return res
}

func (r *recorder) jobEnds() map[string]jobEnd {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]jobEnd, len(r.ends))
	for k, v := range r.ends {
		out[k] = v
	}
	return out
}

// add adds the part of the span from..to inside the window to sum, if to
// is inside it.
func (r *recorder) add(sum *atomic.Int64, from, to time.Time) {
	if r.on.Load() {
		sum.Add(int64(to.Sub(later(from, r.t0))))
	}
}

func (r *recorder) sampleOf(v *[]time.Duration, d time.Duration) {
	if !r.on.Load() {
		return
	}
	r.mu.Lock()
	*v = append(*v, d)
	r.mu.Unlock()
}

// diskWritten is the bytes this process caused to be written to storage
// (write_bytes of /proc/self/io; 0 where it cannot be read).
func diskWritten() int64 { return procField("/proc/self/io", "write_bytes:", 1) }

// jobState is one claimed job's, carried in the job's context: its
// targets run one after another, so its fields are never written at once.
type jobState struct {
	last  time.Time   // the end of its claim or of its last write
	fetch *fetchState // the target in hand's fetch
}

// fetchState is one fetch's, carried in the FetchFunc's context.
type fetchState struct {
	began    time.Time
	returned atomic.Int64 // Unix ns when the FetchFunc returned
	ended    atomic.Int64 // Unix ns when the runner's fetch step ended
}

// end is when the fetch ended for the runner: when the FetchFunc
// returned, or when the runner stopped waiting for it (a fetch past its
// deadline is abandoned), whichever came first; 0 while it runs.
func (f *fetchState) end() int64 {
	r, e := f.returned.Load(), f.ended.Load()
	if r == 0 || e != 0 && e < r {
		return e
	}
	return r
}

type (
	jobKey   struct{}
	fetchKey struct{}
)

// fetchReturned records, in a FetchFunc, that it returns.
func fetchReturned(ctx context.Context) {
	if f, ok := ctx.Value(fetchKey{}).(*fetchState); ok {
		f.returned.Store(time.Now().UnixNano())
	}
}

// nodeObserver is one node's batchobserve.Observer.
type nodeObserver struct {
	node int
	rec  *recorder
}

var _ batchobserve.Observer = (*nodeObserver)(nil)

func (o *nodeObserver) Submit(ctx context.Context, _ batchobserve.SubmitEvent) (context.Context, func(batchobserve.SubmitEnd)) {
	return ctx, func(e batchobserve.SubmitEnd) {
		if e.Err == nil && !e.Reused {
			o.rec.live.Add(1)
		}
	}
}

func (o *nodeObserver) TraceContext(context.Context) batchdriver.TraceContext {
	return batchdriver.TraceContext{}
}

func (o *nodeObserver) Job(ctx context.Context, ev batchobserve.JobEvent) (context.Context, func(batchobserve.JobEnd)) {
	o.rec.running.Add(1)
	d := ev.ClaimEnd.Sub(ev.ClaimStart)
	o.rec.add(&o.rec.claim, ev.ClaimStart, ev.ClaimEnd)
	o.rec.sampleOf(&o.rec.claims, d)
	js := &jobState{last: ev.ClaimEnd}
	return context.WithValue(ctx, jobKey{}, js), func(batchobserve.JobEnd) { o.rec.running.Add(-1) }
}

func (o *nodeObserver) Fetch(ctx context.Context, _ batchobserve.TargetEvent) (context.Context, func(batchobserve.FetchEnd)) {
	js, _ := ctx.Value(jobKey{}).(*jobState)
	f := &fetchState{began: time.Now()}
	o.rec.fetching.Add(1)
	o.rec.mu.Lock()
	o.rec.inflight[f] = true
	o.rec.mu.Unlock()
	if js != nil {
		o.rec.add(&o.rec.beforeFetch, js.last, f.began)
		js.fetch = f
	}
	return context.WithValue(ctx, fetchKey{}, f), func(batchobserve.FetchEnd) {
		o.rec.fetching.Add(-1)
		f.ended.Store(time.Now().UnixNano())
		o.rec.mu.Lock() // with the window's end, which counts the fetches running
		delete(o.rec.inflight, f)
		o.rec.add(&o.rec.fetch, f.began, time.Unix(0, f.end()))
		o.rec.mu.Unlock()
	}
}

func (o *nodeObserver) Store(ctx context.Context, ev batchobserve.TargetEvent) (context.Context, func(batchobserve.StoreEnd)) {
	js, _ := ctx.Value(jobKey{}).(*jobState)
	began := time.Now()
	var returned time.Time
	if js != nil && js.fetch != nil {
		if e := js.fetch.end(); e != 0 {
			returned = time.Unix(0, e)
			o.rec.add(&o.rec.afterFetch, returned, began)
		}
	}
	return ctx, func(e batchobserve.StoreEnd) {
		now := time.Now()
		if js != nil {
			js.last, js.fetch = now, nil
		}
		if e.Err != nil {
			return
		}
		o.rec.add(&o.rec.write, began, now)
		o.rec.sampleOf(&o.rec.writes, now.Sub(began))
		if !returned.IsZero() {
			o.rec.sampleOf(&o.rec.readable, now.Sub(returned))
		}
		if o.rec.on.Load() {
			o.rec.targets.Add(1)
		}
		if e.Status.Finished() {
			o.rec.live.Add(-1)
			o.rec.mu.Lock()
			o.rec.ends[ev.JobID] = jobEnd{Node: o.node, At: now.UnixNano()}
			o.rec.mu.Unlock()
		}
	}
}

func (o *nodeObserver) Webhook(ctx context.Context, _ batchobserve.WebhookAttempt) (context.Context, func(batchobserve.WebhookEnd)) {
	return ctx, func(batchobserve.WebhookEnd) {}
}

func (o *nodeObserver) Reap(ctx context.Context, _ batchobserve.ReapEvent) (context.Context, func(batchobserve.ReapEnd)) {
	return ctx, func(batchobserve.ReapEnd) {}
}
