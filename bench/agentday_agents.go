package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
)

// The agent day's clients, over HTTP on loopback, in the parent process:
//
//   - agents: each caller keeps jobsEach jobs live. A job's loop submits
//     a job of 1 to 32 targets (on the nodes in turn), long-polls it on a
//     node picked at random (which may or may not be the one that drains
//     it) until it is finished, reads one of its results on another node
//     than the one it was submitted to, and submits the next at once (a
//     submit the caps refuse, 429, is tried again after about backOff);
//   - probes, running beside them: status readers, each reading the
//     summary of a random live job on a node other than the one it was
//     submitted to, and result readers, each reading one result of a
//     recently finished job, each waiting probePace between requests.

// adLoad is one case's clients.
type adLoad struct {
	nodes    []string // base URLs
	agents   int
	jobsEach int
	hosts    int
	probes   int // status readers, and as many result readers
	pace     time.Duration
	// statusPoll, if set, makes the agents poll their jobs' status this
	// often instead of long-polling them (an ablation, by hand).
	statusPoll time.Duration
	backOff    time.Duration // the mean wait after a refused submit

	seq atomic.Int64
	reg registry
	rec *clientRecorder
}

// clientRecorder keeps the latencies of the requests that started inside
// the window, and every long-poll that saw its job finished.
type clientRecorder struct {
	w0, w1                 atomic.Int64 // the window, Unix ns; w1 is 0 while it is open
	mu                     sync.Mutex
	submit, status, result []time.Duration
	polls                  []pollRecord
	refused                int // submits the caps refused (429)
}

// pollRecord is a long-poll that saw its job finished.
type pollRecord struct {
	Job  string
	Node int
	Sent int64 // Unix ns: when the client began to wait (its first request)
	Recv int64 // when the answer that saw the job finished arrived
}

func newClientRecorder() *clientRecorder {
	c := &clientRecorder{}
	c.w0.Store(math.MaxInt64)
	return c
}

// inside reports whether t is inside the window.
func (c *clientRecorder) inside(t time.Time) bool {
	ns, w1 := t.UnixNano(), c.w1.Load()
	return ns >= c.w0.Load() && (w1 == 0 || ns < w1)
}

func (c *clientRecorder) add(v *[]time.Duration, began time.Time, d time.Duration) {
	if !c.inside(began) {
		return
	}
	c.mu.Lock()
	*v = append(*v, d)
	c.mu.Unlock()
}

func (c *clientRecorder) addPoll(p pollRecord) {
	c.mu.Lock()
	c.polls = append(c.polls, p)
	c.mu.Unlock()
}

// registry holds the jobs the probes read: the live ones and the last
// finished ones.
type registry struct {
	mu       sync.Mutex
	at       map[string]int // a live job's index in live
	live     []regJob
	finished []regJob // a ring
	next     int
}

type regJob struct {
	ID      string
	Agent   int
	Node    int // submitted to
	Targets int
}

const finishedRing = 256

func (r *registry) added(j regJob) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at == nil {
		r.at = map[string]int{}
	}
	r.at[j.ID] = len(r.live)
	r.live = append(r.live, j)
}

func (r *registry) done(j regJob) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i, ok := r.at[j.ID]; ok {
		last := r.live[len(r.live)-1]
		r.live[i], r.at[last.ID] = last, i
		r.live = r.live[:len(r.live)-1]
		delete(r.at, j.ID)
	}
	if len(r.finished) < finishedRing {
		r.finished = append(r.finished, j)
		return
	}
	r.finished[r.next] = j
	r.next = (r.next + 1) % finishedRing
}

func (r *registry) pickLive() (regJob, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.live) == 0 {
		return regJob{}, false
	}
	return r.live[rand.IntN(len(r.live))], true
}

func (r *registry) pickFinished() (regJob, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.finished) == 0 {
		return regJob{}, false
	}
	return r.finished[rand.IntN(len(r.finished))], true
}

// run runs the load until ctx ends, and returns the first error of a
// client (an unexpected answer) or nil.
func (l *adLoad) run(ctx context.Context) error {
	for _, n := range l.nodes {
		if err := checkLoopback(n); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	fail := func(err error) {
		if err != nil && ctx.Err() == nil {
			cancel(err)
		}
	}
	var clients []*http.Client
	client := func() *http.Client {
		c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, DisableCompression: true, Proxy: nil}}
		clients = append(clients, c)
		return c
	}
	for a := range l.agents {
		c := client()
		for k := range l.jobsEach {
			wg.Go(func() { fail(l.jobLoop(ctx, c, a, k)) })
		}
	}
	for p := range l.probes {
		s, r := client(), client()
		wg.Go(func() { fail(l.statusProbe(ctx, s, p)) })
		wg.Go(func() { fail(l.resultProbe(ctx, r)) })
	}
	wg.Wait()
	for _, c := range clients {
		c.CloseIdleConnections()
	}
	if err := context.Cause(ctx); !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// jobLoop is one of agent a's job loops.
