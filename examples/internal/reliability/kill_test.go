package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchstore"
)

// killCallers are the callers of the kill tests.
var killCallers = []string{"kc0", "kc1", "kc2", "kc3"}

// killBatch is the runner configuration of the kill tests: caps that the
// clients reach now and then, a TTL that outlasts the test.
func killBatch() batch.Config {
	// The one upstream host stands for many: no per-host cap, so that every
	// worker fetches at once, as the kill and fault cases need.
	return batch.Config{JobsPerCaller: 6, JobsTotal: 20, Workers: 4, FetchesPerHost: -1,
		TTL: batch.Duration(time.Hour), TargetTimeout: batch.Duration(10 * time.Second)}
}

// The SIGKILL loop: the daemon on SQLite is killed at a random moment
// under load and started again, kills times (10; 50 in the long form).
// Every acknowledged submit and every result a client saw done is there
// after each restart, with the same bytes; at the end no job is left
// live, no page was fetched twice, and the file passes quick_check.
func TestKillLoop_SQLite(t *testing.T) {
	t.Parallel()
	killLoop(t, false)
}

// The SIGKILL loop with Config.Resume: on top of the above, no job fails
// as restart (each kill hands its jobs on to the next start), and at most
// one target per worker is interrupted per kill.
func TestKillLoop_SQLiteResume(t *testing.T) {
	t.Parallel()
	killLoop(t, true)
}

// killLoop runs the SIGKILL loop, with Config.Resume if resume.
func killLoop(t *testing.T, resume bool) {
	kills := 10
	if long() {
		kills = 50
	}
	up := newUpstream(t, 5*time.Millisecond)
	b := killBatch()
	b.Resume = resume
	cfg := childConfig{
		DB:      filepath.Join(t.TempDir(), "kill.db"),
		Allow:   []string{up.addr()},
		Callers: killCallers,
		Batch:   b,
	}
	w := &workload{ledger: newLedger(), up: up, counts: newCounts(), cancels: true}
	rng := rand.New(rand.NewPCG(1, 1))
	logs := &logSink{}
	start := time.Now()
	for k := range kills {
		d := startDaemon(t, cfg, logs)
		if k > 0 {
			w.verify(t, d.addr, 50, false, 0) // what the last life acknowledged survived its kill
			if t.Failed() {
				t.Fatalf("after kill %d", k)
			}
		}
		ctx, stop := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		for i, caller := range killCallers {
			wg.Go(func() { w.run(ctx, caller, uint64(k*10+i), func() []string { return []string{d.addr} }) })
		}
		sleep(ctx, time.Duration(150+rng.IntN(450))*time.Millisecond)
		d.kill()
		stop()
		wg.Wait()
	}
	d := startDaemon(t, cfg, logs)
	w.verify(t, d.addr, 0, true, time.Minute)
	restarted, interrupted := endTally(t, w, d.addr)
	if err := d.stop(); err != nil {
		t.Errorf("graceful stop: %v", err)
	}
	w.counts.check(t)
	checkLogs(t, logs, up)
	// Open runs quick_check, and fails on a damaged file.
	s, err := batchstore.Open(t.Context(), cfg.DB, batchstore.Config{})
	if err != nil {
		t.Fatalf("after %d kills: %v", kills, err)
	}
	s.Close()
	jobs, results := w.ledger.counts()
	t.Logf("%d kills in %s (resume %v): %d acknowledged jobs, %d results seen done, none lost or changed; %s",
		kills, time.Since(start).Round(time.Second), b.Resume, jobs, results, w.counts)
	t.Logf("jobs failed restart: %d; targets interrupted: %d (bound: %d kills × %d workers)",
		restarted, interrupted, kills, b.Workers)
	if b.Resume && restarted > 0 {
		t.Errorf("with resume, %d jobs failed as restart; want 0", restarted)
	}
	if b.Resume && interrupted > kills*b.Workers {
		t.Errorf("with resume, %d targets interrupted; want at most %d", interrupted, kills*b.Workers)
	}
	if jobs == 0 || results == 0 {
		t.Fatal("the load acknowledged nothing: the test tested nothing")
	}
}

