package batchstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// Group commit (see writer.go): target writes of jobs draining at once
// share a commit, and each is answered only after that commit.

// groupResult is target idx's result in job j: a few KiB, its own bytes.
func groupResult(j, idx int) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("job %d target %d;", j, idx)), 200)
}

// Four jobs drain at once, each in its own goroutine; the moment
// FinishTarget answers, a read on another connection must see the target
// stored, with its result, and the next one started. A writer that
// answered a write before the COMMIT that holds it (or answered it with
// another group's commit) fails this: the reader's snapshot would still
// show the target running. The test also checks that the writes did share
// commits, or it would not be testing groups.
func TestStore_GroupAnswersAfterCommit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "told.db")
	s, err := Open(ctx, path, Config{Synchronous: SyncFull})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const jobs, targets = 4, 24
	for j := range jobs {
		if _, _, err := s.Create(ctx, newJob(fmt.Sprintf("told-%d", j), "alice", targets, time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	held := make([]batchdriver.Claimed, jobs)
	for j := range held {
		c, ok, err := s.Claim(ctx, batchdriver.ClaimParams{Runner: "r"})
		if err != nil || !ok {
			t.Fatalf("claim %d: %v, %v", j, ok, err)
		}
		held[j] = c
	}
	before := walCommits(t, path)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range held {
		j, _ := strconv.Atoi(strings.TrimPrefix(c.Job.ID, "told-"))
		wg.Go(func() {
			<-start
			for next := c.Next; next >= 0; {
				fin := batchdriver.TargetFinish{Idx: next, Status: batchdriver.TargetDone, Outcome: batchdriver.OutcomeOK, Result: groupResult(j, next)}
				st, err := s.FinishTarget(ctx, batchdriver.FinishParams{JobID: c.Job.ID, Runner: "r", Target: fin})
				if err != nil {
					t.Errorf("%s/%d: %v", c.Job.ID, next, err)
					return
				}
				// Told "stored": the target must be committed by now.
				_, trs, err := s.Get(ctx, batchdriver.GetParams{Caller: "alice", JobID: c.Job.ID, Results: true})
				if err != nil {
					t.Errorf("%s/%d: read after the answer: %v", c.Job.ID, next, err)
					return
				}
				if tr := trs[next]; tr.Status != batchdriver.TargetDone || !bytes.Equal(tr.Result, fin.Result) {
					t.Errorf("%s/%d: answered, but a reader sees status %s and %d result bytes: answered before its commit",
						c.Job.ID, next, tr.Status, len(tr.Result))
					return
				}
				if st.Next >= 0 && trs[st.Next].Status != batchdriver.TargetRunning {
					t.Errorf("%s/%d: answered with next %d, but a reader sees it %s", c.Job.ID, next, st.Next, trs[st.Next].Status)
					return
				}
				next = st.Next
			}
		})
	}
	close(start)
	wg.Wait()
	commits := walCommits(t, path) - before
	t.Logf("%d target writes in %d commits", jobs*targets, commits)
	if commits >= jobs*targets {
		t.Errorf("%d commits for %d target writes of %d jobs draining at once: no write shared a commit", commits, jobs*targets, jobs)
	}
}

// walCommits counts the commits in path's WAL. The test's writes stay
// far below the checkpoint that would reset it.
func walCommits(t *testing.T, path string) int {
	t.Helper()
	n := 0
	for _, f := range walFrames(t, path) {
		if f.commit {
			n++
		}
	}
	return n
}

// The same through the runner: four workers drain four jobs, and a worker
// fetches target i+1 only after the store told it target i is stored, so
// at that fetch a reader must see target i committed.
func TestRunner_WorkerToldStoredAfterCommit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "runner.db"), Config{Synchronous: SyncFull})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const jobs, targets = 4, 16
	var mu sync.Mutex
	ids := map[int]string{} // job number → id
	submitted := make(chan struct{})
	caller := batchdriver.Caller{Name: "told"}
	content := func(j, i int) string { return strings.Repeat(fmt.Sprintf("page %d/%d ", j, i), 100) }
	var checked sync.WaitGroup
	checked.Add(jobs * (targets - 1))
	fetch := func(ctx context.Context, _ batchdriver.Caller, tg batchdriver.Target) (batch.Result, error) {
		<-submitted
		var j, i int
		if _, err := fmt.Sscanf(tg.URL, "https://told.example/%d/%d", &j, &i); err != nil {
			return batch.Result{}, err
		}
		if i > 0 {
			defer checked.Done()
			mu.Lock()
			id := ids[j]
			mu.Unlock()
			_, tr, err := s.GetTarget(ctx, batchdriver.GetTargetParams{Caller: caller.Name, JobID: id, Idx: i - 1})
			if err != nil {
				t.Errorf("job %d target %d: %v", j, i-1, err)
			} else if tr.Status != batchdriver.TargetDone || !bytes.Contains(tr.Result, []byte(content(j, i-1))) {
				t.Errorf("job %d: the worker went on to target %d, but a reader sees target %d %s with %d result bytes: told stored before the commit",
					j, i, i-1, tr.Status, len(tr.Result))
			}
		}
		return batch.Result{Content: content(j, i)}, nil
	}
	r, err := batch.New(batch.Config{Store: s, Fetch: fetch, Workers: jobs, JobsPerCaller: jobs, JobsTotal: jobs, TargetsPerJob: targets})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.WithoutCancel(ctx))
	for j := range jobs {
		ts := make([]batchdriver.Target, targets)
		for i := range ts {
			ts[i].URL = fmt.Sprintf("https://told.example/%d/%d", j, i)
		}
		job, _, err := r.Submit(ctx, caller, ts)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		ids[j] = job.ID
		mu.Unlock()
	}
	close(submitted)
	all := make(chan struct{})
	go func() { checked.Wait(); close(all) }()
	select { // every fetch after the first of each job checked its predecessor
	case <-all:
	case <-time.After(2 * time.Minute): // a bound for a broken drain, not a measurement
		t.Fatal("the drain did not reach every target")
	}
}

