package batchdrivertest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// requireShared skips a cluster case on a store that serves one process.
func requireShared(t *testing.T, s batchdriver.Store) {
	t.Helper()
	if !s.Capabilities().Shared {
		t.Skip("a cluster case: the store serves one process (Capabilities.Shared is false)")
	}
}

// t0 is the instant the suites' fake time starts from.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// suiteLimits are generous caps, so that tests not about caps never hit one.
var suiteLimits = batchdriver.Limits{JobsPerCaller: 100, JobsTotal: 1000, TTL: 24 * time.Hour}

// The runner ids the store cases drain with.
const (
	runnerA = "runner-a"
	runnerB = "runner-b"
	runnerC = "runner-c"
)

// suiteOptions are the options of a job's first target: opaque to a store,
// which keeps them byte for byte.
var suiteOptions = []byte(`{"mode":"clean","question":"what?","context":true,"recover":true}`)

// suiteKey is an idempotency key: the runner computes them, a store
// compares them as given.
func suiteKey(caller, key string, n int) string {
	return fmt.Sprintf("idem|%s|%s|%d", caller, key, n)
}

// jobSpec builds a job for caller with n targets, created at now.
func jobSpec(caller, key string, n int, now time.Time) batchdriver.CreateParams {
	ts := batchtest.Targets(caller+"-"+key, n)
	if n > 0 {
		ts[0].Options = suiteOptions
	}
	return batchdriver.CreateParams{
		ID:      fmt.Sprintf("%s-%s-%d", caller, key, now.UnixNano()),
		Caller:  batch.Caller{Name: caller, Class: "class-" + caller, Restricted: caller == "restricted"},
		IdemKey: suiteKey(caller, key, n),
		Targets: ts,
		Limits:  suiteLimits,
		Now:     nowAt(now),
	}
}

// withLimits returns p with other limits.
func withLimits(p batchdriver.CreateParams, lim batchdriver.Limits) batchdriver.CreateParams {
	p.Limits = lim
	return p
}

func mustCreate(t *testing.T, s batchdriver.Store, p batchdriver.CreateParams) batchdriver.Job {
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
func mustClaim(t *testing.T, s batchdriver.Store, runner string, now time.Time) batchdriver.Claimed {
	t.Helper()
	c, ok, err := s.Claim(t.Context(), batchdriver.ClaimParams{Runner: runner, Now: nowAt(now)})
	if err != nil || !ok {
		t.Fatalf("Claim(%s) = %v, %v; want a job", runner, ok, err)
	}
	return c
}

// claimJob claims for runner and checks that it got the job id.
func claimJob(t *testing.T, s batchdriver.Store, runner, id string, now time.Time) batchdriver.Claimed {
	t.Helper()
	c := mustClaim(t, s, runner, now)
	if c.Job.ID != id {
		t.Fatalf("claimed %s, want %s", c.Job.ID, id)
	}
	return c
}

// finish stores the outcome of a held job's target in flight.
func finish(t *testing.T, s batchdriver.Store, runner, id string, fin batchdriver.TargetFinish, now time.Time) batchdriver.Step {
	t.Helper()
	st, err := s.FinishTarget(t.Context(), batchdriver.FinishParams{JobID: id, Runner: runner, Target: fin, Now: nowAt(now)})
	if err != nil {
		t.Fatalf("FinishTarget(%s, %d): %v", id, fin.Idx, err)
	}
	return st
}

func okFinish(idx int, body string) batchdriver.TargetFinish {
	return batchdriver.TargetFinish{Idx: idx, Status: batch.TargetDone, Outcome: batch.OutcomeOK,
		Result: []byte(`{"content":"` + body + `"}`)}
}

func failFinish(idx int, msg string) batchdriver.TargetFinish {
	return batchdriver.TargetFinish{Idx: idx, Status: batch.TargetFailed, Outcome: batch.OutcomeBlocked,
		Error: msg, Hint: "browser"}
}

// runJob creates a one-target job, claims it and finishes it ok with a body
// of size bytes. It returns the job id.
func runJob(t *testing.T, s batchdriver.Store, caller, key string, size int, now time.Time) string {
	t.Helper()
	p := jobSpec(caller, key, 1, now)
	mustCreate(t, s, p)
	claimJob(t, s, runnerA, p.ID, now)
	body := make([]byte, size)
	for i := range body {
		body[i] = 'x'
	}
	st := finish(t, s, runnerA, p.ID, batchdriver.TargetFinish{Idx: 0, Status: batch.TargetDone, Outcome: batch.OutcomeOK, Result: body}, now)
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

func getJob(t *testing.T, s batchdriver.Store, caller, id string) (batchdriver.Job, []batchdriver.TargetRecord) {
	t.Helper()
	j, ts, err := s.Get(t.Context(), batchdriver.GetParams{Caller: caller, JobID: id, Results: true})
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return j, ts
}

func statuses(ts []batchdriver.TargetRecord) []batch.TargetStatus {
	var out []batch.TargetStatus
	for _, t := range ts {
		out = append(out, t.Status)
	}
	return out
}

func wantStatuses(t *testing.T, what string, ts []batchdriver.TargetRecord, want ...batch.TargetStatus) {
	t.Helper()
	if got := statuses(ts); !slices.Equal(got, want) {
		t.Fatalf("%s: targets %v, want %v", what, got, want)
	}
}

func mustStats(t *testing.T, s batchdriver.Store) batchdriver.Stats {
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

// IdemKey returns an idempotency key for a test that creates jobs in a
// store directly: the same caller and list give the same key, any other
// a different one. (The runner computes the real keys; a store only
// compares them.)
func IdemKey(caller string, targets []batchdriver.Target) string {
	h := sha256.New()
	h.Write([]byte(caller))
	for _, t := range targets {
		h.Write([]byte{0})
		h.Write([]byte(t.URL))
		h.Write([]byte{0})
		h.Write(t.Options)
	}
	return hex.EncodeToString(h.Sum(nil))
}