// checkLogs fails on a daemon log line that names the upstream: its
// address, or a page path.
func checkLogs(t *testing.T, logs *logSink, up *upstream) {
	t.Helper()
	lines := logs.all()
	for _, line := range lines {
		for _, bad := range []string{up.addr(), "/page/", "127.0.0.1"} {
			if containsFold(line, bad) {
				t.Errorf("a log line names %q: %.300s", bad, line)
				return
			}
		}
	}
	if len(lines) == 0 {
		t.Error("the daemon logged nothing: the log check checked nothing")
	}
}

// nodeSet is the addresses of the nodes serving now.
type nodeSet struct {
	mu    sync.Mutex
	addrs []string
}

func (n *nodeSet) set(addrs ...string) {
	n.mu.Lock()
	n.addrs = addrs
	n.mu.Unlock()
}

func (n *nodeSet) get() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.addrs
}

// Three daemons share one PostgreSQL database:
// clients spread submits, polls and cancels over them; one is killed with
// SIGKILL mid-run and not restarted (in the long form, five rounds, each
// killing another node and bringing the last one back under a new runner
// id). No acknowledged submit or seen result is lost, each page is fetched
// at most once, and the jobs the dead node held are failed by the others
// within StaleAfter and one sweep.
func TestCluster_KillOne(t *testing.T) {
	t.Parallel()
	url, schema := pgSchema(t)
	rounds := 1
	if long() {
		rounds = 5
	}
	up := newUpstream(t, 5*time.Millisecond)
	bc := killBatch()
	bc.HeartbeatInterval, bc.StaleAfter, bc.SweepInterval = batch.Duration(250*time.Millisecond), batch.Duration(2*time.Second), batch.Duration(500*time.Millisecond)
	node := func(id string) childConfig {
		c := childConfig{DB: url, Schema: schema, Allow: []string{up.addr()}, Callers: append(killCallers, "gc"), Batch: bc}
		c.Batch.RunnerID = id
		return c
	}
	logs := &logSink{}
	// n0 starts alone and takes three jobs whose first page hangs (gate 0):
	// when it is killed, those are certainly its own, mid-target.
	procs := []*daemonProc{startDaemon(t, node("n0"), logs), nil, nil}
	w := &workload{ledger: newLedger(), up: up, counts: newCounts(), cancels: true}
	gc := newClient(procs[0].addr, "gc", w.counts)
	var gated []string
	for i := range 3 {
		urls := []string{up.url(fmt.Sprintf("fgate0-%d", i)), up.url(fmt.Sprintf("f-gated-%d", i))}
		sr, a, err := gc.submit(t.Context(), urls)
		if err != nil || a.code != 202 {
			t.Fatalf("gated submit: %v %d", err, a.code)
		}
		w.ledger.ack(ackedJob{id: sr.JobID, caller: "gc", urls: urls})
		gated = append(gated, sr.JobID)
	}
	for _, id := range gated {
		for st, _, _ := gc.status(t.Context(), id, ""); st.Status != batch.JobRunning; st, _, _ = gc.status(t.Context(), id, "?wait=1s") {
		}
	}
	gc.close()
	procs[1], procs[2] = startDaemon(t, node("n1"), logs), startDaemon(t, node("n2"), logs)
	nodes := &nodeSet{}
	addrs := func() []string {
		var a []string
		for _, p := range procs {
			if p != nil {
				a = append(a, p.addr)
			}
		}
		return a
	}
	nodes.set(addrs()...)
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for i, caller := range killCallers {
		wg.Go(func() { w.run(ctx, caller, uint64(100+i), nodes.get) })
	}
	rng := rand.New(rand.NewPCG(2, 2))
	var worst time.Duration
	for r := range rounds {
		sleep(ctx, time.Duration(800+rng.IntN(700))*time.Millisecond)
		victim := r % len(procs)
		if procs[victim] == nil {
			victim = (victim + 1) % len(procs)
		}
		procs[victim].kill()
		procs[victim] = nil
		nodes.set(addrs()...)
		if r == 0 {
			up.openGate(0) // had n0 not died, its gated jobs would go on now
		}
		took, restarted := w.waitNoneHeld(t, nodes.get()[0], time.Duration(bc.StaleAfter+bc.SweepInterval)+5*time.Second)
		worst = max(worst, took)
		t.Logf("round %d: node n%d killed; %d of its jobs failed as restart, every job running at the kill had moved on %s later (StaleAfter %s + sweep %s)",
			r, victim, restarted, took.Round(10*time.Millisecond), bc.StaleAfter, bc.SweepInterval)
		if r == 0 && restarted < len(gated) {
			t.Errorf("round 0: %d jobs failed as restart, want at least the %d gated jobs n0 held", restarted, len(gated))
		}
		if r < rounds-1 { // bring a node back, under a new id, for the next round
			procs[victim] = startDaemon(t, node(fmt.Sprintf("n%d-r%d", victim, r)), logs)
			nodes.set(addrs()...)
		}
	}
	stop()
	wg.Wait()
	w.verify(t, nodes.get()[0], 0, true, time.Minute)
	for _, p := range procs {
		if p != nil {
			if err := p.stop(); err != nil {
				t.Errorf("graceful stop: %v", err)
			}
		}
	}
	w.counts.check(t)
	checkLogs(t, logs, up)
	jobs, results := w.ledger.counts()
	t.Logf("%d rounds: %d acknowledged jobs, %d results seen done, none lost or changed; longest wait for a dead node's jobs %s; %s",
		rounds, jobs, results, worst.Round(10*time.Millisecond), w.counts)
	if jobs == 0 || results == 0 {
		t.Fatal("the load acknowledged nothing: the test tested nothing")
	}
}

