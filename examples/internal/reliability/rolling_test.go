package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/examples/internal/testbin"
)

// The timing of the rolling-restart test's nodes: short, so that a stale
// node is found within a second or two, and a close grace shorter than
// its slow pages, so that a SIGTERM interrupts some of them.
const (
	rollHeartbeat  = 200 * time.Millisecond
	rollStaleAfter = time.Second
	rollPoll       = 100 * time.Millisecond
	rollCloseGrace = 500 * time.Millisecond
	rollWorkers    = 3
	rollPage       = 60 * time.Millisecond   // a page's time
	rollSlowPage   = 1500 * time.Millisecond // a slow page's: longer than the grace
)

// Three built batchd, each with -resume, share one PostgreSQL database
// under load: 8 callers submit jobs of 3 to 6 targets round-robin to the
// nodes serving and follow each to its end on any node, against an
// upstream that logs every fetch. A rolling restart stops one node at a
// time with SIGTERM, waits for it to exit and starts it again, then the
// next; then one node, which the submits went to for a moment before, is
// killed with SIGKILL and not restarted.
//
// No job fails: each ends done, or partial when a target was interrupted,
// and reads so under the id its submit got. In the upstream's log each
// job's targets were fetched in idx order, each fetch after the last one
// ended, and each target at most once: a done target once, an
// interrupted one (its node stopped or died while fetching it) at most
// once and never again. The jobs the killed node held move on (their next
// target is fetched, or they end) on the others; the test logs how long
// that took, against StaleAfter + HeartbeatInterval.
func TestCluster_RollingRestartResume(t *testing.T) {
	t.Parallel()
	url, schema := pgSchema(t)
	bin := testbin.BuildPackage(t, "batchd", "../../batchd", false)
	up := newRollUpstream(t)
	callers := make([]string, 8)
	keys := make([]string, len(callers))
	for i := range callers {
		callers[i] = fmt.Sprintf("roll%d", i) // the key, roll0-secret-key, is 16 bytes
		keys[i] = callers[i] + "=" + keyOf(callers[i])
	}
	env := []string{"BATCHD_KEYS=" + strings.Join(keys, ",")}
	gen := filepath.Join(t.TempDir(), "generated.env") // the webhook secret each node generates
	var allNodes []*batchd                             // every process, for the log checks
	start := func(name string) *batchd {
		d := runBatchd(t, bin, env, "-addr", "127.0.0.1:0", "-db", url, "-pg-schema", schema,
			"-runner-id", name, "-resume", "-workers", strconv.Itoa(rollWorkers),
			"-fetches-per-host", "-1", // the one upstream stands for many hosts: every worker fetches
			"-heartbeat-interval", rollHeartbeat.String(), "-stale-after", rollStaleAfter.String(),
			"-poll-interval", rollPoll.String(), "-close-grace", rollCloseGrace.String(),
			"-jobs-per-caller", "4", "-jobs-total", "64", "-allow", up.addr(),
			"-mcp=false", "-generated-file", gen)
		allNodes = append(allNodes, d)
		return d
	}
	began := time.Now()
	names := []string{"n0", "n1", "n2"}
	procs := make([]*batchd, len(names))
	for i, name := range names { // one after the other: the first creates the schema
		procs[i] = start(name)
	}
	nodes := &nodeSet{}
	serving := func(skip int) []string {
		var a []string
		for i, p := range procs {
			if i != skip && p != nil {
				a = append(a, p.addr)
			}
		}
		return a
	}
	nodes.set(serving(-1)...)

	led := &rollLedger{unacked: map[string]int{}}
	counts := newCounts()
	// A node that is stopping answers the submits that reach it (a client
	// picked it just before it left the balancer) 503 with a Retry-After:
	// planned while a node stops, and a moment after.
	stopping := &outageWindow{}
	counts.allow503, counts.planned503 = true, stopping.allows
	ctx, stopLoad := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { // on every way out: the clients report to t
		stopLoad()
		wg.Wait()
	}()
	for i, caller := range callers {
		wg.Go(func() { rollClient(ctx, t, caller, uint64(i), up, nodes, led, counts) })
	}
	sleep(ctx, 1500*time.Millisecond)

	// The rolling restart: one node at a time, the load going on.
	restarts := 0
	var stops []time.Duration
	var sigterms []time.Time
	for i, name := range names {
		nodes.set(serving(i)...) // out of the balancer first, as a deploy does
		t0 := time.Now()
		sigterms = append(sigterms, t0)
		stopping.begin()
		procs[i].stop(t)
		stopping.end(time.Second)
		stops = append(stops, time.Since(t0).Round(10*time.Millisecond))
		procs[i] = start(name)
		restarts++
		nodes.set(serving(-1)...)
		sleep(ctx, 1500*time.Millisecond)
	}
	if t.Failed() {
		t.FailNow()
	}

	// One node dies: its jobs are the fetches the upstream sees cut. For
	// a moment before, the submits all go to it, so that it holds jobs:
	// a node takes the jobs it accepts at once while it has a free worker.
	const victim = 1
	nodes.set(procs[victim].addr)
	sleep(ctx, 700*time.Millisecond)
	nodes.set(serving(victim)...)
	killAt := time.Now()
	procs[victim].kill()
	procs[victim] = nil
	time.Sleep(100 * time.Millisecond) // the upstream sees the connections close
	dead := up.killedAt(killAt)
	deadJobs, deadCut := len(dead), 0
	for _, f := range dead {
		if f.cut {
			deadCut++
		}
	}
	expected := rollStaleAfter + rollHeartbeat + rollPoll
	bound := 10 * expected
	cs := newClients(counts)
	defer cs.close()
	var handover time.Duration
	for len(dead) > 0 {
		took := time.Since(killAt)
		if took > bound {
			t.Fatalf("%d jobs of the killed node had not moved on %s after the kill: %v", len(dead), bound, dead)
		}
		next := dead[:0]
		for _, f := range dead {
			moved := up.fetchedAfter(f.marker, f.idx, killAt)
			if !moved {
				j, ok := led.byMarker(f.marker)
				if !ok {
					continue // a submit not acknowledged: nobody waits for it
				}
				addrs := nodes.get()
				st, a, err := cs.get(addrs[0], j.caller).status(t.Context(), j.id, "")
				moved = err == nil && a.code == http.StatusOK && st.Status.Finished()
			}
			if moved {
				handover = max(handover, took)
			} else {
				next = append(next, f)
			}
		}
		dead = next
		if len(dead) > 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	sleep(ctx, time.Second)
	stopLoad()
	wg.Wait()
	loadFor := time.Since(began)

	// Every job ends, done or partial, under its id.
	jobs := led.all()
	interrupted, partial, targets := 0, 0, 0
	var wholeInterrupted []rollFetch
	deadline := time.Now().Add(30 * time.Second)
	for _, j := range jobs {
		var st batchhttp.StatusResponse
		for {
			addrs := nodes.get()
			var a answer
			var err error
			st, a, err = cs.get(addrs[0], j.caller).status(t.Context(), j.id, "?wait=2s")
			if err != nil || a.code != http.StatusOK {
				t.Fatalf("job %s (%s): %v %d %s", j.id, j.marker, err, a.code, a.errorText())
			}
			if st.Status.Finished() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s (%s) still %s, %d of %d targets, 30s after the load", j.id, j.marker, st.Status, st.TargetsDone, st.TargetsTotal)
			}
		}
		targets += len(j.urls)
		if st.JobID != j.id || len(st.Targets) != len(j.urls) {
			t.Errorf("job %s (%s) reads as %s with %d targets, want its own id and %d", j.id, j.marker, st.JobID, len(st.Targets), len(j.urls))
			continue
		}
		done := 0
		for i, tg := range st.Targets {
			switch {
			case tg.URL != j.urls[i]:
				t.Errorf("job %s target %d: %s, want %s", j.id, i, tg.URL, j.urls[i])
			case tg.Status == batch.TargetDone && tg.Outcome == batch.OutcomeOK:
				done++
			case tg.Status == batch.TargetFailed && tg.Outcome == batch.OutcomeInterrupted:
				interrupted++
			default:
				t.Errorf("job %s (%s) target %d ended %s %s %q: want done, or interrupted", j.id, j.marker, i, tg.Status, tg.Outcome, tg.Error)
			}
		}
		switch {
		case st.Status == batch.JobFailed:
			t.Errorf("job %s (%s) failed (error %q), %d of %d targets done", j.id, j.marker, st.Error, done, len(j.urls))
		case done == len(j.urls) && st.Status != batch.JobDone,
			done < len(j.urls) && st.Status != batch.JobPartial:
			t.Errorf("job %s (%s) ended %s with %d of %d targets done", j.id, j.marker, st.Status, done, len(j.urls))
		case st.Status == batch.JobPartial:
			partial++
		}
		wholeInterrupted = append(wholeInterrupted, up.check(t, j, st)...)
	}
	// No job but the ones submitted: a handed-on job is not a new one.
	for _, caller := range callers {
		a, err := cs.get(nodes.get()[0], caller).do(t.Context(), http.MethodGet, fmt.Sprintf("/v1/batch?limit=%d", batchhttp.MaxListLimit), nil)
		var lr batchhttp.ListResponse
		if err == nil && a.code == http.StatusOK {
			err = json.Unmarshal(a.body, &lr)
		}
		if err != nil || a.code != http.StatusOK {
			t.Fatalf("list of %s: %v %d", caller, err, a.code)
		}
		unknown := 0
		for _, js := range lr.Jobs {
			if _, ok := led.byID(js.JobID); !ok {
				unknown++
			}
			if js.RetryOf != "" {
				t.Errorf("job %s of %s is a retry of %s", js.JobID, caller, js.RetryOf)
			}
		}
		if n := led.unackedOf(caller); unknown > n {
			t.Errorf("%s has %d jobs it was not told of, and %d submits went unanswered", caller, unknown, n)
		}
	}
	for _, p := range procs {
		if p != nil {
			p.stop(t)
		}
	}
	counts.check(t)
	handedOn := 0
	for _, d := range allNodes {
		log := d.stderr.String()
		handedOn += strings.Count(log, "batch jobs handed on")
		if strings.Contains(log, "/roll/") || strings.Contains(log, up.addr()) {
			t.Errorf("a batchd log names the upstream:\n%s", log)
		}
	}
	fetches, cut, strays, strayMarkers := up.totals(led)
	for _, m := range strayMarkers { // in order too, though nobody reads them
		up.check(t, rollJob{marker: m, id: "unacknowledged"}, batchhttp.StatusResponse{})
	}
	t.Logf("3 nodes on PostgreSQL, -resume, heartbeat %s, stale after %s, close grace %s, %d workers each: %d jobs (%d partial), %d targets, %d fetches (%d cut short), %d fetches of submits never answered; %s in all",
		rollHeartbeat, rollStaleAfter, rollCloseGrace, rollWorkers, len(jobs), partial, targets, fetches, cut, strays, loadFor.Round(100*time.Millisecond))
	t.Logf("rolling restart: %d SIGTERMs and restarts, each node out in %v; then 1 SIGKILL; targets interrupted: %d (bound %d; fetches cut by a SIGTERM's grace %d, by the SIGKILL %d; %d interrupted after the upstream had answered); %d \"jobs handed on\" log lines",
		restarts, stops, interrupted, (restarts+1)*rollWorkers, cut-deadCut, deadCut, len(wholeInterrupted), handedOn)
	for _, f := range wholeInterrupted {
		when := fmt.Sprintf("%s after the SIGKILL", f.endAt.Sub(killAt))
		for i, s := range sigterms {
			if f.endAt.After(s) {
				when += fmt.Sprintf(", %s after SIGTERM %d", f.endAt.Sub(s), i)
			}
		}
		t.Logf("target %s answered whole (in %s), then interrupted: the answer ended %s", &f, f.endAt.Sub(f.startAt), when)
	}
	t.Logf("SIGKILL: %d jobs of the killed node were mid-fetch; all had moved on %s after the kill (StaleAfter %s + HeartbeatInterval %s + PollInterval %s = %s; bound %s)",
		deadJobs, handover.Round(10*time.Millisecond), rollStaleAfter, rollHeartbeat, rollPoll, expected, bound)
	t.Log(counts)
	if interrupted > (restarts+1)*rollWorkers {
		t.Errorf("%d targets interrupted, more than %d stops × %d workers", interrupted, restarts+1, rollWorkers)
	}
	if deadJobs == 0 {
		t.Error("the killed node was fetching nothing: the handover was not measured")
	}
	if len(jobs) == 0 || interrupted == 0 {
		t.Errorf("%d jobs, %d targets interrupted: the load did not reach the restarts", len(jobs), interrupted)
	}
}

