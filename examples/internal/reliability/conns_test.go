package reliability

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
)

// latencies are the answer times of a victim's status reads.
type latencies []time.Duration

// pollFor reads job's summary as c until ctx ends, 5ms apart, and returns
// the answer times and the count of answers that were not a 200.
func pollFor(ctx context.Context, c *client, job string) (latencies, int) {
	var lat latencies
	errs := 0
	for ctx.Err() == nil {
		t0 := time.Now()
		_, a, err := c.status(context.Background(), job, "")
		if err != nil || a.code != http.StatusOK {
			errs++
			continue
		}
		lat = append(lat, time.Since(t0))
		time.Sleep(5 * time.Millisecond)
	}
	return lat, errs
}

// check fails t unless the victim got enough answers, none of them an
// error, with a p99 under a second, and logs the figures.
func (l latencies) check(t *testing.T, what string, errs int) {
	t.Helper()
	slices.Sort(l)
	if len(l) < 20 {
		t.Fatalf("%s: the victim got %d answers (%d errors)", what, len(l), errs)
	}
	p50, p99, worst := l[len(l)/2], l[len(l)*99/100], l[len(l)-1]
	t.Logf("%s: victim %d status reads, %d errors, p50 %s, p99 %s, max %s", what, len(l), errs,
		p50.Round(time.Microsecond), p99.Round(time.Microsecond), worst.Round(time.Microsecond))
	if errs > 0 || p99 > time.Second {
		t.Errorf("%s: the victim's status reads: %d errors, p99 %s (want none, and p99 < 1s)", what, errs, p99)
	}
}

// One caller cannot pin the server's connections:
// while an attacker holds 64 long-polls and 8 followed streams (it gets
// its caps, 8 and 4, and 429 waits_busy or streams_busy for the rest),
// and then while 300 connections without a key sit idle (half kept alive
// after a GET /healthz, half silent: more than the server's 256), another
// caller's status reads keep a p99 under a second, each of the latter on
// a new connection.
func TestConnectionIsolation(t *testing.T) {
	t.Parallel()
	phase := 4 * time.Second
	if long() {
		phase = 20 * time.Second
	}
	up := newUpstream(t, time.Millisecond)
	cfg := childConfig{
		DB: filepath.Join(t.TempDir(), "conns.db"), Allow: []string{up.addr()}, Callers: []string{"victim", "attacker"},
		Batch: batch.Config{JobsPerCaller: 2, Workers: 2},
	}
	_, addr, _ := serveStoppable(t, cfg, nil)
	defer up.openGate(1) // the attacker's job finishes, so the daemon stops at once
	ctx := t.Context()
	counts := newCounts()
	victim := newClient(addr, "victim", counts)
	defer victim.close()
	sr, a, err := victim.submit(ctx, []string{up.url("f-conns-victim")})
	if err != nil || a.code != http.StatusAccepted {
		t.Fatalf("victim's submit: %v %d %s", err, a.code, a.errorText())
	}
	for st, _, _ := victim.status(ctx, sr.JobID, "?wait=10s"); !st.Status.Finished(); st, _, _ = victim.status(ctx, sr.JobID, "?wait=10s") {
		if ctx.Err() != nil {
			t.Fatal("the victim's job did not finish")
		}
	}
	attacker := newClient(addr, "attacker", nil)
	defer attacker.close()
	held, a, err := attacker.submit(ctx, []string{up.url("f-conns-attacker"), up.url("fgate1-conns")})
	if err != nil || a.code != http.StatusAccepted {
		t.Fatalf("attacker's submit: %v %d %s", err, a.code, a.errorText())
	}

	// Phase 1: 64 long-polls and 8 followed streams of one caller, each
	// asked again a moment after a 429.
	attackCtx, stopAttack := context.WithTimeout(ctx, phase)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 100}}
	defer hc.CloseIdleConnections()
	var mu sync.Mutex
	answers := map[string]int{}
	var wg sync.WaitGroup
	hold := func(path string) {
		for attackCtx.Err() == nil {
			req, _ := http.NewRequestWithContext(attackCtx, http.MethodGet, "http://"+addr+path, nil)
			req.Header.Set("Authorization", "Bearer "+keyOf("attacker"))
			resp, err := hc.Do(req)
			if err != nil {
				return // the phase is over
			}
			note := fmt.Sprint(resp.StatusCode)
			if resp.StatusCode != http.StatusOK {
				var e batchhttp.ErrorResponse
				_ = json.NewDecoder(resp.Body).Decode(&e)
				note += " " + e.Code + " Retry-After=" + resp.Header.Get("Retry-After")
			}
			mu.Lock()
			answers[note]++
			mu.Unlock()
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusTooManyRequests {
				select {
				case <-attackCtx.Done():
				case <-time.After(200 * time.Millisecond):
				}
			}
		}
	}
	for range 64 {
		wg.Go(func() { hold("/v1/batch/" + held.JobID + "?wait=60s") })
	}
	for range 8 {
		wg.Go(func() { hold("/v1/batch/" + held.JobID + "/results?follow=1") })
	}
	lat, errs := pollFor(attackCtx, victim, sr.JobID)
	stopAttack()
	wg.Wait()
	lat.check(t, "64 long-polls and 8 streams of one caller", errs)
	t.Logf("the attacker's answers: %v", answers)
	for _, want := range []string{"429 waits_busy Retry-After=5", "429 streams_busy Retry-After=5"} {
		if answers[want] == 0 {
			t.Errorf("the attacker never got %q: %v", want, answers)
		}
	}

	// Phase 2: 300 idle connections without a key, each opened again
	// (after 100ms) once the server closes it.
	idleCtx, stopIdle := context.WithTimeout(ctx, phase+2*time.Second)
	defer stopIdle()
	var redials atomic.Int64
	var idlers sync.WaitGroup
	for i := range 300 {
		idlers.Go(func() { holdIdle(idleCtx, addr, i%2 == 0, &redials) })
	}
	sleep(idleCtx, 2*time.Second) // the server fills, and its silent connections are past their first second
	// The victim comes as a new client would: each read on a connection
	// of its own, which the server must find room for.
	fresh := newClient(addr, "victim", counts)
	fresh.http.Transport = &http.Transport{DisableKeepAlives: true}
	lat, errs = pollFor(idleCtx, fresh, sr.JobID)
	idlers.Wait()
	lat.check(t, "300 idle connections without a key", errs)
	t.Logf("the 300 idle connections were closed by the server and opened again %d times", redials.Load())
	counts.check(t)
}