// waitNoneHeld waits until every job that is running now (as the node at
// addr reads it) has finished or moved on, and returns how long that took
// and how many of them failed as restart: a job the dead node held moves
// only once a survivor's sweep finds the node stale and fails it. It fails
// t past bound.
func (w *workload) waitNoneHeld(t *testing.T, addr string, bound time.Duration) (took time.Duration, restarted int) {
	t.Helper()
	start := time.Now()
	w.ledger.mu.Lock()
	var live []ackedJob
	for id := range w.ledger.live {
		live = append(live, w.ledger.jobs[id])
	}
	w.ledger.mu.Unlock()
	cs := newClients(w.counts)
	defer cs.close()
	as := func(caller string) *client { return cs.get(addr, caller) }
	type watch struct {
		job  ackedJob
		done int
	}
	var watched []watch
	for _, j := range live {
		st, a, err := as(j.caller).status(t.Context(), j.id, "")
		if err == nil && a.code == 200 && st.Status == batch.JobRunning {
			watched = append(watched, watch{j, st.TargetsDone})
		}
	}
	for len(watched) > 0 {
		if time.Since(start) > bound {
			t.Fatalf("%d jobs still running without progress %s after the kill", len(watched), bound)
		}
		next := watched[:0]
		for _, wt := range watched {
			st, a, err := as(wt.job.caller).status(t.Context(), wt.job.id, "")
			switch {
			case err != nil || a.code != 200:
				t.Fatalf("read of job %s on a survivor: %v %d", wt.job.id, err, a.code)
			case st.Status == batch.JobFailed && st.Error == "restart":
				restarted++
			case st.Status == batch.JobRunning && st.TargetsDone == wt.done:
				next = append(next, wt)
			}
		}
		watched = next
		if len(watched) > 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	return time.Since(start), restarted
}

// endTally reads every acknowledged job once more, and counts those failed
// as restart and the targets ended interrupted.
func endTally(t *testing.T, w *workload, addr string) (restarted, interrupted int) {
	t.Helper()
	jobs, _ := w.ledger.snapshot()
	cs := newClients(w.counts)
	defer cs.close()
	for _, j := range jobs {
		st, a, err := cs.get(addr, j.caller).status(t.Context(), j.id, "")
		if err != nil || a.code != http.StatusOK {
			t.Fatalf("tally: read of job %s: %d, %v", j.id, a.code, err)
		}
		if st.Status == batch.JobFailed && st.Error == "restart" {
			restarted++
		}
		for _, tg := range st.Targets {
			if tg.Outcome == batch.OutcomeInterrupted {
				interrupted++
			}
		}
	}
	return restarted, interrupted
}
