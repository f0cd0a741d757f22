package reliability

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
)

// ledger is what the clients of a run were told: every acknowledged submit
// and every result they saw done. Nothing in it may be lost.
type ledger struct {
	mu       sync.Mutex
	jobs     map[string]ackedJob    // by job id
	byCaller map[string][]string    // job ids, in submit order
	seen     map[resultKey][32]byte // sha256 of the result as first read
	live     map[string]bool        // job ids not yet seen finished
	mismatch []string               // results that came back different
	nextURL  atomic.Int64
}

type ackedJob struct {
	id, caller string
	urls       []string
}

type resultKey struct {
	job string
	idx int
}

func newLedger() *ledger {
	return &ledger{jobs: map[string]ackedJob{}, byCaller: map[string][]string{}, seen: map[resultKey][32]byte{}, live: map[string]bool{}}
}

func (l *ledger) ack(j ackedJob) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.jobs[j.id]; ok {
		return // a reused job
	}
	l.jobs[j.id] = j
	l.byCaller[j.caller] = append(l.byCaller[j.caller], j.id)
	l.live[j.id] = true
}

// pick returns a random acknowledged job of caller, preferring live ones.
func (l *ledger) pick(rng *rand.Rand, caller string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := l.byCaller[caller]
	if len(ids) == 0 {
		return "", false
	}
	for range 4 {
		if id := ids[rng.IntN(len(ids))]; l.live[id] {
			return id, true
		}
	}
	return ids[rng.IntN(len(ids))], true
}

// finished notes a job seen finished.
func (l *ledger) finished(id string) {
	l.mu.Lock()
	delete(l.live, id)
	l.mu.Unlock()
}

// saw records a result read as done, or checks it against the first read.
func (l *ledger) saw(k resultKey, result []byte) {
	sum := sha256.Sum256(result)
	l.mu.Lock()
	defer l.mu.Unlock()
	if first, ok := l.seen[k]; !ok {
		l.seen[k] = sum
	} else if first != sum && len(l.mismatch) < 20 {
		l.mismatch = append(l.mismatch, fmt.Sprintf("job %s target %d: the result changed", k.job, k.idx))
	}
}

// seenResult reports whether k was read as done.
func (l *ledger) seenResult(k resultKey) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.seen[k]
	return ok
}

// counts returns how many jobs were acknowledged and results seen.
func (l *ledger) counts() (jobs, results int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.jobs), len(l.seen)
}

// snapshot returns the acknowledged jobs and the results seen.
func (l *ledger) snapshot() ([]ackedJob, []resultKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	jobs := make([]ackedJob, 0, len(l.jobs))
	for _, j := range l.jobs {
		jobs = append(jobs, j)
	}
	results := make([]resultKey, 0, len(l.seen))
	for k := range l.seen {
		results = append(results, k)
	}
	return jobs, results
}

// workload is the clients of a kill test: each caller submits fresh lists
// of new pages, follows its jobs, reads each result it sees done and now
// and then cancels a job, spreading its requests over the nodes.
type workload struct {
	ledger  *ledger
	up      *upstream
	counts  *answerCounts
	cancels bool
}

// run drives one caller until ctx is done, on the nodes whose addresses
// nodes returns. Transport errors (a node killed under it) are expected;
// it moves on.
func (w *workload) run(ctx context.Context, caller string, seed uint64, nodes func() []string) {
	rng := rand.New(rand.NewPCG(seed, 7))
	cs := newClients(w.counts)
	defer cs.close()
	on := func() *client {
		addrs := nodes()
		return cs.get(addrs[rng.IntN(len(addrs))], caller)
	}
	for ctx.Err() == nil {
		switch k := rng.IntN(10); {
		case k < 3:
			n := 2 + rng.IntN(3)
			urls := make([]string, n)
			for i := range urls {
				urls[i] = w.up.url(fmt.Sprintf("f%d", w.ledger.nextURL.Add(1)))
			}
			sr, a, err := on().submit(ctx, urls)
			if err == nil && a.code == http.StatusAccepted {
				w.ledger.ack(ackedJob{id: sr.JobID, caller: caller, urls: urls})
			} else if err == nil && a.code == http.StatusTooManyRequests {
				sleep(ctx, 20*time.Millisecond)
			}
		case k < 9 || !w.cancels:
			id, ok := w.ledger.pick(rng, caller)
			if !ok {
				continue
			}
			w.follow(ctx, on(), id)
		default:
			if id, ok := w.ledger.pick(rng, caller); ok {
				on().do(ctx, http.MethodDelete, "/v1/batch/"+id, nil)
			}
		}
	}
}

