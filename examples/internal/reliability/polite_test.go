package reliability

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/batchstore/pgstore/pgstoretest"
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

func newPoliteHost(t testing.TB, pause time.Duration) *politeHost {
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
func politeCluster(t testing.TB, n int, callers int, allow []string, args ...string) []string {
	t.Helper()
	addrs, _, _ := politeNodes(t, n, callers, allow, args...)
	return addrs
}

// politeNodes is politeCluster that also returns the nodes and the
// database's URL and schema.
func politeNodes(t testing.TB, n int, callers int, allow []string, args ...string) ([]string, []*batchd, [2]string) {
	t.Helper()
	url, schema := pgstoretest.Schema(t, "rel")
	bin := testbin.BuildPackage(t, "batchd", "../../batchd", false)
	keys := make([]string, callers)
	for i := range keys {
		keys[i] = fmt.Sprintf("polite%d=%s", i, keyOf(fmt.Sprintf("polite%d", i)))
	}
	env := []string{"BATCHD_KEYS=" + strings.Join(keys, ",")}
	gen := filepath.Join(t.TempDir(), "generated.env")
	var addrs []string
	var nodes []*batchd
	for i := range n { // one after the other: the first creates the schema
		a := []string{"-addr", "127.0.0.1:0", "-db", url, "-pg-schema", schema, "-runner-id", "p" + strconv.Itoa(i),
			"-mcp=false", "-generated-file", gen, "-poll-interval", "50ms", "-log-level", "warn"}
		for _, h := range allow {
			a = append(a, "-allow", h)
		}
		d := runBatchd(t, bin, env, append(a, args...)...)
		addrs, nodes = append(addrs, d.addr), append(nodes, d)
	}
	return addrs, nodes, [2]string{url, schema}
}

// submitRound submits jobs round-robin over the nodes, job j by caller
// j%callers, and waits for every one to finish; it returns their final
// statuses.
func submitRound(t testing.TB, ctx context.Context, addrs []string, callers int, jobs [][]string) []batchhttp.StatusResponse {
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

// One batchd (SQLite) with its default -robots; the upstream's robots.txt
// disallows /private and asks for a Crawl-delay of 1. The disallowed
// target ends robots and its path is never requested; the other three
// are fetched at least a second apart, by the upstream's log.
func TestPolite_Robots(t *testing.T) {
	t.Parallel()
	up := newPoliteHost(t, 0)
	up.robots = "User-agent: *\nDisallow: /private\nCrawl-delay: 1\n"
	bin := testbin.BuildPackage(t, "batchd", "../../batchd", false)
	d := runBatchd(t, bin, []string{"BATCHD_KEYS=polite0=" + keyOf("polite0")}, "-addr", "127.0.0.1:0",
		"-db", filepath.Join(t.TempDir(), "b.db"), "-allow", up.addr(), "-mcp=false",
		"-generated-file", filepath.Join(t.TempDir(), "gen.env"))
	urls := []string{up.srv.URL + "/a", up.srv.URL + "/private/x", up.srv.URL + "/b", up.srv.URL + "/c"}
	st := submitRound(t, t.Context(), []string{d.addr}, 1, [][]string{urls})[0]
	if st.Status != batch.JobPartial || len(st.Targets) != 4 {
		t.Fatalf("job %s, %d targets; want partial, 4", st.Status, len(st.Targets))
	}
	for i, tg := range st.Targets {
		want := batch.OutcomeOK
		if i == 1 {
			want = batch.OutcomeRobots
		}
		if tg.Outcome != want {
			t.Errorf("target %d: outcome %s (%s), want %s", i, tg.Outcome, tg.Error, want)
		}
	}
	if h := st.Targets[1].Hint; h == "" {
		t.Error("the robots target has no hint")
	}
	_, arrivals := up.stats()
	if len(arrivals) != 3 {
		t.Fatalf("%d page requests, want 3: %+v", len(arrivals), arrivals)
	}
	for i, a := range arrivals {
		if strings.HasPrefix(a.path, "/private") {
			t.Errorf("the disallowed path was requested")
		}
		if i > 0 {
			gap := a.at.Sub(arrivals[i-1].at)
			t.Logf("request %d arrived %s after the one before (Crawl-delay: 1)", i, gap.Round(time.Millisecond))
			if gap < time.Second {
				t.Errorf("request %d arrived %s after the one before, want at least 1s", i, gap)
			}
		}
	}
}

// Two batchd on one PostgreSQL database, logging at debug, fetch from an
// upstream named by a host name (localhost) and a port, under paths
// with a marker: a page, one its robots.txt disallows, one answered 429
// with Retry-After, one on an interval. Neither the host name, nor the
// port, nor a path shows in any log line, in /metrics, or in the host
// gate's rows in the database.
func TestPolite_NoHostInLogsMetricsOrRows(t *testing.T) {
	t.Parallel()
	up := newPoliteHost(t, 5*time.Millisecond)
	up.robots = "User-agent: *\nDisallow: /mk-private\n"
	var once sync.Once
	up.answer = func(w http.ResponseWriter, r *http.Request) (done bool) {
		if strings.HasPrefix(r.URL.Path, "/mk-busy") {
			once.Do(func() {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusTooManyRequests)
				done = true
			})
		}
		return done
	}
	_, port, _ := strings.Cut(up.addr(), ":")
	host := "localhost:" + port
	addrs, nodes, db := politeNodes(t, 2, 2, []string{host, up.addr()}, "-log-level", "debug", "-host-interval", "20ms", "-fetches-per-host", "1", "-jobs-per-caller", "2", "-jobs-total", "8")
	base := "http://" + host
	var jobs [][]string
	for j := range 4 {
		jobs = append(jobs, []string{base + "/mk-page/" + strconv.Itoa(j), base + "/mk-private/" + strconv.Itoa(j), base + "/mk-busy/" + strconv.Itoa(j)})
	}
	sts := submitRound(t, t.Context(), addrs, 2, jobs)
	var refused, done int
	for _, st := range sts {
		for _, tg := range st.Targets {
			switch tg.Outcome {
			case batch.OutcomeRobots:
				refused++
			case batch.OutcomeOK:
				done++
			}
		}
	}
	if refused != 4 || done != 8 {
		t.Fatalf("%d targets refused by robots.txt and %d done, want 4 and 8: %+v", refused, done, sts[0].Targets)
	}
	markers := []string{"localhost", port, "/mk-", "mk-page", "mk-private", "mk-busy"}
	check := func(where, text string) {
		t.Helper()
		for _, m := range markers {
			if i := strings.Index(text, m); i >= 0 {
				t.Errorf("%s holds %q: …%s…", where, m, text[max(i-80, 0):min(i+80, len(text))])
			}
		}
	}
	var all strings.Builder // either node may have drained every job
	for _, d := range nodes {
		all.WriteString(d.stderr.String())
	}
	if !strings.Contains(all.String(), "batch target finished") {
		t.Fatalf("no node logged a target at debug level:\n%s", all.String())
	}
	for i, d := range nodes {
		// The port the daemon listens on and its -allow hint are its own;
		// the upstream's port is only in its arguments.
		check(fmt.Sprintf("node %d's log", i), d.stderr.String())
		resp, err := http.Get("http://" + d.addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), "_host_waits_total") {
			t.Fatalf("node %d's /metrics has no host gate metrics", i)
		}
		check(fmt.Sprintf("node %d's /metrics", i), string(body))
	}
	conn, err := pgx.Connect(t.Context(), db[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, table := range []string{"host", "host_slot"} {
		rows, err := conn.Query(t.Context(), "SELECT row_to_json(x)::text FROM "+pgx.Identifier{db[1], table}.Sanitize()+" x")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			var row string
			if err := rows.Scan(&row); err != nil {
				t.Fatal(err)
			}
			n++
			check("table "+table, row)
		}
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
		t.Logf("table %s: %d rows, none with the host", table, n)
	}
}

// BenchmarkPolite_24Hosts measures what the host gate costs where it does
// not bind: two clusters of three batchd on PostgreSQL, one with the
// gate (-fetches-per-host 2) and one without (-1), each drain 24 jobs of
// 12 targets, job j's on host j of 24, with 8 workers a node (24 fetch
// slots) and pages of 50ms. Each round loads one cluster, then the other
// (in turn first), and reports the drain rates and their ratio, gate on
// over off; the ratio metric is the median of the rounds'.
func BenchmarkPolite_24Hosts(b *testing.B) {
	const hosts, targets = 24, 12
	var ups []*politeHost
	var allow []string
	for range hosts {
		up := newPoliteHost(b, 50*time.Millisecond)
		ups, allow = append(ups, up), append(allow, up.addr())
	}
	args := []string{"-workers", "8", "-jobs-per-caller", "1", "-jobs-total", "24", "-robots=false"}
	on := politeCluster(b, 3, hosts, allow, append(args, "-fetches-per-host", "2")...)
	off := politeCluster(b, 3, hosts, allow, append(args, "-fetches-per-host", "-1")...)
	round := 0
	drain := func(addrs []string) float64 {
		var jobs [][]string
		for j := range hosts {
			var urls []string
			for i := range targets {
				urls = append(urls, fmt.Sprintf("%s/b/%d/%d/%d", ups[j].srv.URL, round, j, i))
			}
			jobs = append(jobs, urls)
		}
		start := time.Now()
		for j, st := range submitRound(b, b.Context(), addrs, hosts, jobs) {
			if st.Status != batch.JobDone {
				b.Fatalf("job %d: %s", j, st.Status)
			}
		}
		return float64(hosts*targets) / time.Since(start).Seconds()
	}
	var ratios []float64
	for b.Loop() {
		round++
		var rOn, rOff float64
		if round%2 == 1 {
			rOn, rOff = drain(on), drain(off)
		} else {
			rOff, rOn = drain(off), drain(on)
		}
		ratios = append(ratios, rOn/rOff)
		b.Logf("round %d: gate on %.1f targets/s, off %.1f targets/s, ratio %.3f", round, rOn, rOff, rOn/rOff)
	}
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "on/off")
}
