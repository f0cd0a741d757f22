package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"
)

// The agent day's upstream: the web the runner fetches from, on loopback.
// Each answer takes a lognormal time; a share of the requests never
// answer (the fetch times out), and shares answer 4xx and 5xx. Its
// busy-time meter is the utilization's measure: the time requests spend
// at the upstream, summed over a window, against what the fetch slots
// could hold.

// z99 is the standard normal's 0.99 quantile.
const z99 = 2.3263478740408408

// lognormal is a latency whose logarithm is normal: exp(Mu + Sigma·Z).
type lognormal struct{ Mu, Sigma float64 }

// lognormalOf is the lognormal with the given median and 0.99 quantile.
func lognormalOf(median, p99 time.Duration) lognormal {
	return lognormal{Mu: math.Log(median.Seconds()), Sigma: math.Log(float64(p99)/float64(median)) / z99}
}

// quantile is the model's q-quantile for a standard normal quantile z.
func (l lognormal) quantile(z float64) time.Duration {
	return time.Duration(math.Exp(l.Mu+l.Sigma*z) * float64(time.Second))
}

// mean is the model's mean: exp(Mu + Sigma²/2).
func (l lognormal) mean() time.Duration {
	return time.Duration(math.Exp(l.Mu+l.Sigma*l.Sigma/2) * float64(time.Second))
}

// sample draws one latency.
func (l lognormal) sample(r *rand.Rand) time.Duration { return l.quantile(r.NormFloat64()) }

// upstreamModel is how the upstream answers.
type upstreamModel struct {
	Latency lognormal
	// Hang is how long a request that never answers is held at most, in
	// case its client does not give up (the runner's fetch deadline ends
	// it first).
	Hang time.Duration
	// Shares of the requests that time out, answer 404 and answer 500;
	// the rest answer 200 with Body. All but the timeouts answer after a
	// latency drawn from Latency.
	TimeoutShare, Share4xx, Share5xx float64
	Body                             []byte
}

// answer is what the upstream does with one request.
type answer struct {
	status int           // 0: never answer
	after  time.Duration // when to answer
}

// draw decides one request's answer.
func (m upstreamModel) draw(r *rand.Rand) answer {
	u := r.Float64()
	switch {
	case u < m.TimeoutShare:
		return answer{after: m.Hang}
	case u < m.TimeoutShare+m.Share4xx:
		return answer{status: http.StatusNotFound, after: m.Latency.sample(r)}
	case u < m.TimeoutShare+m.Share4xx+m.Share5xx:
		return answer{status: http.StatusInternalServerError, after: m.Latency.sample(r)}
	}
	return answer{status: http.StatusOK, after: m.Latency.sample(r)}
}

// busyMeter sums the time requests spend at the upstream within a window:
// a request that straddles an edge counts only its part inside. Times are
// passed in, so that tests can drive it.
type busyMeter struct {
	mu       sync.Mutex
	next     uint64
	inflight map[uint64]time.Time
	state    int // meterBefore, meterOpen or meterClosed
	w0, w1   time.Time
	busy     time.Duration // inside the window
	ended    int           // requests that ended inside the window
	latSum   time.Duration // their whole time at the upstream
	peak     int           // most requests in flight at once, inside the window
}

const (
	meterBefore = iota
	meterOpen
	meterClosed
)

func newBusyMeter() *busyMeter { return &busyMeter{inflight: map[uint64]time.Time{}} }

// begin records a request's arrival and returns its ticket.
func (b *busyMeter) begin(now time.Time) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	b.inflight[b.next] = now
	if b.state == meterOpen {
		b.peak = max(b.peak, len(b.inflight))
	}
	return b.next
}

// end records the end of the request with ticket id.
func (b *busyMeter) end(id uint64, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	start, ok := b.inflight[id]
	if !ok {
		return
	}
	delete(b.inflight, id)
	if b.state != meterOpen {
		return
	}
	b.busy += now.Sub(later(start, b.w0))
	b.ended++
	b.latSum += now.Sub(start)
}

// open starts the window.
func (b *busyMeter) open(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.state, b.w0, b.peak = meterOpen, now, len(b.inflight)
}

// close ends the window: the requests in flight count up to now.
func (b *busyMeter) close(now time.Time) busyFigures {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == meterOpen {
		for _, start := range b.inflight {
			b.busy += now.Sub(later(start, b.w0))
		}
		b.state, b.w1 = meterClosed, now
	}
	return busyFigures{Window: b.w1.Sub(b.w0), Busy: b.busy, Ended: b.ended, LatSum: b.latSum, Peak: b.peak}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// busyFigures is what the meter measured over its window.
type busyFigures struct {
	Window time.Duration
	Busy   time.Duration // request-time inside the window
	Ended  int           // requests ended inside it
	LatSum time.Duration // their whole time at the upstream
	Peak   int           // most requests at once
}

// utilization is the busy time over what slots fetch slots could hold
// in the window: 1.0 is every slot at the upstream all the time. It is
// the targets answered per second over (slots ÷ mean upstream latency),
// without the error at the window's edges.
func (f busyFigures) utilization(slots int) float64 {
	if f.Window <= 0 || slots <= 0 {
		return math.NaN()
	}
	return f.Busy.Seconds() / (float64(slots) * f.Window.Seconds())
}

func (f busyFigures) rate() float64 { return float64(f.Ended) / f.Window.Seconds() }

func (f busyFigures) meanLatency() time.Duration {
	if f.Ended == 0 {
		return 0
	}
	return f.LatSum / time.Duration(f.Ended)
}

// upstream is the server: listeners on several loopback addresses, one
// handler.
type upstream struct {
	model upstreamModel
	meter *busyMeter
	addrs []string // "127.0.0.x:port"
	srv   *http.Server
	wg    sync.WaitGroup
}

// upstreamListeners is how many loopback addresses the upstream listens
// on; the runner's virtual hosts are spread over them.
const upstreamListeners = 8

func startUpstream(m upstreamModel) (*upstream, error) {
	u := &upstream{model: m, meter: newBusyMeter()}
	u.srv = &http.Server{Handler: u, ReadHeaderTimeout: 10 * time.Second}
	var lns []net.Listener
	for i := range upstreamListeners {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.%d:0", i+1))
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, fmt.Errorf("upstream listener: %w", err)
		}
		lns = append(lns, ln)
		u.addrs = append(u.addrs, ln.Addr().String())
	}
	for _, ln := range lns {
		u.wg.Go(func() { _ = u.srv.Serve(ln) })
	}
	return u, nil
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := u.meter.begin(time.Now())
	defer func() { u.meter.end(id, time.Now()) }()
	a := u.model.draw(rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())))
	t := time.NewTimer(a.after)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done(): // the fetch gave up
		return
	}
	if a.status == 0 {
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(a.status)
	if a.status == http.StatusOK {
		_, _ = w.Write(u.model.Body)
	}
}

func (u *upstream) close(ctx context.Context) {
	_ = u.srv.Shutdown(ctx)
	_ = u.srv.Close()
	u.wg.Wait()
}
