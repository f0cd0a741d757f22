package batchtest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
)

// requireShared skips a cluster case on a store that serves one process.
func requireShared(t *testing.T, s batch.Store) {
	t.Helper()
	if !s.Capabilities().Shared {
		t.Skip("a cluster case: the store serves one process (Capabilities.Shared is false)")
	}
}

// t0 is the instant the suites' fake time starts from.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// suiteLimits are generous caps, so that tests not about caps never hit one.
var suiteLimits = batch.Limits{JobsPerCaller: 100, JobsTotal: 1000, TTL: 24 * time.Hour}

// The runner ids the store cases drain with.
const (
	runnerA = "runner-a"
	runnerB = "runner-b"
)

// jobSpec builds a job for caller with n targets, created at now.
func jobSpec(caller, key string, n int, now time.Time) batch.CreateParams {
	ctx := true
	ts := Targets(caller+"-"+key, n)
	if n > 0 {
		ts[0].Mode = batch.ModeClean
		ts[0].Question = "what?"
		ts[0].Context = &ctx
		ts[0].Recover = true
	}
	return batch.CreateParams{
		ID:      fmt.Sprintf("%s-%s-%d", caller, key, now.UnixNano()),
		Caller:  batch.Caller{Name: caller, Class: "class-" + caller, Restricted: caller == "restricted"},
		IdemKey: batch.IdemKey(caller, ts),
		Targets: ts,
		Limits:  suiteLimits,
		Now:     nowAt(now),
	}
}

// withLimits returns p with other limits.
func withLimits(p batch.CreateParams, lim batch.Limits) batch.CreateParams {
	p.Limits = lim
	return p
}

func mustCreate(t *testing.T, s batch.Store, p batch.CreateParams) batch.Job {
	t.Helper()
	j, reused, err := s.Create(t.Context(), p)
	if err != nil {
		t.Fatalf("Create(%s): %v", p.ID, err)
	}
	if reused {
		t.Fatalf("Create(%s): reused %s, want a new job", p.ID, j.ID)
	}
	return j
}

// mustClaim claims the oldest queued job for runner, failing if there is
// none.
func mustClaim(t *testing.T, s batch.Store, runner string, now time.Time) batch.Claimed {
	t.Helper()
	c, ok, err := s.Claim(t.Context(), batch.ClaimParams{Runner: runner, Now: nowAt(now)})
	if err != nil || !ok {
		t.Fatalf("Claim(%s) = %v, %v; want a job", runner, ok, err)
	}
	return c
}

// claimJob claims for runner and checks that it got the job id.
func claimJob(t *testing.T, s batch.Store, runner, id string, now time.Time) batch.Claimed {
	t.Helper()
	c := mustClaim(t, s, runner, now)
	if c.Job.ID != id {
		t.Fatalf("claimed %s, want %s", c.Job.ID, id)
	}
	return c
}

// finish stores the outcome of a held job's target in flight.
func finish(t *testing.T, s batch.Store, runner, id string, fin batch.TargetFinish, now time.Time) batch.Step {
	t.Helper()
	st, err := s.FinishTarget(t.Context(), batch.FinishParams{JobID: id, Runner: runner, Target: fin, Now: nowAt(now)})
	if err != nil {
		t.Fatalf("FinishTarget(%s, %d): %v", id, fin.Idx, err)
	}
	return st
}

func okFinish(idx int, body string) batch.TargetFinish {
	return batch.TargetFinish{Idx: idx, Status: batch.TargetDone, Outcome: batch.OutcomeOK,
		Result: []byte(`{"content":"` + body + `"}`)}
}

func failFinish(idx int, msg string) batch.TargetFinish {
	return batch.TargetFinish{Idx: idx, Status: batch.TargetFailed, Outcome: batch.OutcomeBlocked,
		Error: msg, Hint: "browser"}
}

// runJob creates a one-target job, claims it and finishes it ok with a body
// of size bytes. It returns the job id.
func runJob(t *testing.T, s batch.Store, caller, key string, size int, now time.Time) string {
	t.Helper()
	p := jobSpec(caller, key, 1, now)
	mustCreate(t, s, p)
	claimJob(t, s, runnerA, p.ID, now)
	body := make([]byte, size)
	for i := range body {
		body[i] = 'x'
	}
	st := finish(t, s, runnerA, p.ID, batch.TargetFinish{Idx: 0, Status: batch.TargetDone, Outcome: batch.OutcomeOK, Result: body}, now)
	if st.Next != -1 || st.Status != batch.JobDone {
		t.Fatalf("finishing the only target = %+v, want done with no next", st)
	}
	return p.ID
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want %v", what, err, want)
	}
}

func getJob(t *testing.T, s batch.Store, caller, id string) (batch.Job, []batch.TargetRecord) {
	t.Helper()
	j, ts, err := s.Get(t.Context(), batch.GetParams{Caller: caller, JobID: id, Results: true})
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return j, ts
}

func statuses(ts []batch.TargetRecord) []batch.TargetStatus {
	var out []batch.TargetStatus
	for _, t := range ts {
		out = append(out, t.Status)
	}
	return out
}

func wantStatuses(t *testing.T, what string, ts []batch.TargetRecord, want ...batch.TargetStatus) {
	t.Helper()
	if got := statuses(ts); !slices.Equal(got, want) {
		t.Fatalf("%s: targets %v, want %v", what, got, want)
	}
}

func mustStats(t *testing.T, s batch.Store) batch.Stats {
	t.Helper()
	st, err := s.Stats(t.Context())
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	return st
}

// nowAt is the Now of a store call at t: the suites' clocks are fake, so
// every call they make carries its time (see the clock note on
// [batch.CreateParams]).
func nowAt(t time.Time) *time.Time { return &t }