// rollClient is one caller's load: it submits a job to the next node
// serving, follows it to its end on any node, and submits the next, until
// ctx ends. One job in four has a slow page.
func rollClient(ctx context.Context, t *testing.T, caller string, seed uint64, up *rollUpstream, nodes *nodeSet, led *rollLedger, counts *answerCounts) {
	rng := rand.New(rand.NewPCG(seed, 27))
	cs := newClients(counts)
	defer cs.close()
	next := 0
	node := func() string {
		addrs := nodes.get()
		next++
		return addrs[next%len(addrs)]
	}
	for n := 0; ctx.Err() == nil; n++ {
		marker := fmt.Sprintf("%s-%d", caller, n)
		k := 3 + rng.IntN(4)
		slow := -1
		if rng.IntN(4) == 0 {
			slow = rng.IntN(k)
		}
		urls := make([]string, k)
		for i := range urls {
			d := rollPage
			if i == slow {
				d = rollSlowPage
			}
			urls[i] = up.url(marker, i, d)
		}
		sr, a, err := cs.get(node(), caller).submit(ctx, urls)
		if err != nil || a.code != http.StatusAccepted {
			if err != nil || a.code >= 500 { // it may exist, unanswered (the load's end cuts submits short too)
				led.unack(caller)
			}
			if ctx.Err() != nil {
				return
			}
			sleep(ctx, 50*time.Millisecond)
			continue
		}
		led.ack(rollJob{marker: marker, caller: caller, id: sr.JobID, urls: urls})
		for ctx.Err() == nil {
			st, a, err := cs.get(node(), caller).status(ctx, sr.JobID, "?wait=1s")
			if err != nil || ctx.Err() != nil {
				sleep(ctx, 10*time.Millisecond)
				continue // a node stopping or dead: ask the next
			}
			if a.code != http.StatusOK || st.JobID != sr.JobID {
				t.Errorf("read of job %s (%s): %d %s, id %q", sr.JobID, marker, a.code, a.errorText(), st.JobID)
				return
			}
			if st.Status.Finished() {
				break
			}
		}
	}
}

