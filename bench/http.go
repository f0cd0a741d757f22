package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/batchhttp/batchserver"
	"github.com/siftfetch/batchkit/batchstore"
)

// The HTTP phase: submit, status and one-result latency through
// batchhttp's Handler, wired as the example daemon wires it (key auth,
// the URL pre-check, request ids), on the SQLite store at its defaults
// (synchronous=FULL), served on loopback and driven by the load generator
// from the same process, so that both share the machine's cores.
//
// Each agent is a caller with a key of its own. Before the phases each
// agent's one finished job of 32 targets with 10 KiB results is made;
// status reads ask for that job's summary and result reads for one of its
// targets (idx cycling). Submits post 32 new URLs each time; the fetcher
// of their jobs waits until the run ends, so the submit figures are the
// submit path alone and the drain of thousands of jobs does not load the
// reads (the caps are raised so that the submits are never refused).

const (
	readyHost   = "https://ready.example/"
	httpTargets = 32
)

// httpRoute is one measured route.
type httpRoute struct {
	Name  string
	Route string
}

var httpRoutes = []httpRoute{
	{"status", "GET /v1/batch/{id}"},
	{"result", "GET /v1/batch/{id}/{idx}"},
	{"submit", "POST /v1/batch (32 targets)"},
}

// httpReport is the HTTP phase's outcome: results by route and
// concurrency.
type httpReport struct {
	Agents  []int
	Phase   time.Duration
	MaxReqs int
	Results map[string]map[int]loadResult
}

func httpPhase(ctx context.Context, sz sizes, tmp string) (*httpReport, error) {
	srv, err := newHTTPServer(ctx, tmp, slicesMax(sz.httpAgents))
	if err != nil {
		return nil, err
	}
	defer srv.close()
	rep := &httpReport{Agents: sz.httpAgents, Phase: sz.httpPhase, MaxReqs: sz.httpMax, Results: map[string]map[int]loadResult{}}
	for _, rt := range httpRoutes {
		rep.Results[rt.Name] = map[int]loadResult{}
	}
	for _, agents := range sz.httpAgents {
		for _, rt := range httpRoutes {
			p := loadPhase{Base: srv.base, Agents: agents, Duration: sz.httpPhase, MaxReqs: sz.httpMax, Request: srv.request(rt.Name)}
			res, err := p.run(ctx)
			if err != nil {
				return nil, fmt.Errorf("http %s, %d agents: %w", rt.Name, agents, err)
			}
			rep.Results[rt.Name][agents] = res
			logf("http %-7s %2d agents %8.0f req/s  p50 %s  p99 %s", rt.Name, agents, res.rps(),
				fmtDur(quantile(res.Latencies, 0.50)), fmtDur(quantile(res.Latencies, 0.99)))
		}
	}
	return rep, nil
}