// One failing write of a group fails alone: five drain writes queue behind
// a write that holds the writer, so that they form one group, and of them
// a stray runner's (fenced out), a holder's write for a target that is not
// in flight (it stores a body before it finds out), and one for a job that
// does not exist fail, each with its own error and without a trace, while
// the other two are stored and answered, all in one commit.
func TestStore_GroupFailsOneWriteAlone(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "alone.db")
	s, err := Open(ctx, path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	for i, n := range []int{3, 1, 3, 5} { // a, b (one target: its write ends the job), c, d
		id := string(rune('a' + i))
		if _, _, err := s.Create(ctx, newJob(id, "alice", n, now.Add(time.Duration(i)))); err != nil {
			t.Fatal(err)
		}
		if c, ok, err := s.Claim(ctx, batchdriver.ClaimParams{Runner: "r", Now: &now}); err != nil || !ok || c.Job.ID != id {
			t.Fatalf("claim = %s, %v, %v; want %s", c.Job.ID, ok, err, id)
		}
	}
	bodies := countRows(t, s, `SELECT count(*) FROM batch_body`)
	hold, running := make(chan struct{}), make(chan struct{})
	blocked := make(chan error, 1)
	go func() {
		blocked <- s.write(ctx, "blocker", func(conn *sqlite.Conn) error {
			close(running)
			<-hold
			return sqlitex.Execute(conn, qHeartbeat, &sqlitex.ExecOptions{Args: []any{"blocker", now.UnixNano()}})
		})
	}()
	<-running
	before := walCommits(t, path)
	finish := func(job, runner string, idx int) batchdriver.FinishParams {
		return batchdriver.FinishParams{JobID: job, Runner: runner, Now: &now, Target: batchdriver.TargetFinish{
			Idx: idx, Status: batchdriver.TargetDone, Outcome: batchdriver.OutcomeOK, Result: []byte(`{"content":"` + job + `"}`)}}
	}
	writes := []batchdriver.FinishParams{
		finish("a", "r", 0),
		finish("b", "r", 0),
		finish("c", "intruder", 0), // not the holder
		finish("d", "r", 3),        // target 0 is in flight, not 3
		finish("e", "r", 0),        // no such job
	}
	steps := make([]batchdriver.Step, len(writes))
	errs := make([]error, len(writes))
	var wg sync.WaitGroup
	for i, p := range writes {
		wg.Go(func() { steps[i], errs[i] = s.FinishTarget(ctx, p) })
	}
	for s.handing.Load() < int64(len(writes)) { // all five wait for the writer
		time.Sleep(time.Millisecond)
	}
	close(hold)
	wg.Wait()
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || steps[0] != (batchdriver.Step{Status: batchdriver.JobRunning, Next: 1}) {
		t.Errorf("a: %+v, %v; want running, next 1", steps[0], errs[0])
	}
	if errs[1] != nil || steps[1] != (batchdriver.Step{Status: batchdriver.JobDone, Next: -1}) {
		t.Errorf("b: %+v, %v; want done, next -1", steps[1], errs[1])
	}
	if !errors.Is(errs[2], batchdriver.ErrNotHeld) || !errors.Is(errs[3], batchdriver.ErrNotHeld) || !errors.Is(errs[4], batchdriver.ErrNotFound) {
		t.Errorf("c, d, e: %v, %v, %v; want not held, not held, not found", errs[2], errs[3], errs[4])
	}
	if n := walCommits(t, path) - before; n != 2 {
		t.Errorf("%d commits for the blocker and the five writes, want 2: the test needs them in one group", n)
	}
	if n := countRows(t, s, `SELECT count(*) FROM batch_body`) - bodies; n != 2 {
		t.Errorf("%d result bodies stored, want 2 (a's and b's): a failed write left its body", n)
	}
	want := map[string][]batchdriver.TargetStatus{
		"a": {batchdriver.TargetDone, batchdriver.TargetRunning, batchdriver.TargetPending},
		"b": {batchdriver.TargetDone},
		"c": {batchdriver.TargetRunning, batchdriver.TargetPending, batchdriver.TargetPending},
		"d": {batchdriver.TargetRunning, batchdriver.TargetPending, batchdriver.TargetPending, batchdriver.TargetPending, batchdriver.TargetPending},
	}
	for id, st := range want {
		_, trs, err := s.Get(ctx, batchdriver.GetParams{Caller: "alice", JobID: id})
		if err != nil {
			t.Fatal(err)
		}
		for i, tr := range trs {
			if tr.Status != st[i] {
				t.Errorf("job %s target %d is %s, want %s", id, i, tr.Status, st[i])
			}
		}
	}
	// c and d are still held by r: their runner goes on as if nothing happened.
	for _, id := range []string{"c", "d"} {
		if _, err := s.FinishTarget(ctx, finish(id, "r", 0)); err != nil {
			t.Errorf("%s: the holder's next write: %v", id, err)
		}
	}
}

