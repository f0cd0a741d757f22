package batchdrivertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// submitCases: create, idempotent reuse and the caps, alone and racing.
var submitCases = map[string]func(*testing.T, batchdriver.Store){
	"CapsAfterReuse":            storeCapsAfterReuse,
	"CapsPerCallerAndTotal":     storeCaps,
	"ConcurrentCallersCapped":   storeConcurrentCallers,
	"ConcurrentIdenticalSubmit": storeConcurrentIdentical,
	"CreateRoundTrip":           storeRoundTrip,
	"CreateRetryLineage":        storeRetryLineage,
	"CreateTraceContext":        storeTraceContext,
	"ReuseNotAfterCancelOrFail": storeNoReuseAfterCancel,
	"ReuseScopedByCaller":       storeReuseScoped,
	"ReuseWithinLease":          storeReuseWithinLease,
}

// storeRetryLineage: a retry's RetryOf and RetryIdx are stored as given
// and read back by every read of the job; a plain job has neither.
func storeRetryLineage(t *testing.T, s batchdriver.Store) {
	plain := mustCreate(t, s, jobSpec("alice", "plain", 2, t0))
	p := jobSpec("alice", "retry", 3, t0.Add(time.Second))
	p.RetryOf, p.RetryIdx = plain.ID, []int{1, 4, 17}
	if j := mustCreate(t, s, p); j.RetryOf != plain.ID || !slices.Equal(j.RetryIdx, p.RetryIdx) {
		t.Fatalf("created retry = %+v, want RetryOf %s and RetryIdx %v", j, plain.ID, p.RetryIdx)
	}
	check := func(what string, j batchdriver.Job, wantOf string, wantIdx []int) {
		t.Helper()
		if j.RetryOf != wantOf || !slices.Equal(j.RetryIdx, wantIdx) {
			t.Errorf("%s: RetryOf %q RetryIdx %v, want %q %v", what, j.RetryOf, j.RetryIdx, wantOf, wantIdx)
		}
	}
	j, _ := getJob(t, s, "alice", p.ID)
	check("Get", j, plain.ID, p.RetryIdx)
	j, _ = getJob(t, s, "alice", plain.ID)
	check("Get of the plain job", j, "", nil)
	j, _, err := s.GetTarget(t.Context(), batchdriver.GetTargetParams{Caller: "alice", JobID: p.ID, Idx: 2})
	if err != nil {
		t.Fatal(err)
	}
	check("GetTarget", j, plain.ID, p.RetryIdx)
	jobs, err := s.List(t.Context(), batchdriver.ListParams{Caller: "alice", Limit: 10})
	if err != nil || len(jobs) != 2 {
		t.Fatalf("List = %d jobs, %v", len(jobs), err)
	}
	check("List", jobs[0], plain.ID, p.RetryIdx)
	// The same retry again is reused, lineage and all.
	again := p
	again.ID = p.ID + "-again"
	j, reused, err := s.Create(t.Context(), again)
	if err != nil || !reused || j.ID != p.ID {
		t.Fatalf("the same retry again = %s reused %v, %v; want %s reused", j.ID, reused, err, p.ID)
	}
	check("reused retry", j, plain.ID, p.RetryIdx)
	c := mustClaim(t, s, runnerA, t0.Add(2*time.Second))
	if c.Job.ID == p.ID {
		check("Claim", c.Job, plain.ID, p.RetryIdx)
	}
}

