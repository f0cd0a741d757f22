package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchnet"
)

// The nodes' fetcher: the targets name virtual hosts, which its dialer
// sends to the upstream's loopback listeners.

// hostName is virtual host i: the targets' URLs name hosts that no
// resolver knows; the fetcher's dialer maps each to an upstream listener.
func hostName(i int) string { return fmt.Sprintf("h%03d.agentday.test", i) }

// hostIndex is hostName's inverse; -1 for any other name.
func hostIndex(name string) int {
	s, ok := strings.CutPrefix(name, "h")
	if !ok {
		return -1
	}
	s, ok = strings.CutSuffix(s, ".agentday.test")
	if !ok {
		return -1
	}
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 {
		return -1
	}
	return i
}

// newUpstreamFetcher is the runner's FetchFunc: a plain net/http client
// whose dialer stands in for DNS, sending each virtual host to an upstream
// listener (and refusing any other name, so that nothing leaves the
// machine). An answer other than 2xx fails the target with its outcome,
// as a daemon's fetcher does (batchnet.ResponseError).
// The function it also returns closes the client's idle connections.
func newUpstreamFetcher(upstream []string, hosts int) (batch.FetchFunc, func()) {
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			i := hostIndex(host)
			if i < 0 || i >= hosts || len(upstream) == 0 {
				return nil, fmt.Errorf("agentday: unknown host %q", host)
			}
			return dialer.DialContext(ctx, network, upstream[i%len(upstream)])
		},
		MaxIdleConns: 4 * hosts, MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute,
		DisableCompression: true, ResponseHeaderTimeout: 0, Proxy: nil,
	}
	client := &http.Client{Transport: tr}
	return func(ctx context.Context, _ batch.Caller, t batch.Target) (batch.Result, error) {
		defer fetchReturned(ctx)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
		if err != nil {
			return batch.Result{}, &batchnet.BlockedError{Reason: batchnet.ReasonUnparseable}
		}
		resp, err := client.Do(req)
		if err != nil {
			return batch.Result{}, batchnet.CleanError(ctx, err)
		}
		defer resp.Body.Close()
		if err := batchnet.ResponseError(resp); err != nil {
			_, _ = io.Copy(io.Discard, resp.Body) // keep the connection
			return batch.Result{}, err
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			return batch.Result{}, batchnet.CleanError(ctx, err)
		}
		return batch.Result{Content: string(body)}, nil
	}, client.CloseIdleConnections
}
