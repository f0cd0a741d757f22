package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
)

// 50 concurrent clients (10 callers) submit, resubmit the same lists at
// once, long-poll, read results one by one and all at once, list and
// cancel, for 15s (60s in the long form), against the daemon in this
// process: no 5xx, no storage text in any answer, only the planned 429s
// and each with Retry-After, identical lists make one job, and every job
// acknowledged finishes and reads back.
func TestManyClients(t *testing.T) {
	t.Parallel()
	run := 15 * time.Second
	if long() {
		run = 60 * time.Second
	}
	up := newUpstream(t, 2*time.Millisecond)
	callers := make([]string, 10)
	for i := range callers {
		callers[i] = fmt.Sprintf("mc%d", i)
	}
	cfg := childConfig{
		DB: filepath.Join(t.TempDir(), "clients.db"), Allow: []string{up.addr()}, Callers: callers,
		// The one upstream stands for many hosts: no per-host cap.
		Batch: batch.Config{JobsPerCaller: 3, JobsTotal: 16, Workers: 4, FetchesPerHost: -1, TTL: batch.Duration(time.Hour)},
	}
	logs := &logSink{}
	_, addr, _ := serveStoppable(t, cfg, logs)
	counts := newCounts()
	ledger := newLedger()
	var reuseMu sync.Mutex
	reuse := map[string][]string{} // list name → the job ids its submits got
	ctx, stop := context.WithTimeout(t.Context(), run)
	defer stop()
	var wg sync.WaitGroup
	var ops [6]int64
	var opsMu sync.Mutex
	for i := range 50 {
		caller := callers[i%len(callers)]
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 9))
			c := newClient(addr, caller, counts)
			defer c.close()
			var mine [6]int64
			for ctx.Err() == nil {
				op := rng.IntN(len(mine))
				mine[op]++
				switch op {
				case 0: // a fresh list
					urls := []string{up.url(fmt.Sprintf("f%d", ledger.nextURL.Add(1))), up.url(fmt.Sprintf("f%d", ledger.nextURL.Add(1)))}
					if sr, a, err := c.submit(ctx, urls); err == nil && a.code == http.StatusAccepted {
						ledger.ack(ackedJob{id: sr.JobID, caller: caller, urls: urls})
					}
				case 1: // the list the caller's other clients submit at this moment too
					name := fmt.Sprintf("s-%s-%d", caller, time.Now().UnixMilli()/500)
					urls := []string{up.url(name + "-a"), up.url(name + "-b")}
					if sr, a, err := c.submit(ctx, urls); err == nil && a.code == http.StatusAccepted {
						ledger.ack(ackedJob{id: sr.JobID, caller: caller, urls: urls})
						reuseMu.Lock()
						reuse[name] = append(reuse[name], sr.JobID)
						reuseMu.Unlock()
					}
				case 2: // long-poll a job until it moves
					if id, ok := ledger.pick(rng, caller); ok {
						st, a, err := c.status(ctx, id, "")
						if err == nil && a.code == http.StatusOK && !st.Status.Finished() {
							c.status(ctx, id, fmt.Sprintf("?wait=2s&since=%d", st.TargetsDone))
						}
					}
				case 3: // the summary, and each result it shows done
					if id, ok := ledger.pick(rng, caller); ok {
						(&workload{ledger: ledger, up: up}).follow(ctx, c, id)
					}
				case 4: // all results at once, or the list
					if id, ok := ledger.pick(rng, caller); ok && rng.IntN(2) == 0 {
						c.status(ctx, id, "?results=1")
					} else {
						c.do(ctx, http.MethodGet, "/v1/batch", nil)
					}
				case 5: // cancel, now and then
					if id, ok := ledger.pick(rng, caller); ok && rng.IntN(4) == 0 {
						c.do(ctx, http.MethodDelete, "/v1/batch/"+id, nil)
					}
				}
			}
			opsMu.Lock()
			for k, n := range mine {
				ops[k] += n
			}
			opsMu.Unlock()
		})
	}
	wg.Wait()
	// What was acknowledged finishes and reads back, and nothing was
	// fetched twice.
	w := &workload{ledger: ledger, up: up, counts: counts}
	w.verify(t, addr, 0, true, time.Minute)
	// Identical lists of one caller make one job: a submit reuses the job
	// of the same list (within the TTL) unless that job was cancelled or
	// failed. So of the jobs one list got, at most one ended otherwise.
	reused := 0
	for name, ids := range reuse {
		distinct := slices.Compact(slices.Sorted(slices.Values(ids)))
		reused += len(ids) - len(distinct)
		caller := strings.Split(name, "-")[1]
		c := newClient(addr, caller, counts)
		kept := 0
		for _, id := range distinct {
			st, a, err := c.status(t.Context(), id, "")
			if err != nil || a.code != http.StatusOK {
				t.Fatalf("job %s of list %s: %v %d", id, name, err, a.code)
			}
			if st.Status != batch.JobCancelled && st.Status != batch.JobFailed {
				kept++
			}
		}
		if kept > 1 {
			t.Errorf("list %s made %d jobs that were neither cancelled nor failed: a submit did not reuse one", name, kept)
		}
		c.close()
	}
	counts.check(t)
	checkLogs(t, logs, up)
	jobs, results := ledger.counts()
	t.Logf("%s, 50 clients: ops (fresh, same, long-poll, read, all/list, cancel) %v; %d jobs, %d results seen, %d submits reused a job; %s",
		run, ops, jobs, results, reused, counts)
	if jobs == 0 || results == 0 || reused == 0 {
		t.Fatal("the clients got nothing done: the test tested nothing")
	}
}
