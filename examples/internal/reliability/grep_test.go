package reliability

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batchhttp"
)

// grepPattern is n alternatives of [a-z<rune>]{1000}X, the pattern of
// the review: about 1000 program instructions each.
func grepPattern(n int) string {
	alts := make([]string, n)
	for i := range alts {
		alts[i] = fmt.Sprintf("[a-z%c]{1000}X", rune(0x100+i))
	}
	return strings.Join(alts, "|")
}

// heaviestGrep is the costliest pattern the example fetcher takes: 1000
// instructions, none of which fails early on lower-case text.
const heaviestGrep = "[a-z]{997}X"

// one caller's grep patterns cannot stop everyone's
// fetching. The patterns of the issue (16 KB and 1.6 KB, hours of CPU on a
// 2 MiB page) are refused at submit with 422 invalid_option; three targets
// with the costliest pattern the limits allow, on a 2 MiB page of one line
// (some 15s of CPU each, far more under -race), take both workers and the
// queue ahead of the victim, and each ends at its 3s deadline as a timeout;
// the victim's one-target job, submitted behind them, finishes within 15s.
func TestGrepIsolation(t *testing.T) {
	t.Parallel()
	page := strings.Repeat("abcdefghij", (2<<20)/10) // 2 MiB, one line
	mux := http.NewServeMux()
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, page)
	})
	mux.HandleFunc("/small", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "the victim's page\n")
	})
	up := httptest.NewServer(mux)
	defer up.Close()
	const deadline = 3 * time.Second
	cfg := childConfig{
		DB: t.TempDir() + "/grep.db", Allow: []string{strings.TrimPrefix(up.URL, "http://")},
		Callers: []string{"attacker", "victim"},
		Batch:   batch.Config{TargetTimeout: batch.Duration(deadline), Workers: 2, JobsPerCaller: 3},
	}
	logs := &logSink{}
	d := startDaemon(t, cfg, logs)
	defer func() {
		if !t.Failed() {
			return
		}
		for _, l := range logs.all() { // the drain's story, for the failure
			if strings.Contains(l, `"msg":"batch target`) || strings.Contains(l, `"msg":"batch job`) || strings.Contains(l, "overran") {
				t.Log(l)
			}
		}
	}()
	ctx := t.Context()
	counts := newCounts()
	attacker := newClient(d.addr, "attacker", counts)
	victim := newClient(d.addr, "victim", counts)
	defer attacker.close()
	defer victim.close()
	submit := func(c *client, url, grep string) (batchhttp.SubmitResponse, answer) {
		t.Helper()
		body, _ := json.Marshal(batchhttp.SubmitRequest{Targets: []batch.Target{{URL: url, Options: batchsift.Fields{Grep: grep}.JSON()}}})
		a, err := c.do(ctx, http.MethodPost, "/v1/batch", body)
		if err != nil {
			t.Fatalf("submit: %v", err)
		}
		var sr batchhttp.SubmitResponse
		if a.code == http.StatusAccepted {
			json.Unmarshal(a.body, &sr)
		}
		return sr, a
	}

	// Over the limits: refused at submit, no job made.
	for _, p := range []string{grepPattern(1000), grepPattern(100), grepPattern(2)} {
		_, a := submit(attacker, up.URL+"/big", p)
		var e batchhttp.ErrorResponse
		json.Unmarshal(a.body, &e)
		if a.code != http.StatusUnprocessableEntity || e.Code != batchhttp.CodeInvalidOption {
			t.Fatalf("submit of a %d-byte pattern: %d %s, want 422 %s", len(p), a.code, a.body, batchhttp.CodeInvalidOption)
		}
		t.Logf("a %5d-byte pattern: 422 %s %q", len(p), e.Code, e.Error)
	}

	// Within the limits, but as costly as they allow: three jobs, two in
	// flight (both workers) and one queued ahead of the victim.
	var attacks []string
	for i := range 3 {
		sr, a := submit(attacker, fmt.Sprintf("%s/big?copy=%d", up.URL, i), heaviestGrep)
		if a.code != http.StatusAccepted || sr.Reused {
			t.Fatalf("attacker's submit: %d %s, want a new job", a.code, a.body)
		}
		attacks = append(attacks, sr.JobID)
	}
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		running := 0
		for _, id := range attacks[:2] {
			if st, _, err := attacker.status(ctx, id, ""); err == nil && st.Status == batch.JobRunning {
				running++
			}
		}
		if running == 2 {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatal("the attacker's first two jobs did not start within 30s")
		}
	}
	inFlight := time.Now()
	sr, a := submit(victim, up.URL+"/small", "victim")
	if a.code != http.StatusAccepted {
		t.Fatalf("victim's submit: %d %s", a.code, a.body)
	}
	var st batchhttp.StatusResponse
	for {
		var err error
		if st, a, err = victim.status(ctx, sr.JobID, "?wait=1s"); err != nil || a.code != http.StatusOK {
			t.Fatalf("victim's status: %v %d %s", err, a.code, a.body)
		}
		if st.Status.Finished() || time.Since(inFlight) > 15*time.Second {
			break
		}
	}
	took := time.Since(inFlight)
	if st.Status != batch.JobDone {
		t.Fatalf("the victim's job is %s %s after it was submitted behind three costly greps, want done within 15s", st.Status, took.Round(time.Millisecond))
	}

	// The attacker's targets each ended at their deadline, as timeouts.
	var ends []string
	for _, id := range attacks {
		var ast batchhttp.StatusResponse
		for start := time.Now(); ; {
			var err error
			if ast, a, err = attacker.status(ctx, id, "?wait=10s"); err != nil || a.code != http.StatusOK {
				t.Fatalf("attacker's status: %v %d %s", err, a.code, a.body)
			}
			if ast.Status.Finished() {
				break
			}
			if time.Since(start) > time.Minute {
				t.Fatalf("attacker's job %s did not finish within a minute", id)
			}
		}
		tg := ast.Targets[0]
		if tg.Status != batch.TargetFailed || tg.Outcome != batch.OutcomeTimeout {
			t.Errorf("attacker's target: %s %s %q, want failed with outcome timeout", tg.Status, tg.Outcome, tg.Error)
		}
		ends = append(ends, fmt.Sprintf("%s %q", tg.Outcome, tg.Error))
	}
	overruns := scrapeCounter(t, d.addr, "batch_fetch_overruns_total")
	t.Logf("victim's one-target job done %s after it was submitted behind 3 greps of %d instructions on a 2 MiB line "+
		"(2 workers, target deadline %s); attacker's targets: %s; batch_fetch_overruns_total %s",
		took.Round(time.Millisecond), 1000, deadline, strings.Join(ends, ", "), overruns)
	counts.check(t)
	if err := d.stop(); err != nil {
		t.Errorf("graceful stop: %v", err)
	}
}

// scrapeCounter reads one sample of the daemon's /metrics, "?" if absent.
func scrapeCounter(t *testing.T, addr, name string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return "?"
	}
	return string(m[1])
}
