package batchdrivertest

import (
	"slices"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// handBackCases: Reap with HandBack queues a held job again under its id
// instead of failing it (Config.Resume), fenced from its old runner.
var handBackCases = map[string]func(*testing.T, batchdriver.Store){
	"HandBackCountsAttempts":  storeHandBackAttempts,
	"HandBackHeldJobs":        storeHandBack,
	"HandBackLastTarget":      storeHandBackLast,
	"HandBackLeavesQueued":    storeHandBackLeavesQueued,
	"HandBackRepeatInFlight":  storeHandBackRepeat,
	"HandBackStaleRunnerJobs": storeHandBackStale,
}

const reasonInterrupted = "interrupted"

// wantHandedBack checks a job handed back with its target inFlight
// interrupted (or, repeat, pending again): queued, released, its finished
// targets intact and the rest pending.
func wantHandedBack(t *testing.T, s batchdriver.Store, caller, id string, inFlight int, repeat bool) {
	t.Helper()
	j, ts := getJob(t, s, caller, id)
	done := inFlight + 1
	if repeat {
		done = inFlight
	}
	if j.ID != id || j.Status != batch.JobQueued || j.Runner != "" || j.Error != "" || j.TargetsDone != done || !j.FinishedAt.IsZero() {
		t.Fatalf("handed-back job = %+v, want queued, released, %d done", j, done)
	}
	for i, tr := range ts {
		switch {
		case i < inFlight:
			if tr.Status != batch.TargetDone || string(tr.Result) != `{"content":"kept"}` {
				t.Errorf("finished target %d = %+v, want kept", i, tr)
			}
		case i == inFlight && !repeat:
			if tr.Status != batch.TargetFailed || tr.Error != reasonInterrupted || tr.Outcome != batch.OutcomeInterrupted {
				t.Errorf("in-flight target %d = %+v, want failed interrupted", i, tr)
			}
		default:
			if tr.Status != batch.TargetPending {
				t.Errorf("target %d = %s, want pending", i, tr.Status)
			}
		}
	}
}

// storeHandBack: the jobs a runner holds go back to the queue under their
// ids: the target in flight interrupted, finished targets intact, pending
// ones pending; the old runner's writes are refused; another runner's
// claim continues each from its next pending target, and the byte count
// stays exact throughout.
func storeHandBack(t *testing.T, s batchdriver.Store) {
	mine := heldJob(t, s, runnerA, "alice", 4, 1, t0)
	mineCancelled := heldJob(t, s, runnerA, "erin", 2, 0, t0.Add(time.Second))
	cancel(t, s, "erin", mineCancelled, t0)
	theirs := heldJob(t, s, runnerB, "bob", 2, 0, t0.Add(2*time.Second))
	theirsJ, theirsTs := getJob(t, s, "bob", theirs)
	before := mustStats(t, s)
	now := t0.Add(time.Minute)
	if n := reap(t, s, batchdriver.ReapParams{Runner: runnerA, HandBack: true, Reason: reasonInterrupted, Now: nowAt(now)}); n != 1 {
		t.Fatalf("Reap(HandBack) = %d, want 1 (the cancelled job is not live)", n)
	}
	wantHandedBack(t, s, "alice", mine, 1, false)
	cj, cts := getJob(t, s, "erin", mineCancelled)
	if cj.Status != batch.JobCancelled || cj.Runner != "" || cts[0].Outcome != batch.OutcomeInterrupted || cts[1].Status != batch.TargetPending {
		t.Errorf("cancelled job handed back = %+v %v, want cancelled, released, target 0 interrupted", cj, statuses(cts))
	}
	wantUntouched(t, s, "bob", theirs, theirsJ, theirsTs)
	after := mustStats(t, s)
	if after.Queued != before.Queued+1 || after.Running != before.Running-1 ||
		after.Bytes != before.Bytes+2*int64(len(reasonInterrupted)) {
		t.Errorf("stats after the hand back = %+v, before = %+v", after, before)
	}
	// Fenced: the old holder's writes change nothing, whichever target
	// they name.
	for _, idx := range []int{1, 2} {
		_, err := s.FinishTarget(t.Context(), batchdriver.FinishParams{JobID: mine, Runner: runnerA, Target: okFinish(idx, "late"), Now: nowAt(now)})
		wantErr(t, "the old holder's write", err, batchdriver.ErrNotHeld)
	}
	wantHandedBack(t, s, "alice", mine, 1, false)

	// Another runner continues the same job from target 2.
	c := claimJob(t, s, runnerC, mine, now)
	if c.Job.ID != mine || c.Next != 2 || c.Targets[2].Status != batch.TargetRunning {
		t.Fatalf("claim of the handed-back job = id %s, next %d, %v; want %s from target 2", c.Job.ID, c.Next, statuses(c.Targets), mine)
	}
	if st := mustStats(t, s); st.Bytes != after.Bytes {
		t.Errorf("bytes after the claim = %d, want %d (counted once)", st.Bytes, after.Bytes)
	}
	if step := finish(t, s, runnerC, mine, okFinish(2, "kept"), now); step.Next != 3 {
		t.Fatalf("step after target 2 = %+v, want next 3", step)
	}
	_, err := s.FinishTarget(t.Context(), batchdriver.FinishParams{JobID: mine, Runner: runnerA, Target: okFinish(3, "late"), Now: nowAt(now)})
	wantErr(t, "the old holder's write after the new claim", err, batchdriver.ErrNotHeld)
	if step := finish(t, s, runnerC, mine, okFinish(3, "kept"), now); step.Next != -1 || step.Status != batch.JobPartial {
		t.Fatalf("last step = %+v, want partial", step)
	}
	j, ts := getJob(t, s, "alice", mine)
	wantStatuses(t, "finished job", ts, batch.TargetDone, batch.TargetFailed, batch.TargetDone, batch.TargetDone)
	if j.TargetsDone != 4 || j.Runner != "" {
		t.Errorf("finished job = %+v", j)
	}
	want := after.Bytes + 2*int64(len(`{"content":"kept"}`))
	if st := mustStats(t, s); st.Bytes != want || st.Queued != before.Queued {
		t.Errorf("stats at the end = %+v, want %d bytes", st, want)
	}
}

// storeHandBackRepeat: with RepeatInFlight the target in flight goes back
// to pending, and the next claim starts it again.
func storeHandBackRepeat(t *testing.T, s batchdriver.Store) {
	id := heldJob(t, s, runnerA, "alice", 3, 1, t0)
	before := mustStats(t, s)
	now := t0.Add(time.Minute)
	if n := reap(t, s, batchdriver.ReapParams{Runner: runnerA, HandBack: true, RepeatInFlight: true, Reason: reasonInterrupted, Now: nowAt(now)}); n != 1 {
		t.Fatalf("Reap(HandBack, RepeatInFlight) = %d, want 1", n)
	}
	wantHandedBack(t, s, "alice", id, 1, true)
	if st := mustStats(t, s); st.Bytes != before.Bytes {
		t.Errorf("bytes = %d, want %d", st.Bytes, before.Bytes)
	}
	_, err := s.FinishTarget(t.Context(), batchdriver.FinishParams{JobID: id, Runner: runnerA, Target: okFinish(1, "late"), Now: nowAt(now)})
	wantErr(t, "the old holder's write", err, batchdriver.ErrNotHeld)
	c := claimJob(t, s, runnerB, id, now)
	if c.Next != 1 {
		t.Fatalf("claim after a repeat starts target %d, want 1", c.Next)
	}
	finish(t, s, runnerB, id, okFinish(1, "kept"), now)
	if step := finish(t, s, runnerB, id, okFinish(2, "kept"), now); step.Status != batch.JobDone {
		t.Fatalf("last step = %+v, want done", step)
	}
}

// storeHandBackLast: a job whose interrupted target was its last has
// nothing left to hand on: it ends by its targets, released.
func storeHandBackLast(t *testing.T, s batchdriver.Store) {
	id := heldJob(t, s, runnerA, "alice", 2, 1, t0)
	now := t0.Add(time.Minute)
	if n := reap(t, s, batchdriver.ReapParams{Runner: runnerA, HandBack: true, Reason: reasonInterrupted, Now: nowAt(now)}); n != 1 {
		t.Fatalf("Reap(HandBack) = %d, want 1", n)
	}
	j, ts := getJob(t, s, "alice", id)
	if j.Status != batch.JobPartial || j.Runner != "" || j.Error != "" || j.TargetsDone != 2 || j.FinishedAt.IsZero() {
		t.Fatalf("job = %+v, want partial, released, finished", j)
	}
	if ts[1].Outcome != batch.OutcomeInterrupted {
		t.Errorf("last target = %+v, want interrupted", ts[1])
	}
	if st := mustStats(t, s); st.Queued != 0 || st.Running != 0 {
		t.Errorf("stats = %+v, want nothing live", st)
	}
}

// storeHandBackLeavesQueued: on a store that serves one process the start
// hands back every held job (AllLive) and leaves queued jobs queued.
func storeHandBackLeavesQueued(t *testing.T, s batchdriver.Store) {
	held := heldJob(t, s, runnerA, "alice", 3, 1, t0)
	queued := jobSpec("bob", "q", 2, t0.Add(time.Second))
	mustCreate(t, s, queued)
	qj, qts := getJob(t, s, "bob", queued.ID)
	if n := reap(t, s, batchdriver.ReapParams{AllLive: true, HandBack: true, Reason: reasonInterrupted, Now: nowAt(t0.Add(time.Hour))}); n != 1 {
		t.Fatalf("Reap(AllLive, HandBack) = %d, want 1", n)
	}
	wantHandedBack(t, s, "alice", held, 1, false)
	wantUntouched(t, s, "bob", queued.ID, qj, qts)
	// The handed-back job was created first: it is claimed first, at its
	// next pending target.
	if c := mustClaim(t, s, runnerB, t0.Add(time.Hour)); c.Job.ID != held || c.Next != 2 {
		t.Fatalf("claim = %s at %d, want %s at 2", c.Job.ID, c.Next, held)
	}
}

// storeHandBackStale: the jobs of a runner whose heartbeat is stale are
// handed back, a live runner's are not.
func storeHandBackStale(t *testing.T, s batchdriver.Store) {
	stale := heldJob(t, s, runnerA, "alice", 3, 0, t0)
	live := heldJob(t, s, runnerB, "bob", 2, 0, t0)
	heartbeat(t, s, runnerB, t0.Add(time.Hour))
	lj, lts := getJob(t, s, "bob", live)
	now := t0.Add(time.Hour)
	if n := reap(t, s, batchdriver.ReapParams{StaleAfter: time.Minute, HandBack: true, Reason: reasonInterrupted, Now: nowAt(now)}); n != 1 {
		t.Fatalf("Reap(StaleAfter, HandBack) = %d, want 1", n)
	}
	wantHandedBack(t, s, "alice", stale, 0, false)
	wantUntouched(t, s, "bob", live, lj, lts)
	_, err := s.FinishTarget(t.Context(), batchdriver.FinishParams{JobID: stale, Runner: runnerA, Target: okFinish(0, "late"), Now: nowAt(now)})
	wantErr(t, "the stale runner's write", err, batchdriver.ErrNotHeld)
}

// attemptsOf are the Attempts of ts, in idx order.
func attemptsOf(ts []batchdriver.TargetRecord) []int {
	var out []int
	for _, t := range ts {
		out = append(out, t.Attempts)
	}
	return out
}

// storeHandBackAttempts: each hand-back that queues a job again counts one
// on its HandedOn, and one that puts a target in flight back to pending
// counts one more attempt of it, unless the caller names the job in
// Unfetched; a job that ends at its hand-back is not handed on.
func storeHandBackAttempts(t *testing.T, s batchdriver.Store) {
	id := heldJob(t, s, runnerA, "alice", 3, 1, t0)
	if j, ts := getJob(t, s, "alice", id); j.HandedOn != 0 || !slices.Equal(attemptsOf(ts), []int{1, 1, 1}) {
		t.Fatalf("before any hand-back: handed on %d, attempts %v; want 0, [1 1 1]", j.HandedOn, attemptsOf(ts))
	}
	now := t0.Add(time.Minute)
	reap(t, s, batchdriver.ReapParams{Runner: runnerA, HandBack: true, RepeatInFlight: true, Reason: reasonInterrupted, Now: nowAt(now)})
	if j, ts := getJob(t, s, "alice", id); j.HandedOn != 1 || !slices.Equal(attemptsOf(ts), []int{1, 2, 1}) {
		t.Fatalf("after a repeat: handed on %d, attempts %v; want 1, [1 2 1]", j.HandedOn, attemptsOf(ts))
	}
	// Handed back again, by a runner that knows it never fetched target 1
	// this time: no attempt counted, one more hand-on.
	claimJob(t, s, runnerB, id, now)
	reap(t, s, batchdriver.ReapParams{Runner: runnerB, HandBack: true, RepeatInFlight: true, Unfetched: []string{"other", id},
		Reason: reasonInterrupted, Now: nowAt(now)})
	if j, ts := getJob(t, s, "alice", id); j.HandedOn != 2 || !slices.Equal(attemptsOf(ts), []int{1, 2, 1}) {
		t.Fatalf("after an unfetched hand-back: handed on %d, attempts %v; want 2, [1 2 1]", j.HandedOn, attemptsOf(ts))
	}
	claimJob(t, s, runnerC, id, now)
	finish(t, s, runnerC, id, okFinish(1, "kept"), now)
	finish(t, s, runnerC, id, okFinish(2, "kept"), now)
	j, ts := getJob(t, s, "alice", id)
	if j.Status != batch.JobDone || j.HandedOn != 2 || !slices.Equal(attemptsOf(ts), []int{1, 2, 1}) {
		t.Fatalf("finished: %s, handed on %d, attempts %v; want done, 2, [1 2 1]", j.Status, j.HandedOn, attemptsOf(ts))
	}
	if _, tr, err := s.GetTarget(t.Context(), batchdriver.GetTargetParams{Caller: "alice", JobID: id, Idx: 1}); err != nil || tr.Attempts != 2 {
		t.Fatalf("GetTarget(1) = attempts %d, %v; want 2", tr.Attempts, err)
	}
	if list, err := s.List(t.Context(), batchdriver.ListParams{Caller: "alice", Limit: 10}); err != nil || len(list) != 1 || list[0].HandedOn != 2 {
		t.Fatalf("List = %+v, %v; want the job handed on twice", list, err)
	}

	// Without RepeatInFlight the target in flight is interrupted, fetched
	// once; a job whose interrupted target was its last ends, not handed
	// on.
	onward := heldJob(t, s, runnerA, "bob", 2, 0, t0.Add(time.Second))
	last := heldJob(t, s, runnerB, "carol", 1, 0, t0.Add(2*time.Second))
	reap(t, s, batchdriver.ReapParams{Runner: runnerA, HandBack: true, Reason: reasonInterrupted, Now: nowAt(now)})
	reap(t, s, batchdriver.ReapParams{Runner: runnerB, HandBack: true, RepeatInFlight: true, Reason: reasonInterrupted, Now: nowAt(now)})
	if j, ts := getJob(t, s, "bob", onward); j.HandedOn != 1 || !slices.Equal(attemptsOf(ts), []int{1, 1}) {
		t.Errorf("interrupted: handed on %d, attempts %v; want 1, [1 1]", j.HandedOn, attemptsOf(ts))
	}
	if j, ts := getJob(t, s, "carol", last); j.Status != batch.JobQueued || j.HandedOn != 1 || !slices.Equal(attemptsOf(ts), []int{2}) {
		t.Errorf("repeated last target: %s, handed on %d, attempts %v; want queued, 1, [2]", j.Status, j.HandedOn, attemptsOf(ts))
	}
}
