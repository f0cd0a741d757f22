package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/examples/internal/testbin"
)

// floodRSSCeiling is the resident memory (100 MB) the built batchd stays
// under while one caller floods it with submits of empty targets.
const floodRSSCeiling int64 = 100_000_000

// emptyTargets returns a submit body of n bytes at most: as many empty
// targets, {"targets":[{},{},…]}, as fit.
func emptyTargets(n int) []byte {
	const head, tail = `{"targets":[`, `]}`
	count := (n - len(head) - len(tail) + 1) / len("{},")
	var b bytes.Buffer
	b.WriteString(head)
	b.WriteString(strings.Repeat("{},", count-1))
	b.WriteString("{}" + tail)
	return b.Bytes()
}

// One caller's flood of submits cannot fill the built batchd's memory nor
// slow another caller: for 5s, the attacker posts a 256 KiB body of
// 87,377 empty targets on 64 connections at once, over and over. Every
// answer is 422 too_many_targets (the decoder stops at the target after
// the cap) or 429 submits_busy (the caller's cap of submits in flight),
// batchd's peak resident memory stays under 100 MB, and the victim's
// GET /v1/batch, every 100ms meanwhile, is answered 200 within 1s.
//
// Not parallel: the flood takes every core for 5s, which would be measured
// as the latency of the other tests' victims, and theirs as this one's.
func TestSubmitFlood(t *testing.T) {
	// Without -race even in a -race run: the detector's shadow memory and
	// slowdown (a peak of 120 MiB, the victim's answers near 1s, on two
	// cores) would measure the detector, not batchd.
	bin := testbin.BuildPackage(t, "batchd", "../../batchd", false)
	d := startBatchd(t, bin)
	defer d.stop(t)
	body := emptyTargets(batchhttp.MaxBodyBytes)
	if len(body) > batchhttp.MaxBodyBytes || len(body) < batchhttp.MaxBodyBytes-3 {
		t.Fatalf("body of %d bytes, want %d at most and near it", len(body), batchhttp.MaxBodyBytes)
	}
	rss0, _, err := procMemory(d.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}

	ctx := t.Context()
	flood, stopFlood := context.WithTimeout(ctx, 5*time.Second)
	defer stopFlood()
	var mu sync.Mutex
	answers := map[string]int{} // "422 too_many_targets", …, or "error: …"
	note := func(s string) {
		mu.Lock()
		answers[s]++
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			// A client of its own: a connection of its own, at least.
			hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}}
			defer hc.CloseIdleConnections()
			for flood.Err() == nil {
				code, status, err := postRaw(ctx, hc, "http://"+d.addr+"/v1/batch", keyOf("attacker"), body)
				if err != nil {
					note("error: " + err.Error())
					continue
				}
				note(fmt.Sprintf("%d %s", status, code))
			}
		})
	}
	var victimLat []time.Duration
	var victimBad []string
	wg.Go(func() {
		c := newClient(d.addr, "victim", nil)
		defer c.close()
		for flood.Err() == nil {
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			start := time.Now()
			a, err := c.do(rctx, http.MethodGet, "/v1/batch", nil)
			took := time.Since(start)
			cancel()
			switch {
			case err != nil:
				victimBad = append(victimBad, fmt.Sprintf("after %s: %v", took.Round(time.Millisecond), err))
			case a.code != http.StatusOK:
				victimBad = append(victimBad, fmt.Sprintf("%d %s", a.code, a.errorText()))
			default:
				victimLat = append(victimLat, took)
			}
			sleep(flood, 100*time.Millisecond)
		}
	})
	var rssMax int64
	for flood.Err() == nil { // the resident set now and then, for the log
		if rss, _, err := procMemory(d.cmd.Process.Pid); err == nil {
			rssMax = max(rssMax, rss)
		}
		sleep(flood, 50*time.Millisecond)
	}
	wg.Wait()
	_, peak, err := procMemory(d.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}

	total := 0
	for answer, n := range answers {
		t.Logf("attacker: %6d × %s", n, answer)
		total += n
		if answer != "422 "+batchhttp.CodeTooManyTargets && answer != "429 "+batchhttp.CodeSubmitsBusy {
			t.Errorf("attacker: %d × %q, want only 422 %s or 429 %s", n, answer, batchhttp.CodeTooManyTargets, batchhttp.CodeSubmitsBusy)
		}
	}
	if answers["422 "+batchhttp.CodeTooManyTargets] == 0 {
		t.Errorf("no submit of the flood reached the decoder: the test measured nothing")
	}
	if peak >= floodRSSCeiling {
		t.Errorf("batchd's peak resident memory %d MB (%d MB before the flood), want under %d MB",
			peak/1e6, rss0/1e6, floodRSSCeiling/1e6)
	}
	for _, b := range victimBad {
		t.Errorf("the victim's GET /v1/batch during the flood: %s", b)
	}
	if len(victimLat) < 3 {
		t.Errorf("the victim got %d answers in 5s", len(victimLat))
	}
	var worst time.Duration
	for _, l := range victimLat {
		worst = max(worst, l)
	}
	t.Logf("%d submits in 5s on 64 connections; batchd RSS %d MB before, at most %d MB sampled, peak (VmHWM) %d MB; victim: %d GET /v1/batch, slowest %s",
		total, rss0/1e6, rssMax/1e6, peak/1e6, len(victimLat), worst.Round(time.Millisecond))
}

// postRaw posts body to url with key and returns the answer's status and
// error code (from its JSON body, "" if none).
func postRaw(ctx context.Context, hc *http.Client, url, key string, body []byte) (code string, status int, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return "", 0, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", resp.StatusCode, err
	}
	var e batchhttp.ErrorResponse
	_ = json.Unmarshal(b, &e)
	return e.Code, resp.StatusCode, nil
}