func (l *adLoad) jobLoop(ctx context.Context, client *http.Client, a, k int) error {
	n := len(l.nodes)
	for i := 0; ctx.Err() == nil; i++ {
		node := (a + k + i) % n
		j, err := l.submit(ctx, client, a, node)
		if errors.Is(err, errRefused) {
			if !sleepCtx(ctx, l.backOff/2+rand.N(l.backOff+1)) {
				break
			}
			continue
		}
		if err != nil {
			return err
		}
		l.reg.added(j)
		if err := l.poll(ctx, client, j, rand.IntN(n)); err != nil {
			return err
		}
		l.reg.done(j)
		if err := l.readResult(ctx, client, j, (node+1)%n); err != nil {
			return err
		}
	}
	return nil
}

func (l *adLoad) submit(ctx context.Context, client *http.Client, a, node int) (regJob, error) {
	ts := make([]batch.Target, 1+rand.IntN(32))
	seq := l.seq.Add(1)
	for i := range ts {
		ts[i].URL = fmt.Sprintf("http://%s/a%d/%d/%d", hostName(rand.IntN(l.hosts)), a, seq, i)
	}
	body, err := json.Marshal(batchhttp.SubmitRequest{Targets: ts})
	if err != nil {
		return regJob{}, err
	}
	var resp batchhttp.SubmitResponse
	began := time.Now()
	if err := l.do(ctx, client, http.MethodPost, l.nodes[node]+"/v1/batch", a, body, http.StatusAccepted, &resp); err != nil {
		if errors.Is(err, errRefused) && l.rec.inside(began) {
			l.rec.mu.Lock()
			l.rec.refused++
			l.rec.mu.Unlock()
		}
		return regJob{}, err
	}
	l.rec.add(&l.rec.submit, began, time.Since(began))
	return regJob{ID: resp.JobID, Agent: a, Node: node, Targets: len(ts)}, nil
}

// longPoll is the wait each long-poll asks for.
const longPoll = "30s"

func (l *adLoad) poll(ctx context.Context, client *http.Client, j regJob, node int) error {
	url := l.nodes[node] + "/v1/batch/" + j.ID + "?wait=" + longPoll
	if l.statusPoll > 0 {
		url = l.nodes[node] + "/v1/batch/" + j.ID
	}
	sent := time.Now()
	for i := 0; ctx.Err() == nil; i++ {
		if i > 0 && l.statusPoll > 0 && !sleepCtx(ctx, l.statusPoll) {
			break
		}
		var st batchhttp.StatusResponse
		if err := l.do(ctx, client, http.MethodGet, url, j.Agent, nil, http.StatusOK, &st); err != nil {
			return err
		}
		if st.Status.Finished() {
			l.rec.addPoll(pollRecord{Job: j.ID, Node: node, Sent: sent.UnixNano(), Recv: time.Now().UnixNano()})
			return nil
		}
	}
	return nil
}

func (l *adLoad) readResult(ctx context.Context, client *http.Client, j regJob, node int) error {
	began := time.Now()
	url := fmt.Sprintf("%s/v1/batch/%s/%d", l.nodes[node], j.ID, rand.IntN(j.Targets))
	if err := l.do(ctx, client, http.MethodGet, url, j.Agent, nil, http.StatusOK, nil); err != nil {
		return err
	}
	l.rec.add(&l.rec.result, began, time.Since(began))
	return nil
}

// statusProbe reads the summary of random live jobs on another node than
// the one each was submitted to.
func (l *adLoad) statusProbe(ctx context.Context, client *http.Client, p int) error {
	for l.pause(ctx) {
		j, ok := l.reg.pickLive()
		if !ok {
			continue
		}
		node := (j.Node + 1 + p) % len(l.nodes)
		if node == j.Node && len(l.nodes) > 1 {
			node = (node + 1) % len(l.nodes)
		}
		began := time.Now()
		if err := l.do(ctx, client, http.MethodGet, l.nodes[node]+"/v1/batch/"+j.ID, j.Agent, nil, http.StatusOK, nil); err != nil {
			return err
		}
		l.rec.add(&l.rec.status, began, time.Since(began))
	}
	return nil
}

// resultProbe reads one result of random recently finished jobs.
func (l *adLoad) resultProbe(ctx context.Context, client *http.Client) error {
	for l.pause(ctx) {
		j, ok := l.reg.pickFinished()
		if !ok {
			continue
		}
		if err := l.readResult(ctx, client, j, rand.IntN(len(l.nodes))); err != nil {
			return err
		}
	}
	return nil
}

// pause waits the probes' pace; false once ctx ended.
func (l *adLoad) pause(ctx context.Context) bool { return sleepCtx(ctx, l.pace) }

// sleepCtx waits d; false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// errRefused is a submit the caps refused.
var errRefused = errors.New("submit refused: 429")

// do sends one request as agent a and decodes the answer into v (if not
// nil). Any status but want fails.
func (l *adLoad) do(ctx context.Context, client *http.Client, method, url string, a int, body []byte, want int, v any) error {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+agentKey(a))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode == http.StatusTooManyRequests && want == http.StatusAccepted {
		return errRefused
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: status %d, want %d: %.200s", method, req.URL.Path, resp.StatusCode, want, b)
	}
	if v != nil {
		return json.Unmarshal(b, v)
	}
	return nil
}