// A group waits for the write lock (held here by another connection, as a
// host's could) until every write in it has given up: the first write's
// context ending fails that write alone, and the other is stored once the
// lock is free. Before, the wait ran under the first write's context, and
// its end failed the whole group.
func TestStore_GroupWaitOutlivesOneWrite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "wait.db")
	s, err := Open(ctx, path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	other, err := sqlite.OpenConn(path, sqlite.OpenReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := sqlitex.Execute(other, "BEGIN IMMEDIATE", nil); err != nil {
		t.Fatal(err)
	}
	beat := func(name string) func(*sqlite.Conn) error {
		return func(conn *sqlite.Conn) error {
			return sqlitex.Execute(conn, qHeartbeat, &sqlitex.ExecOptions{Args: []any{name, time.Now().UnixNano()}})
		}
	}
	write := func(ctx context.Context, name string) <-chan error {
		done := make(chan error, 1)
		go func() { done <- s.write(ctx, name, beat(name)) }()
		return done
	}
	// w0 holds the writer in its wait for the lock while w1 and w2 queue
	// behind it; its end lets them form the next group.
	ctx0, cancel0 := context.WithCancel(ctx)
	done0 := write(ctx0, "w0")
	for s.handing.Load() != 0 || len(done0) != 0 { // taken by the writer
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	ctx1, cancel1 := context.WithCancel(ctx)
	done1, done2 := write(ctx1, "w1"), write(ctx, "w2")
	for s.handing.Load() != 2 {
		time.Sleep(time.Millisecond)
	}
	cancel0()
	if err := <-done0; !errors.Is(err, context.Canceled) {
		t.Fatalf("w0 = %v, want its context's end", err)
	}
	for s.handing.Load() != 0 { // w1 and w2 taken, in one group, waiting for the lock
		time.Sleep(time.Millisecond)
	}
	cancel1()
	select {
	case err := <-done2:
		t.Fatalf("w2 answered (%v) while the lock was still held: w1's end cut the group's wait", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := sqlitex.Execute(other, "COMMIT", nil); err != nil {
		t.Fatal(err)
	}
	if err := <-done1; !errors.Is(err, context.Canceled) {
		t.Errorf("w1 = %v, want its context's end", err)
	}
	if err := <-done2; err != nil {
		t.Errorf("w2 = %v, want it stored", err)
	}
	if n := countRows(t, s, `SELECT count(*) FROM batch_runner WHERE id IN ('w0', 'w1', 'w2')`); n != 1 {
		t.Errorf("%d of w0, w1, w2 stored, want w2's alone", n)
	}
}
