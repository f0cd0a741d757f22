package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The load generator: closed-loop agents on loopback, each on one
// keep-alive connection of its own, sending back to back until the phase's
// time is up or its request budget is spent, whichever comes first.

// loadPhase is one route at one concurrency.
type loadPhase struct {
	Base     string // "http://127.0.0.1:port"; only loopback is accepted
	Agents   int
	Duration time.Duration
	MaxReqs  int
	// Request builds agent a's n-th request and says which status answers
	// it.
	Request func(a, n int) (*http.Request, int, error)
}

// loadResult is what one phase measured.
type loadResult struct {
	Requests  int
	Elapsed   time.Duration
	Latencies []time.Duration // sorted
}

func (r loadResult) rps() float64 { return float64(r.Requests) / r.Elapsed.Seconds() }

// checkLoopback refuses any base URL whose host is not a loopback address:
// the generator never sends traffic off the machine.
func checkLoopback(base string) error {
	u, err := url.Parse(base)
	if err != nil {
		return err
	}
	ip := net.ParseIP(u.Hostname())
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("load generator: %q is not a loopback address", u.Host)
	}
	return nil
}

// run runs the phase and fails on the first answer with a status other
// than the expected one.
func (p loadPhase) run(ctx context.Context) (loadResult, error) {
	if err := checkLoopback(p.Base); err != nil {
		return loadResult{}, err
	}
	if p.Agents < 1 || p.Duration <= 0 || p.MaxReqs < 1 {
		return loadResult{}, fmt.Errorf("load generator: a phase needs agents, a duration and a request budget")
	}
	ctx, cancel := context.WithTimeout(ctx, p.Duration+30*time.Second) // a hung server cannot hang the run
	defer cancel()
	deadline := time.Now().Add(p.Duration)
	var budget atomic.Int64
	budget.Store(int64(p.MaxReqs))
	var (
		mu       sync.Mutex
		all      []time.Duration
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	for a := range p.Agents {
		wg.Go(func() {
			tr := &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1, DisableCompression: true, Proxy: nil}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}
			lat := make([]time.Duration, 0, 1024)
			var err error
			for n := 0; time.Now().Before(deadline) && budget.Add(-1) >= 0; n++ {
				var d time.Duration
				if d, err = p.one(ctx, client, a, n); err != nil {
					break
				}
				lat = append(lat, d)
			}
			mu.Lock()
			all = append(all, lat...)
			if err != nil && firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	res := loadResult{Requests: len(all), Elapsed: time.Since(start), Latencies: all}
	slices.Sort(res.Latencies)
	return res, firstErr
}

func (p loadPhase) one(ctx context.Context, client *http.Client, a, n int) (time.Duration, error) {
	req, want, err := p.Request(a, n)
	if err != nil {
		return 0, err
	}
	req = req.WithContext(ctx)
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d := time.Since(t0)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != want {
		return 0, fmt.Errorf("%s %s: status %d, want %d", req.Method, req.URL.Path, resp.StatusCode, want)
	}
	return d, nil
}