// storeTraceContext: a job's trace context is stored as given and read
// back by every read of the job, the claim included (the drain continues
// it, on whichever runner); a job without one reads the zero value, and a
// reuse keeps the first submit's.
func storeTraceContext(t *testing.T, s batchdriver.Store) {
	tc := batch.TraceContext{
		Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		State:  "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
	}
	plain := mustCreate(t, s, jobSpec("alice", "plain", 1, t0))
	p := jobSpec("alice", "traced", 2, t0.Add(time.Second))
	p.Trace = tc
	if j := mustCreate(t, s, p); j.Trace != tc {
		t.Fatalf("created job's Trace = %+v, want %+v", j.Trace, tc)
	}
	check := func(what string, j batchdriver.Job, want batch.TraceContext) {
		t.Helper()
		if j.Trace != want {
			t.Errorf("%s: Trace %+v, want %+v", what, j.Trace, want)
		}
	}
	j, _ := getJob(t, s, "alice", p.ID)
	check("Get", j, tc)
	j, _ = getJob(t, s, "alice", plain.ID)
	check("Get of the plain job", j, batch.TraceContext{})
	j, _, err := s.GetTarget(t.Context(), batchdriver.GetTargetParams{Caller: "alice", JobID: p.ID, Idx: 1})
	if err != nil {
		t.Fatal(err)
	}
	check("GetTarget", j, tc)
	jobs, err := s.List(t.Context(), batchdriver.ListParams{Caller: "alice", Limit: 10})
	if err != nil || len(jobs) != 2 {
		t.Fatalf("List = %d jobs, %v", len(jobs), err)
	}
	check("List", jobs[0], tc)
	check("List of the plain job", jobs[1], batch.TraceContext{})
	// A resubmit with another trace reuses the job and its first trace.
	again := p
	again.ID = p.ID + "-again"
	again.Trace = batch.TraceContext{Parent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"}
	j, reused, err := s.Create(t.Context(), again)
	if err != nil || !reused || j.ID != p.ID {
		t.Fatalf("the same list again = %s reused %v, %v; want %s reused", j.ID, reused, err, p.ID)
	}
	check("reused job", j, tc)
	// The claim hands the trace to whichever runner drains the job.
	for _, want := range []batch.TraceContext{{}, tc} {
		c := mustClaim(t, s, runnerA, t0.Add(2*time.Second))
		check("Claim of "+c.Job.ID, c.Job, want)
	}
}

func storeRoundTrip(t *testing.T, s batchdriver.Store) {
	p := jobSpec("alice", "a", 3, t0)
	j := mustCreate(t, s, p)
	if j.ID != p.ID || j.Status != batch.JobQueued || j.TargetsTotal != 3 || j.TargetsDone != 0 || j.Runner != "" {
		t.Fatalf("created job = %+v", j)
	}
	got, ts, err := s.Get(t.Context(), batchdriver.GetParams{Caller: "alice", JobID: p.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got.Caller != p.Caller {
		t.Errorf("caller = %+v, want %+v", got.Caller, p.Caller)
	}
	if got.IdemKey != p.IdemKey || !got.CreatedAt.Equal(t0) || !got.Lease.Equal(t0) || got.Bytes != 0 {
		t.Errorf("job = %+v", got)
	}
	if len(ts) != 3 {
		t.Fatalf("got %d targets, want 3", len(ts))
	}
	for i, tr := range ts {
		if tr.Idx != i || tr.Status != batch.TargetPending || tr.Result != nil || tr.Error != "" {
			t.Errorf("target %d = %+v", i, tr)
		}
		if tr.Target.URL != p.Targets[i].URL || !bytes.Equal(tr.Target.Options, p.Targets[i].Options) {
			t.Errorf("target %d = %s %s, want %s %s (options byte for byte)", i,
				tr.Target.URL, tr.Target.Options, p.Targets[i].URL, p.Targets[i].Options)
		}
	}
	if string(ts[0].Target.Options) != string(suiteOptions) {
		t.Errorf("target 0 options = %s, want %s", ts[0].Target.Options, suiteOptions)
	}
}

func storeReuseWithinLease(t *testing.T, s batchdriver.Store) {
	lim := suiteLimits
	lim.TTL = time.Hour
	p := withLimits(jobSpec("alice", "a", 2, t0), lim)
	first := mustCreate(t, s, p)

	again := p
	at := t0.Add(30 * time.Minute)
	again.ID, again.Now = "other-id", nowAt(at)
	j, reused, err := s.Create(t.Context(), again)
	if err != nil || !reused || j.ID != first.ID {
		t.Fatalf("resubmit = %s, %v, %v; want %s reused", j.ID, reused, err, first.ID)
	}
	got, _ := getJob(t, s, "alice", first.ID)
	if !got.Lease.Equal(at) {
		t.Errorf("lease = %v, want bumped to %v", got.Lease, at)
	}
	// Finished (done) jobs are reused too while their lease is unexpired.
	claimJob(t, s, runnerA, first.ID, at)
	finish(t, s, runnerA, first.ID, okFinish(0, "a"), at)
	finish(t, s, runnerA, first.ID, okFinish(1, "b"), at)
	again.Now = nowAt(at.Add(59 * time.Minute))
	if j, reused, err = s.Create(t.Context(), again); err != nil || !reused || j.Status != batch.JobDone {
		t.Fatalf("resubmit of done job = %+v, %v, %v; want reused done", j, reused, err)
	}
	// After the lease expires, the same list makes a new job.
	again.ID, again.Now = "third-id", nowAt(again.Now.Add(time.Hour+time.Second))
	if j, reused, err = s.Create(t.Context(), again); err != nil || reused || j.ID != "third-id" {
		t.Fatalf("resubmit after expiry = %s, %v, %v; want new job third-id", j.ID, reused, err)
	}
}

func storeReuseScoped(t *testing.T, s batchdriver.Store) {
	p := jobSpec("alice", "a", 1, t0)
	mustCreate(t, s, p)
	bob := p
	bob.ID, bob.Caller = "bob-job", batch.Caller{Name: "bob"}
	j, reused, err := s.Create(t.Context(), bob)
	if err != nil || reused || j.ID != "bob-job" {
		t.Fatalf("other caller, same key = %s, %v, %v; want a new job", j.ID, reused, err)
	}
}

func storeNoReuseAfterCancel(t *testing.T, s batchdriver.Store) {
	p := jobSpec("alice", "a", 1, t0)
	mustCreate(t, s, p)
	if err := s.Cancel(t.Context(), batchdriver.CancelParams{Caller: "alice", JobID: p.ID, Now: nowAt(t0)}); err != nil {
		t.Fatal(err)
	}
	retry := p
	retry.ID = "retry-after-cancel"
	mustCreate(t, s, retry)
	if n, err := s.Reap(t.Context(), batchdriver.ReapParams{AllLive: true, Reason: "restart", Now: nowAt(t0)}); err != nil || n != 1 {
		t.Fatalf("Reap = %d, %v; want 1", n, err)
	}
	retry.ID = "retry-after-restart"
	mustCreate(t, s, retry)
}

func storeCaps(t *testing.T, s batchdriver.Store) {
	lim := batchdriver.Limits{JobsPerCaller: 2, JobsTotal: 3, TTL: time.Hour}
	mustCreate(t, s, withLimits(jobSpec("alice", "1", 1, t0), lim))
	mustCreate(t, s, withLimits(jobSpec("alice", "2", 1, t0.Add(1)), lim))
	_, _, err := s.Create(t.Context(), withLimits(jobSpec("alice", "3", 1, t0.Add(2)), lim))
	wantErr(t, "third alice job", err, batch.ErrCallerBusy)
	mustCreate(t, s, withLimits(jobSpec("bob", "1", 1, t0.Add(3)), lim))
	_, _, err = s.Create(t.Context(), withLimits(jobSpec("carol", "1", 1, t0.Add(4)), lim))
	wantErr(t, "fourth live job", err, batch.ErrBusy)
	// A running job counts; a finished one no longer does.
	c := mustClaim(t, s, runnerA, t0.Add(5))
	_, _, err = s.Create(t.Context(), withLimits(jobSpec("carol", "1", 1, t0.Add(5)), lim))
	wantErr(t, "with one of three running", err, batch.ErrBusy)
	if err := s.Cancel(t.Context(), batchdriver.CancelParams{Caller: c.Job.Caller.Name, JobID: c.Job.ID, Now: nowAt(t0.Add(5))}); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, withLimits(jobSpec("carol", "1", 1, t0.Add(6)), lim))
}

func storeCapsAfterReuse(t *testing.T, s batchdriver.Store) {
	lim := batchdriver.Limits{JobsPerCaller: 1, JobsTotal: 1, TTL: time.Hour}
	p := withLimits(jobSpec("alice", "1", 1, t0), lim)
	mustCreate(t, s, p)
	again := p
	again.ID = "again"
	j, reused, err := s.Create(t.Context(), again)
	if err != nil || !reused || j.ID != p.ID {
		t.Fatalf("resubmit at the caps = %s, %v, %v; want reuse of %s", j.ID, reused, err, p.ID)
	}
}

func storeConcurrentIdentical(t *testing.T, s batchdriver.Store) {
	const rounds = 200
	for round := range rounds {
		p := jobSpec(fmt.Sprintf("caller%d", round), "same", 2, t0)
		var wg sync.WaitGroup
		var mu sync.Mutex
		ids := map[string]int{}
		created := 0
		start := make(chan struct{})
		for i := range 2 {
			wg.Go(func() {
				<-start
				req := p
				req.ID = fmt.Sprintf("%s-%d", p.ID, i)
				j, reused, err := s.Create(context.Background(), req)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("round %d: Create: %v", round, err)
					return
				}
				ids[j.ID]++
				if !reused {
					created++
				}
			})
		}
		close(start)
		wg.Wait()
		if len(ids) != 1 || created != 1 {
			t.Fatalf("round %d: ids %v, %d created; want one job", round, ids, created)
		}
	}
}

func storeConcurrentCallers(t *testing.T, s batchdriver.Store) {
	lim := batchdriver.Limits{JobsPerCaller: 1, JobsTotal: 8, TTL: time.Hour}
	const callers = 50
	var wg sync.WaitGroup
	var mu sync.Mutex
	created, busy := 0, 0
	start := make(chan struct{})
	for i := range callers {
		wg.Go(func() {
			<-start
			_, _, err := s.Create(context.Background(), withLimits(jobSpec(fmt.Sprintf("c%d", i), "k", 1, t0), lim))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created++
			case errors.Is(err, batch.ErrBusy):
				busy++
			default:
				t.Errorf("caller %d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if created != 8 || busy != callers-8 {
		t.Fatalf("created %d, busy %d; want 8 and %d", created, busy, callers-8)
	}
	if st := mustStats(t, s); st.Queued != 8 {
		t.Fatalf("queued = %d, want 8", st.Queued)
	}
}