// rollJob is an acknowledged job of the rolling test.
type rollJob struct {
	marker, caller, id string
	urls               []string
}

// rollLedger keeps the jobs acknowledged, and per caller the submits that
// got no answer (which may have made a job nobody was told of).
type rollLedger struct {
	mu      sync.Mutex
	jobs    []rollJob
	unacked map[string]int
}

func (l *rollLedger) ack(j rollJob) {
	l.mu.Lock()
	l.jobs = append(l.jobs, j)
	l.mu.Unlock()
}

func (l *rollLedger) unack(caller string) {
	l.mu.Lock()
	l.unacked[caller]++
	l.mu.Unlock()
}

func (l *rollLedger) unackedOf(caller string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unacked[caller]
}

func (l *rollLedger) all() []rollJob {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.jobs)
}

func (l *rollLedger) byMarker(marker string) (rollJob, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, j := range l.jobs {
		if j.marker == marker {
			return j, true
		}
	}
	return rollJob{}, false
}

func (l *rollLedger) byID(id string) (rollJob, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, j := range l.jobs {
		if j.id == id {
			return j, true
		}
	}
	return rollJob{}, false
}

// rollUpstream serves /roll/<marker>/<idx>/<ms>: a page answered after ms
// milliseconds, unless its fetcher goes away first. It logs every fetch,
// with the order of its start and end among all starts and ends, and the
// time each connection closed.
type rollUpstream struct {
	srv     *httptest.Server
	mu      sync.Mutex
	seq     int64
	fetches []*rollFetch // in the order they started
	closed  map[net.Conn]time.Time
}

