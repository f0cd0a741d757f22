package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchdriver/batchdrivertest"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// Several nodes on one schema: each node is a store with a pool of its own
// and a runner, as three batchd processes would be. They run on the
// database's clock, the default.

// cluster opens n stores on one new schema.
func cluster(t *testing.T, n int) []*Store {
	t.Helper()
	schema := newSchema(t)
	stores := make([]*Store, n)
	for i := range stores {
		stores[i] = openOn(t, Config{Schema: schema})
	}
	return stores
}

// node starts a runner on s, closed when the test ends.
func node(t *testing.T, s batchdriver.Store, cfg batch.Config) *batch.Runner {
	t.Helper()
	cfg.Store = s
	if cfg.Logger == nil {
		cfg.Logger = batchtest.Logger(t)
	}
	return batchtest.NewRunner(t, cfg)
}

// acceptOnly is a node that accepts and reads jobs but never claims one.
type acceptOnly struct{ batchdriver.Store }

func (acceptOnly) Claim(context.Context, batchdriver.ClaimParams) (batchdriver.Claimed, bool, error) {
	return batchdriver.Claimed{}, false, nil
}

func (a acceptOnly) Subscribe(fn func(string)) func() {
	return a.Store.(batchdriver.ChangeFeed).Subscribe(fn)
}

func (a acceptOnly) Watch(ctx context.Context, id string) func() {
	return a.Store.(batchdriver.WatchFeed).Watch(ctx, id)
}