// holdIdle keeps one connection to addr open and idle until ctx ends:
// kept alive after one GET /healthz, or silent. When the server closes
// it, it opens it again 100ms later, counting that in redials.
func holdIdle(ctx context.Context, addr string, keepAlive bool, redials *atomic.Int64) {
	for first := true; ctx.Err() == nil; first = false {
		if !first {
			redials.Add(1)
			sleep(ctx, 100*time.Millisecond)
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			continue
		}
		stop := context.AfterFunc(ctx, func() { c.Close() })
		br := bufio.NewReader(c)
		if keepAlive {
			if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err == nil {
				if resp, err := http.ReadResponse(br, nil); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}
		_, _ = br.ReadByte() // until the server closes it, or ctx ends
		stop()
		c.Close()
	}
}

// A refusal closes its connection at once: a POST
// without a key that announces a 10-byte body and sends one byte reads its
// 401 and then the end of the connection within 2s (the server's read
// timeout is 30s).
func TestRefusalClosesConnection(t *testing.T) {
	t.Parallel()
	cfg := childConfig{DB: filepath.Join(t.TempDir(), "refusal.db"), Callers: []string{"someone"}}
	_, addr, _ := serveStoppable(t, cfg, nil)
	var waits latencies
	for range 8 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "POST /v1/batch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			c.Close()
			t.Fatalf("no answer: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		answered := time.Now()
		_, err = br.ReadByte()
		waited := time.Since(answered)
		c.Close()
		if resp.StatusCode != http.StatusUnauthorized || err != io.EOF || waited > 2*time.Second {
			t.Fatalf("answer %s, then %v after %s; want 401, then EOF within 2s", resp.Status, err, waited.Round(time.Millisecond))
		}
		waits = append(waits, waited)
	}
	slices.Sort(waits)
	t.Logf("from the 401 to the end of the connection: p50 %s, max %s (8 refusals)",
		waits[len(waits)/2].Round(time.Millisecond), waits[len(waits)-1].Round(time.Millisecond))
}