func slicesMax(v []int) int {
	m := 0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// httpServer is the daemon under load.
type httpServer struct {
	base    string
	keys    []string // agent a's bearer key
	ready   []string // agent a's finished job
	store   *batchstore.Store
	runner  *batch.Runner
	srv     *http.Server
	release chan struct{}
}

func newHTTPServer(ctx context.Context, tmp string, agents int) (_ *httpServer, err error) {
	s := &httpServer{release: make(chan struct{})}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if s.store, err = batchstore.Open(ctx, filepath.Join(tmp, "http.db"), batchstore.Config{}); err != nil {
		return nil, err
	}
	env, err := newDrainEnv(drainWork{ResultBytes: 10 << 10}, tmp, "")
	if err != nil {
		return nil, err
	}
	fetch := func(ctx context.Context, _ batch.Caller, t batch.Target) (batch.Result, error) {
		if strings.HasPrefix(t.URL, readyHost) {
			return batch.Result{Content: env.content}, nil
		}
		select { // a submitted job's target waits until the run ends
		case <-s.release:
		case <-ctx.Done():
		}
		return batch.Result{}, errors.New("bench: released")
	}
	s.runner, err = batch.New(batch.Config{Store: s.store, Fetch: fetch, Options: batchsift.Options, JobsPerCaller: 1 << 20, JobsTotal: 1 << 30,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	if err := s.runner.Start(ctx); err != nil {
		return nil, err
	}
	var keys []batchserver.Key
	for a := range agents {
		keys = append(keys, batchserver.Key{Name: fmt.Sprint("agent-", a), Secret: fmt.Sprint("key-", a)})
		s.keys = append(s.keys, keys[a].Secret)
	}
	auth, err := batchserver.NewKeyAuth(keys)
	if err != nil {
		return nil, err
	}
	h, err := batchhttp.NewHandler(s.runner, &batchhttp.HandlerConfig{Authenticate: auth, Precheck: batchhttp.PrecheckURL})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/batch", h)
	mux.Handle("/v1/batch/", h)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.srv = &http.Server{Handler: batchhttp.WithRequestID(mux), ReadHeaderTimeout: 5 * time.Second}
	go s.srv.Serve(ln)
	s.base = "http://" + ln.Addr().String()
	return s, s.makeReady(ctx, agents)
}

// makeReady gives every agent one finished job of httpTargets targets.
func (s *httpServer) makeReady(ctx context.Context, agents int) error {
	for a := range agents {
		caller := batch.Caller{Name: fmt.Sprint("agent-", a)}
		ts := make([]batch.Target, httpTargets)
		for i := range ts {
			ts[i].URL = fmt.Sprintf("%s%d/%d", readyHost, a, i)
		}
		job, _, err := s.runner.Submit(ctx, caller, ts)
		if err != nil {
			return err
		}
		for {
			info, err := s.runner.Wait(ctx, caller, job.ID, batch.WaitOptions{Timeout: 10 * time.Second})
			if err != nil {
				return err
			}
			if info.Status.Finished() {
				if info.Status != batch.JobDone {
					return fmt.Errorf("ready job of agent %d: %s", a, info.Status)
				}
				break
			}
		}
		s.ready = append(s.ready, job.ID)
	}
	return nil
}

// request returns the request builder of a route.
func (s *httpServer) request(route string) func(a, n int) (*http.Request, int, error) {
	return func(a, n int) (*http.Request, int, error) {
		var req *http.Request
		var err error
		want := http.StatusOK
		switch route {
		case "status":
			req, err = http.NewRequest(http.MethodGet, s.base+"/v1/batch/"+s.ready[a], nil)
		case "result":
			req, err = http.NewRequest(http.MethodGet, fmt.Sprintf("%s/v1/batch/%s/%d", s.base, s.ready[a], n%httpTargets), nil)
		case "submit":
			want = http.StatusAccepted
			var body []byte
			if body, err = submitBody(a, n); err == nil {
				req, err = http.NewRequest(http.MethodPost, s.base+"/v1/batch", bytes.NewReader(body))
			}
		default:
			err = fmt.Errorf("unknown route %q", route)
		}
		if err != nil {
			return nil, 0, err
		}
		req.Header.Set("Authorization", "Bearer "+s.keys[a])
		return req, want, nil
	}
}

// submitSeq makes every submit's URLs new, across phases too, so that no
// submit is an idempotent reuse.
var submitSeq atomic.Int64

func submitBody(a, n int) ([]byte, error) {
	seq := submitSeq.Add(1)
	ts := make([]batch.Target, httpTargets)
	for i := range ts {
		ts[i].URL = fmt.Sprintf("https://bench.example/%d/%d/%d/%d", seq, a, n, i)
	}
	return json.Marshal(batchhttp.SubmitRequest{Targets: ts})
}

func (s *httpServer) close() {
	close(s.release)
	if s.srv != nil {
		s.srv.Close()
	}
	if s.runner != nil {
		s.runner.Close(context.Background())
	}
	if s.store != nil {
		s.store.Close()
	}
}