// 3 × 50 racing submits never exceed a cap and make
// exactly one job per identical list.
func TestCluster_RacingSubmits(t *testing.T) {
	t.Parallel()
	const nodes, perNode = 3, 50
	// race submits perNode goroutines per node at once; submit(g) gives the
	// caller and list of goroutine g. It returns each new job by caller and
	// every job id answered, and counts the errors.
	// A slack above 0 stands for the server's max_connections (see
	// Create): the creates far from the total cap take the shared path.
	race := func(t *testing.T, cfg batch.Config, slack int, submit func(g int) (batchdriver.Caller, []batchdriver.Target)) (created map[string][]string, answered map[string]bool, errs map[error]int) {
		t.Helper()
		stores := cluster(t, nodes)
		for _, s := range stores {
			if slack > 0 {
				s.slackForTest = slack
			}
		}
		hold := batchtest.NewBlockingFetcher() // every job stays live
		t.Cleanup(func() {
			for range 64 {
				hold.Release()
			}
		})
		cfg.Fetch = hold.Fetch
		var runners []*batch.Runner
		for _, s := range stores {
			runners = append(runners, node(t, s, cfg))
		}
		created, answered, errs = map[string][]string{}, map[string]bool{}, map[error]int{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := range nodes * perNode {
			wg.Go(func() {
				caller, ts := submit(g)
				<-start
				job, reused, err := runners[g%nodes].Submit(context.Background(), caller, ts)
				mu.Lock()
				defer mu.Unlock()
				for _, want := range []error{batchdriver.ErrBusy, batchdriver.ErrCallerBusy} {
					if errors.Is(err, want) {
						errs[want]++
						return
					}
				}
				if err != nil {
					t.Errorf("submit %d: %v", g, err)
					return
				}
				answered[job.ID] = true
				if !reused {
					created[caller.Name] = append(created[caller.Name], job.ID)
				}
			})
		}
		close(start)
		wg.Wait()
		return created, answered, errs
	}

	t.Run("IdenticalLists", func(t *testing.T) {
		t.Parallel()
		const lists = 5 // 30 racing submits of each, from all three nodes
		created, answered, errs := race(t, batch.Config{JobsPerCaller: 10, JobsTotal: 100}, 0,
			func(g int) (batchdriver.Caller, []batchdriver.Target) {
				c := g % lists
				return batchdriver.Caller{Name: fmt.Sprintf("c%d", c)}, batchtest.Targets(fmt.Sprintf("same-%d", c), 3)
			})
		if len(errs) != 0 {
			t.Errorf("errors %v, want none", errs)
		}
		for c := range lists {
			if ids := created[fmt.Sprintf("c%d", c)]; len(ids) != 1 {
				t.Errorf("caller c%d: %d jobs created (%v), want exactly 1", c, len(ids), ids)
			}
		}
		if len(answered) != lists {
			t.Errorf("%d distinct jobs answered, want %d", len(answered), lists)
		}
	})
	caps := func(t *testing.T, total, slack int) {
		t.Helper()
		const callers, perCaller = 15, 2 // distinct lists: no reuse
		created, _, errs := race(t, batch.Config{JobsPerCaller: perCaller, JobsTotal: total}, slack,
			func(g int) (batchdriver.Caller, []batchdriver.Target) {
				return batchdriver.Caller{Name: fmt.Sprintf("c%d", g%callers)}, batchtest.Targets(fmt.Sprintf("list-%d", g), 1)
			})
		n := 0
		for c, ids := range created {
			n += len(ids)
			if len(ids) > perCaller {
				t.Errorf("caller %s has %d live jobs, cap %d", c, len(ids), perCaller)
			}
		}
		if n != total || errs[batchdriver.ErrBusy]+errs[batchdriver.ErrCallerBusy] != nodes*perNode-total {
			t.Errorf("%d jobs created, errors %v; want exactly %d created, the other %d refused", n, errs, total, nodes*perNode-total)
		}
	}
	t.Run("Caps", func(t *testing.T) {
		t.Parallel()
		caps(t, 10, 0)
	})
	// The three nodes' pools are the only connections that create, so
	// their size bounds the creates in flight: the first jobs take the
	// shared path, the last the exclusive one.
	t.Run("CapsSharedPath", func(t *testing.T) {
		t.Parallel()
		caps(t, 20, nodes*testMaxConns)
	})
}

// recorder wraps a node's store and records when each drain write
// committed, by job and target.
type recorder struct {
	batchdriver.Store
	mu     sync.Mutex
	stored map[string][]time.Time // job → commit time of each target, in idx order
}

func newRecorder(s batchdriver.Store) *recorder {
	return &recorder{Store: s, stored: map[string][]time.Time{}}
}

func (r *recorder) FinishTarget(ctx context.Context, p batchdriver.FinishParams) (batchdriver.Step, error) {
	st, err := r.Store.FinishTarget(ctx, p)
	if err == nil {
		r.mu.Lock()
		if ts := r.stored[p.JobID]; len(ts) == p.Target.Idx {
			r.stored[p.JobID] = append(ts, time.Now())
		}
		r.mu.Unlock()
	}
	return st, err
}

// Subscribe and Watch pass the change feed through: a wrapper must not
// hide it.
func (r *recorder) Subscribe(fn func(string)) func() {
	return r.Store.(batchdriver.ChangeFeed).Subscribe(fn)
}

func (r *recorder) Watch(ctx context.Context, id string) func() {
	return r.Store.(batchdriver.WatchFeed).Watch(ctx, id)
}

// fetchLog records every fetch's start and end.
type fetchLog struct {
	mu    sync.Mutex
	calls map[string][][2]time.Time // URL → [start, end] of each fetch
}

func (l *fetchLog) fetcher(node string, byNode map[string]string) batch.FetchFunc {
	return func(ctx context.Context, _ batchdriver.Caller, tg batchdriver.Target) (batch.Result, error) {
		start := time.Now()
		time.Sleep(2 * time.Millisecond)
		l.mu.Lock()
		l.calls[tg.URL] = append(l.calls[tg.URL], [2]time.Time{start, time.Now()})
		byNode[tg.URL] = node
		l.mu.Unlock()
		return batch.Result{Content: "from " + node}, nil
	}
}

// jobs submitted on node A are drained by B and C,
// each job's targets strictly one after the other: target i+1's fetch
// starts only after target i's write committed.
func TestCluster_DrainedByOtherNodes(t *testing.T) {
	t.Parallel()
	stores := cluster(t, 3)
	log := &fetchLog{calls: map[string][][2]time.Time{}}
	byNode := map[string]string{}
	a := node(t, acceptOnly{stores[0]}, batch.Config{JobsPerCaller: 100, JobsTotal: 100})
	recs := []*recorder{newRecorder(stores[1]), newRecorder(stores[2])}
	for i, name := range []string{"b", "c"} {
		node(t, recs[i], batch.Config{Fetch: log.fetcher(name, byNode), RunnerID: "node-" + name, JobsPerCaller: 100, JobsTotal: 100})
	}
	for _, s := range stores[1:] { // so that both hear the first submit
		listening(t, s, 0)
	}
	const jobs, targets = 12, 8
	ids := map[string][]batchdriver.Target{}
	caller := batchdriver.Caller{Name: "alice"}
	for j := range jobs {
		ts := batchtest.Targets(fmt.Sprintf("job%d", j), targets)
		job, _, err := a.Submit(t.Context(), caller, ts)
		if err != nil {
			t.Fatal(err)
		}
		ids[job.ID] = ts
	}
	for id := range ids {
		if info := batchtest.WaitFinished(t, a, caller, id, 30*time.Second); info.Status != batchdriver.JobDone {
			t.Fatalf("job %s = %s, want done", id, info.Status)
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	drained := map[string]int{}
	for id, ts := range ids {
		var commits []time.Time
		for _, r := range recs {
			r.mu.Lock()
			if c := r.stored[id]; len(c) > 0 {
				commits = c
			}
			r.mu.Unlock()
		}
		if len(commits) != targets {
			t.Fatalf("job %s: %d writes recorded on one node, want %d", id, len(commits), targets)
		}
		drained[byNode[ts[0].URL]]++
		for i, tg := range ts {
			calls := log.calls[tg.URL]
			if len(calls) != 1 {
				t.Fatalf("%s fetched %d times, want once", tg.URL, len(calls))
			}
			if byNode[tg.URL] != byNode[ts[0].URL] {
				t.Errorf("job %s drained by both %s and %s", id, byNode[ts[0].URL], byNode[tg.URL])
			}
			if i > 0 && calls[0][0].Before(commits[i-1]) {
				t.Errorf("job %s: target %d started %v before target %d was stored", id, i, commits[i-1].Sub(calls[0][0]), i-1)
			}
		}
	}
	if drained["b"] == 0 || drained["c"] == 0 {
		t.Errorf("jobs drained by node: %v; want both b and c to drain some", drained)
	}
	t.Logf("jobs drained by node: %v", drained)
}

// a cancel through node C stops the job node B
// drains before its next target; the target in flight is stored.
func TestCluster_CancelThroughThirdNode(t *testing.T) {
	t.Parallel()
	stores := cluster(t, 3)
	f := batchtest.NewBlockingFetcher()
	a := node(t, acceptOnly{stores[0]}, batch.Config{})
	node(t, stores[1], batch.Config{Fetch: f.Fetch, RunnerID: "node-b"})
	c := node(t, acceptOnly{stores[2]}, batch.Config{})
	caller := batchdriver.Caller{Name: "alice"}
	job, _, err := a.Submit(t.Context(), caller, batchtest.Targets("cancel", 3))
	if err != nil {
		t.Fatal(err)
	}
	<-f.Started // B fetches target 0
	if err := c.Cancel(t.Context(), caller, job.ID); err != nil {
		t.Fatal(err)
	}
	f.Release()
	deadline := time.Now().Add(10 * time.Second)
	var info batch.JobInfo
	for {
		if info, err = a.Status(t.Context(), caller, job.ID, batch.StatusOptions{}); err != nil {
			t.Fatal(err)
		}
		if info.Targets[0].Status == batchdriver.TargetDone || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // a next target would start now, if it were going to
	info, _ = a.Status(t.Context(), caller, job.ID, batch.StatusOptions{})
	got := []batchdriver.TargetStatus{info.Targets[0].Status, info.Targets[1].Status, info.Targets[2].Status}
	want := []batchdriver.TargetStatus{batchdriver.TargetDone, batchdriver.TargetPending, batchdriver.TargetPending}
	if info.Status != batchdriver.JobCancelled || !slices.Equal(got, want) {
		t.Fatalf("after the cancel through C: %s %v, want cancelled %v", info.Status, got, want)
	}
	if calls := f.Calls(); len(calls) != 1 {
		t.Fatalf("B fetched %v, want only the target in flight at the cancel", calls)
	}
}

// a node killed mid-target without any cleanup has
// its job failed "restart" by another node within StaleAfter plus one
// sweep, its finished target intact. The killed node is a child process
// (this test binary), as a crashed batchd would be.
func TestCluster_KilledNodeReapedByAnother(t *testing.T) {
	t.Parallel()
	stores := cluster(t, 1)
	s := stores[0]
	caller := batchdriver.Caller{Name: "alice"}
	ts := batchtest.Targets("crash", 3)
	p := batchdriver.CreateParams{ID: "crash-job", Caller: caller, IdemKey: batchdrivertest.IdemKey(caller.Name, ts),
		Targets: ts, Limits: testLimits}
	if _, _, err := s.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	child := startChild(t, "drain", s.opts.Schema)
	child.waitLine(t, "inflight", 30*time.Second) // target 0 stored, target 1 in flight
	survivor := node(t, s, batch.Config{RunnerID: "survivor", HeartbeatInterval: batch.Duration(crashHeartbeat),
		StaleAfter: batch.Duration(crashStale), SweepInterval: batch.Duration(crashSweep), Fetch: batchtest.FailingFetcher(batchtest.ErrScripted)})
	if info, err := survivor.Status(t.Context(), caller, p.ID, batch.StatusOptions{}); err != nil || info.Status != batchdriver.JobRunning {
		t.Fatalf("before the kill the job is %s (%v), want running on the child", info.Status, err)
	}
	if err := child.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	child.cmd.Wait()
	var info batch.JobInfo
	for {
		var err error
		if info, err = survivor.Status(t.Context(), caller, p.ID, batch.StatusOptions{Results: true}); err != nil {
			t.Fatal(err)
		}
		if info.Status != batchdriver.JobRunning || time.Since(killed) > 30*time.Second {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(killed)
	t.Logf("the killed node's job was failed %v after the kill (StaleAfter %v, SweepInterval %v)", took, crashStale, crashSweep)
	if info.Status != batchdriver.JobFailed || info.Error != "restart" {
		t.Fatalf("job = %s (%q), want failed (restart)", info.Status, info.Error)
	}
	got := []batchdriver.TargetStatus{info.Targets[0].Status, info.Targets[1].Status, info.Targets[2].Status}
	if want := []batchdriver.TargetStatus{batchdriver.TargetDone, batchdriver.TargetFailed, batchdriver.TargetPending}; !slices.Equal(got, want) {
		t.Fatalf("targets %v, want %v", got, want)
	}
	if env, err := batch.DecodeEnvelope(info.Targets[0].Result); err != nil || env.Content != "kept" {
		t.Errorf("finished target = %q, %v; want kept", info.Targets[0].Result, err)
	}
	// The bound is StaleAfter plus one sweep from the last heartbeat, which
	// is before the kill; two seconds of slack cover a loaded machine.
	if bound := crashStale + crashSweep + 2*time.Second; took > bound {
		t.Errorf("reaped %v after the kill, want within %v", took, bound)
	}
}