// follow reads a job's summary and each result it shows done.
func (w *workload) follow(ctx context.Context, c *client, id string) {
	st, a, err := c.status(ctx, id, "")
	if err != nil || a.code != http.StatusOK {
		return
	}
	if st.Status.Finished() {
		w.ledger.finished(id)
	}
	for _, tg := range st.Targets {
		if tg.Status != batch.TargetDone {
			continue
		}
		rr, a, err := c.result(ctx, id, tg.Idx)
		if err == nil && a.code == http.StatusOK && rr.Status == batch.TargetDone {
			w.ledger.saw(resultKey{id, tg.Idx}, rr.Result)
		}
	}
}

// verify checks, on the node at addr, that every acknowledged job is there
// (all of them, or a sample of at most sample when sample > 0) and that
// every result seen done reads the same. With settle it first waits for
// each job to finish (up to wait), and checks that none stays live.
func (w *workload) verify(t *testing.T, addr string, sample int, settle bool, wait time.Duration) {
	t.Helper()
	jobs, results := w.ledger.snapshot()
	rng := rand.New(rand.NewPCG(uint64(len(jobs)), 3))
	if sample > 0 {
		rng.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
		rng.Shuffle(len(results), func(i, j int) { results[i], results[j] = results[j], results[i] })
		jobs, results = jobs[:min(sample, len(jobs))], results[:min(sample, len(results))]
	}
	ctx := t.Context()
	deadline := time.Now().Add(wait)
	cs := newClients(w.counts)
	defer cs.close()
	as := func(caller string) *client { return cs.get(addr, caller) }
	for _, j := range jobs {
		st, a, err := as(j.caller).status(ctx, j.id, "")
		for err == nil && a.code == http.StatusOK && settle && !st.Status.Finished() && time.Now().Before(deadline) {
			st, a, err = as(j.caller).status(ctx, j.id, "?wait=5s")
		}
		switch {
		case err != nil:
			t.Fatalf("read of job %s: %v", j.id, err)
		case a.code != http.StatusOK:
			t.Errorf("acknowledged job %s: %d %s", j.id, a.code, a.errorText())
		case settle && !st.Status.Finished():
			t.Errorf("job %s still %s %s after the run", j.id, st.Status, wait)
		case len(st.Targets) != len(j.urls):
			t.Errorf("job %s has %d targets, was submitted with %d", j.id, len(st.Targets), len(j.urls))
		}
		if settle && err == nil && a.code == http.StatusOK {
			for _, tg := range st.Targets {
				// A target that ends done after the run is read too: it
				// must hold what its page says.
				if tg.Status == batch.TargetDone && !w.ledger.seenResult(resultKey{j.id, tg.Idx}) {
					rr, a, err := as(j.caller).result(ctx, j.id, tg.Idx)
					if err == nil && a.code == http.StatusOK {
						w.ledger.saw(resultKey{j.id, tg.Idx}, rr.Result)
					}
				}
			}
		}
	}
	byJob := map[string]ackedJob{}
	for _, j := range jobs {
		byJob[j.id] = j
	}
	all, _ := w.ledger.snapshot()
	for _, j := range all {
		byJob[j.id] = j
	}
	for _, k := range results {
		j := byJob[k.job]
		rr, a, err := as(j.caller).result(ctx, k.job, k.idx)
		if err != nil {
			t.Fatalf("read of result %s/%d: %v", k.job, k.idx, err)
		}
		if a.code != http.StatusOK || rr.Status != batch.TargetDone {
			t.Errorf("result %s/%d, seen done, now reads %d %s", k.job, k.idx, a.code, rr.Status)
			continue
		}
		w.ledger.saw(k, rr.Result)
	}
	w.ledger.mu.Lock()
	for _, m := range w.ledger.mismatch {
		t.Error(m)
	}
	w.ledger.mu.Unlock()
	if settle {
		w.checkNoneLive(t, as)
	}
	if most, path := w.up.maxHits(); most > 1 {
		t.Errorf("%s fetched %d times, want at most once", path, most)
	}
}

// checkNoneLive lists each caller's newest jobs (those a restart or a
// reap would have to deal with) and fails on any still queued or running:
// that includes jobs whose submit answer a kill cut off.
func (w *workload) checkNoneLive(t *testing.T, as func(string) *client) {
	t.Helper()
	w.ledger.mu.Lock()
	callers := make([]string, 0, len(w.ledger.byCaller))
	for c := range w.ledger.byCaller {
		callers = append(callers, c)
	}
	w.ledger.mu.Unlock()
	slices.Sort(callers)
	for _, caller := range callers {
		a, err := as(caller).do(t.Context(), http.MethodGet, "/v1/batch?limit=100", nil)
		if err != nil || a.code != http.StatusOK {
			t.Fatalf("list of %s: %v %d", caller, err, a.code)
		}
		var list batchhttp.ListResponse
		if err := json.Unmarshal(a.body, &list); err != nil {
			t.Fatal(err)
		}
		for _, j := range list.Jobs {
			if !j.Status.Finished() {
				t.Errorf("job %s of %s left %s", j.JobID, caller, j.Status)
			}
		}
	}
}

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
