package reliability

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/examples/internal/testbin"
)

// politeHost is an upstream that counts the requests it serves at once
// and logs when each arrived. Its pages answer after pause; a handler
// given to it may answer first.
type politeHost struct {
	srv   *httptest.Server
	pause time.Duration
	// answer, if set, may write the answer to a page request instead
	// (true: it did).
	answer func(w http.ResponseWriter, r *http.Request) bool
	// robots is the body of /robots.txt; "" answers 404.
	robots string

	mu       sync.Mutex
	inflight int
	peak     int
	arrivals []arrival
}

type arrival struct {
	at   time.Time
	path string
}

func newPoliteHost(t *testing.T, pause time.Duration) *politeHost {
	h := &politeHost{pause: pause}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *politeHost) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/robots.txt" {
		if h.robots == "" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, h.robots)
		return
	}
	h.mu.Lock()
	h.inflight++
	h.peak = max(h.peak, h.inflight)
	h.arrivals = append(h.arrivals, arrival{time.Now(), r.URL.Path})
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.inflight--
		h.mu.Unlock()
	}()
	if h.answer != nil && h.answer(w, r) {
		return
	}
	time.Sleep(h.pause)
	fmt.Fprintf(w, "<html><body><p>page %s</p></body></html>", r.URL.Path)
}

func (h *politeHost) addr() string { return strings.TrimPrefix(h.srv.URL, "http://") }

func (h *politeHost) stats() (peak int, arrivals []arrival) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.peak, append([]arrival(nil), h.arrivals...)
}

// politeCluster starts n batchd on one PostgreSQL schema with args, the
// upstreams allowed, and returns their addresses. Callers polite0… have
// keys on every node.
func politeCluster(t *testing.T, n int, callers int, allow []string, args ...string) []string {
	t.Helper()
	url, schema := pgSchema(t)
	bin := testbin.BuildPackage(t, "batchd", "../../batchd", false)
	keys := make([]string, callers)
	for i := range keys {
		keys[i] = fmt.Sprintf("polite%d=%s", i, keyOf(fmt.Sprintf("polite%d", i)))
	}
	env := []string{"BATCHD_KEYS=" + strings.Join(keys, ",")}
	gen := filepath.Join(t.TempDir(), "generated.env")
	var addrs []string
	for i := range n { // one after the other: the first creates the schema
		a := []string{"-addr", "127.0.0.1:0", "-db", url, "-pg-schema", schema, "-runner-id", "p" + strconv.Itoa(i),
			"-mcp=false", "-generated-file", gen, "-poll-interval", "50ms", "-log-level", "warn"}
		for _, h := range allow {
			a = append(a, "-allow", h)
		}
		addrs = append(addrs, runBatchd(t, bin, env, append(a, args...)...).addr)
	}
	return addrs
}

// submitRound submits jobs round-robin over the nodes, job j by caller
// j%callers, and waits for every one to finish; it returns their final
// statuses.
func submitRound(t *testing.T, ctx context.Context, addrs []string, callers int, jobs [][]string) []batchhttp.StatusResponse {
	t.Helper()
	cs := newClients(newCounts())
	defer cs.close()
	out := make([]batchhttp.StatusResponse, len(jobs))
	ids := make([]string, len(jobs))
	for j, urls := range jobs {
		c := cs.get(addrs[j%len(addrs)], fmt.Sprintf("polite%d", j%callers))
		sr, a, err := c.submit(ctx, urls)
		if err != nil || a.code != http.StatusAccepted {
			t.Fatalf("submit %d: %v %d %s", j, err, a.code, a.errorText())
		}
		ids[j] = sr.JobID
	}
	for j := range jobs {
		c := cs.get(addrs[(j+1)%len(addrs)], fmt.Sprintf("polite%d", j%callers)) // read on another node
		for deadline := time.Now().Add(2 * time.Minute); ; {
			st, a, err := c.status(ctx, ids[j], "?wait=10s")
			if err != nil || a.code != http.StatusOK {
				t.Fatalf("status %d: %v %d", j, err, a.code)
			}
			if st.Status.Finished() {
				out[j] = st
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %d not finished in 2m: %+v", j, st)
			}
		}
	}
	return out
}

// Three batchd on one PostgreSQL database, -fetches-per-host 2, eight
// jobs submitted to each, every target on one local host: the host never
// serves more than two requests at once, and every job ends done.
func TestPolite_HostCapAcrossNodes(t *testing.T) {
	t.Parallel()
	up := newPoliteHost(t, 40*time.Millisecond)
	addrs := politeCluster(t, 3, 8, []string{up.addr()}, "-workers", "4", "-fetches-per-host", "2",
		"-jobs-per-caller", "3", "-jobs-total", "24")
	var jobs [][]string
	for j := range 24 {
		var urls []string
		for i := range 3 {
			urls = append(urls, fmt.Sprintf("%s/p/%d/%d", up.srv.URL, j, i))
		}
		jobs = append(jobs, urls)
	}
	for j, st := range submitRound(t, t.Context(), addrs, 8, jobs) {
		if st.Status != batch.JobDone {
			t.Errorf("job %d: %s, want done", j, st.Status)
		}
	}
	peak, arrivals := up.stats()
	t.Logf("3 nodes × 4 workers, 24 jobs × 3 targets on one host: %d requests, at most %d at once", len(arrivals), peak)
	if peak > 2 || len(arrivals) != 72 {
		t.Fatalf("the host served %d requests, at most %d at once; want 72, at most 2", len(arrivals), peak)
	}
}

// Three batchd on one PostgreSQL database; the upstream answers its first
// request 429 with Retry-After: 3. No request reaches it, from any node,
// for 3s after that answer, and then every job ends done: no target
// failed. One fetch to the host at a time (-fetches-per-host 1): with
// more, a fetch that another node began before the 429 was answered
// arrives after it, which no gate can prevent.
func TestPolite_RetryAfterAcrossNodes(t *testing.T) {
	t.Parallel()
	const wait = 3 * time.Second
	up := newPoliteHost(t, 10*time.Millisecond)
	var once sync.Once
	var answered time.Time
	up.answer = func(w http.ResponseWriter, _ *http.Request) (done bool) {
		once.Do(func() {
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusTooManyRequests)
			answered, done = time.Now(), true
		})
		return done
	}
	addrs := politeCluster(t, 3, 6, []string{up.addr()}, "-workers", "2", "-fetches-per-host", "1",
		"-jobs-per-caller", "2", "-jobs-total", "12")
	var jobs [][]string
	for j := range 6 {
		jobs = append(jobs, []string{fmt.Sprintf("%s/r/%d/0", up.srv.URL, j), fmt.Sprintf("%s/r/%d/1", up.srv.URL, j)})
	}
	for j, st := range submitRound(t, t.Context(), addrs, 6, jobs) {
		if st.Status != batch.JobDone {
			t.Errorf("job %d: %s, want done (%+v)", j, st.Status, st.Targets)
		}
	}
	_, arrivals := up.stats()
	var after []time.Duration
	for _, a := range arrivals {
		if d := a.at.Sub(answered); d > 0 {
			after = append(after, d)
		}
	}
	if len(arrivals) != 13 || len(after) == 0 {
		t.Fatalf("%d requests (%d after the 429), want 13: 12 targets, one twice", len(arrivals), len(after))
	}
	t.Logf("first request after the 429 arrived %s after it (Retry-After: 3); %d requests in all", after[0], len(arrivals))
	for _, d := range after {
		if d < wait {
			t.Errorf("a request arrived %s after the 429 with Retry-After: 3", d)
		}
	}
}
