package reliability

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
)

// rawAttack dials addr, writes raw, and reads the first line of the
// answer within wait. It returns that line ("" if none came) and whether
// the server closed the connection after its answer.
func rawAttack(addr, raw string, wait time.Duration) (line string, closed bool) {
	c, err := net.DialTimeout("tcp", addr, wait)
	if err != nil {
		return "dial: " + err.Error(), true
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(wait))
	if _, err := io.WriteString(c, raw); err != nil {
		return "write: " + err.Error(), true
	}
	br := bufio.NewReader(c)
	line, err = br.ReadString('\n')
	if err != nil {
		return "", false
	}
	// The rest of the answer, then the end of the connection.
	_, err = io.Copy(io.Discard, br)
	return strings.TrimSpace(line), err == nil
}

// The resource attacks of the first security review, all at once against one daemon process,
// while a victim keeps polling its own job: 200 clients announce a large
// submit body without a key and stall; 100 send 64 KiB of headers; 40 read
// a 4 MiB job with ?results=1 over and over. Each attack gets its planned
// answer (401 at once and the connection closed; 431; 200 or 429 with
// Retry-After), the daemon's memory stays bounded, and the victim's polls
// go on.
func TestResourceAttacks(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, time.Millisecond)
	cfg := childConfig{
		DB: t.TempDir() + "/attacks.db", Allow: []string{up.addr()}, Callers: []string{"victim", "attacker"},
		Batch: batch.Config{JobsPerCaller: 4, Workers: 2},
	}
	d := startDaemon(t, cfg, nil)
	ctx := t.Context()
	counts := newCounts()
	attacker := newClient(d.addr, "attacker", counts)
	victim := newClient(d.addr, "victim", counts)
	defer attacker.close()
	defer victim.close()
	waitDone := func(c *client, urls []string) string {
		t.Helper()
		id, _ := c.finish(t, ctx, urls)
		return id
	}
	big := make([]string, 16) // 16 × 256 KiB: under the 8 MiB of one ?results=1 answer
	for i := range big {
		big[i] = up.url(fmt.Sprintf("fbig-%d", i))
	}
	bigJob := waitDone(attacker, big)
	smallJob := waitDone(victim, []string{up.url("f-victim-0"), up.url("f-victim-1")})
	for range 20 { // warm up, then the baseline
		victim.status(ctx, smallJob, "")
		attacker.discard(ctx, "/v1/batch/"+bigJob+"?results=1")
	}
	rss0, _, err := d.memory()
	if err != nil {
		t.Fatal(err)
	}

	attackCtx, stopAttacks := context.WithTimeout(ctx, 8*time.Second)
	defer stopAttacks()
	var victimLat []time.Duration
	var victimErrs atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for attackCtx.Err() == nil {
			t0 := time.Now()
			_, a, err := victim.status(ctx, smallJob, "")
			if err != nil || a.code != http.StatusOK {
				victimErrs.Add(1)
				continue
			}
			victimLat = append(victimLat, time.Since(t0))
			time.Sleep(5 * time.Millisecond)
		}
	})
	var mu sync.Mutex
	answers := map[string]map[string]int{} // attack → answer → count
	note := func(attack, answer string) {
		mu.Lock()
		if answers[attack] == nil {
			answers[attack] = map[string]int{}
		}
		answers[attack][answer]++
		mu.Unlock()
	}
	stall := "POST /v1/batch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{\"targets\":["
	for range 200 {
		wg.Go(func() {
			for attackCtx.Err() == nil {
				line, closed := rawAttack(d.addr, stall, 5*time.Second)
				note("stalled body, no key", fmt.Sprintf("%s, closed=%v", line, closed))
			}
		})
	}
	headers := "GET /v1/batch HTTP/1.1\r\nHost: x\r\nX-Pad: " + strings.Repeat("a", 64<<10) + "\r\n\r\n"
	for range 100 {
		wg.Go(func() {
			for attackCtx.Err() == nil {
				line, _ := rawAttack(d.addr, headers, 5*time.Second)
				note("64 KiB of headers", line)
			}
		})
	}
	for range 40 {
		wg.Go(func() {
			c := newClient(d.addr, "attacker", counts)
			defer c.close()
			for attackCtx.Err() == nil {
				a, err := c.discard(attackCtx, "/v1/batch/"+bigJob+"?results=1")
				if attackCtx.Err() != nil {
					return
				}
				if err != nil {
					note("?results=1 of 4 MiB", "error")
					continue
				}
				note("?results=1 of 4 MiB", fmt.Sprintf("%d retry-after=%q", a.code, a.retryAfter))
			}
		})
	}
	wg.Wait()
	_, peak, err := d.memory()
	if err != nil {
		t.Fatal(err)
	}
	counts.check(t)
	for attack, byAnswer := range answers {
		for answer, n := range byAnswer {
			t.Logf("%-22s %6d × %s", attack, n, answer)
		}
	}
	// A raw attack's connection may also be closed with no answer: with
	// every slot taken, the server reclaims the connection idle longest,
	// and one that has not finished its request within the header timeout
	// counts as idle.
	want := map[string][]string{
		"stalled body, no key": {"HTTP/1.1 401 Unauthorized, closed=true", ", closed=true"},
		"64 KiB of headers":    {"HTTP/1.1 431 Request Header Fields Too Large", ""},
		"?results=1 of 4 MiB":  {`200 retry-after=""`, `429 retry-after="1"`},
	}
	for attack, ok := range want {
		if len(answers[attack]) == 0 {
			t.Errorf("%s: no answers", attack)
		}
		for answer, n := range answers[attack] {
			if !slices.Contains(ok, answer) {
				t.Errorf("%s: %d × %q, want only %q", attack, n, answer, ok)
			}
		}
	}
	slices.Sort(victimLat)
	if len(victimLat) < 20 {
		t.Fatalf("the victim got %d answers in 8s (%d errors)", len(victimLat), victimErrs.Load())
	}
	p50, p99, worst := victimLat[len(victimLat)/2], victimLat[len(victimLat)*99/100], victimLat[len(victimLat)-1]
	if victimErrs.Load() > 0 || p99 > time.Second {
		t.Errorf("the victim's polls: %d errors, p99 %s: the attacks starved it", victimErrs.Load(), p99)
	}
	// Four ?results=1 answers at a time, each holding one result; 200
	// stalled connections hold no body. The bound leaves room for the
	// race detector's shadow memory.
	if grew := peak - rss0; grew > 128<<20 {
		t.Errorf("the daemon's peak RSS grew by %d MiB over %d MiB", grew>>20, rss0>>20)
	}
	t.Logf("victim: %d polls, p50 %s, p99 %s, max %s; daemon RSS %d MiB before, peak %d MiB",
		len(victimLat), p50.Round(time.Microsecond), p99.Round(time.Microsecond), worst.Round(time.Microsecond), rss0>>20, peak>>20)
	if err := d.stop(); err != nil {
		t.Errorf("graceful stop: %v", err)
	}
}