// connKey is the request context key of a fetch's connection.
type connKey struct{}

// rollFetch is one fetch in the upstream's log.
type rollFetch struct {
	marker     string
	idx        int
	start, end int64 // places in the log; end is 0 while it runs
	startAt    time.Time
	endAt      time.Time
	cut        bool // the fetcher went away before the answer
	conn       net.Conn
}

func (f *rollFetch) String() string { return fmt.Sprintf("%s/%d", f.marker, f.idx) }

func newRollUpstream(t *testing.T) *rollUpstream {
	u := &rollUpstream{closed: map[net.Conn]time.Time{}}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/roll/"), "/")
		if len(parts) != 3 {
			http.NotFound(w, r)
			return
		}
		idx, err1 := strconv.Atoi(parts[1])
		ms, err2 := strconv.Atoi(parts[2])
		if err1 != nil || err2 != nil {
			http.NotFound(w, r)
			return
		}
		f := &rollFetch{marker: parts[0], idx: idx}
		f.conn, _ = r.Context().Value(connKey{}).(net.Conn)
		u.mu.Lock()
		u.seq++
		f.start, f.startAt = u.seq, time.Now()
		u.fetches = append(u.fetches, f)
		u.mu.Unlock()
		cut := false
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-r.Context().Done():
			cut = true
		}
		u.mu.Lock()
		u.seq++
		f.end, f.endAt, f.cut = u.seq, time.Now(), cut
		u.mu.Unlock()
		if !cut { // written after the end is logged: the fetcher cannot see it sooner
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			fmt.Fprint(w, pageText(r.URL.Path))
		}
	}))
	u.srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, c)
	}
	u.srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			u.mu.Lock()
			u.closed[c] = time.Now()
			u.mu.Unlock()
		}
	}
	u.srv.Start()
	t.Cleanup(u.srv.Close)
	return u
}

func (u *rollUpstream) addr() string { return strings.TrimPrefix(u.srv.URL, "http://") }

func (u *rollUpstream) url(marker string, idx int, d time.Duration) string {
	return fmt.Sprintf("%s/roll/%s/%d/%d", u.srv.URL, marker, idx, d.Milliseconds())
}

// killedAt returns the fetches of a fetcher killed at at: those started
// before it that were cut short after it, or that ended after it on a
// connection closed after it. (A killed process's sockets close a moment
// after the signal: a page answered in that moment reads as whole here,
// though nobody got it.)
func (u *rollUpstream) killedAt(at time.Time) []*rollFetch {
	u.mu.Lock()
	defer u.mu.Unlock()
	var killed []*rollFetch
	for _, f := range u.fetches {
		if !f.startAt.Before(at) || (f.end != 0 && f.endAt.Before(at)) {
			continue
		}
		closed, ok := u.closed[f.conn]
		if f.cut || (f.end != 0 && ok && !closed.Before(at)) {
			killed = append(killed, f)
		}
	}
	return killed
}

// fetchedAfter reports whether a target of marker after idx was fetched
// since at.
func (u *rollUpstream) fetchedAfter(marker string, idx int, at time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, f := range slices.Backward(u.fetches) {
		if f.startAt.Before(at) {
			return false
		}
		if f.marker == marker && f.idx > idx {
			return true
		}
	}
	return false
}

// check fails t unless the job's fetches in the log are in idx order, each
// after the last ended, each target fetched at most once, a done target
// exactly once and to the end, and a fetch cut short only for a target
// that ended interrupted. It returns the targets interrupted after the
// upstream had answered them whole.
func (u *rollUpstream) check(t *testing.T, j rollJob, st batchhttp.StatusResponse) (whole []rollFetch) {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	var mine []rollFetch
	for _, f := range u.fetches {
		if f.marker == j.marker {
			mine = append(mine, *f)
		}
	}
	fetched := map[int]rollFetch{}
	for i, f := range mine {
		if f.end == 0 {
			t.Errorf("job %s (%s): the fetch of target %d never ended", j.id, j.marker, f.idx)
		}
		if i > 0 {
			prev := mine[i-1]
			if f.idx <= prev.idx {
				t.Errorf("job %s (%s): target %d fetched after target %d: fetches %v", j.id, j.marker, f.idx, prev.idx, mine)
			}
			if f.start < prev.end {
				t.Errorf("job %s (%s): target %d fetched while target %d was", j.id, j.marker, f.idx, prev.idx)
			}
		}
		fetched[f.idx] = f
	}
	for i, tg := range st.Targets {
		f, ok := fetched[i]
		switch {
		case tg.Status == batch.TargetDone && (!ok || f.cut):
			t.Errorf("job %s (%s): target %d is done, but the upstream served it no whole fetch", j.id, j.marker, i)
		case tg.Status != batch.TargetDone && ok && !f.cut:
			// Its node was stopped or died after the answer and before
			// storing it: interrupted, and not fetched again.
			whole = append(whole, f)
		}
	}
	return whole
}

// totals returns the fetches in the log, those cut short, and those of
// submits never acknowledged, with their markers.
func (u *rollUpstream) totals(led *rollLedger) (fetches, cut, strays int, strayMarkers []string) {
	acked := map[string]bool{}
	for _, j := range led.all() {
		acked[j.marker] = true
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, f := range u.fetches {
		if f.cut {
			cut++
		}
		if !acked[f.marker] {
			strays++
			if !slices.Contains(strayMarkers, f.marker) {
				strayMarkers = append(strayMarkers, f.marker)
			}
		}
	}
	return len(u.fetches), cut, strays, strayMarkers
}

// kill kills batchd with SIGKILL and waits for it.
func (d *batchd) kill() {
	d.cmd.Process.Signal(syscall.SIGKILL)
	err := <-d.done
	d.done <- err
}
