package batchdrivertest

import (
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// The runner cases of a lenient submit (batch.OnInvalidSkip): the targets
// it refuses finish at their idx without a fetch, and the rest drain.
var runnerSkipCases = map[string]func(*testing.T, batchdriver.Store){
	"SkipEveryTargetRefused": runnerSkipEvery,
	"SkipInvalidTargets":     runnerSkipInvalid,
}

// skipList is six targets: 1 refused by the host (blocked), 3 with an
// empty URL, 5 with a mode the options refuse; 4 fails when fetched.
func skipList() ([]batch.Target, []batch.Refusal) {
	ts := batchtest.Targets("skip", 6)
	ts[0].CustomID, ts[3].CustomID = "first", "empty"
	ts[3].URL = ""
	ts[5].Options = []byte(`{"mode":"fancy"}`)
	host := []batch.Refusal{{Idx: 1, Outcome: batch.OutcomeBlocked, Error: "blocked: port 8080 is not allowed", Hint: "use 80 or 443"}}
	return ts, host
}

// runnerSkipInvalid: with OnInvalidSkip, the refused targets (the host's
// and the runner's) finish at their idx at once, never fetched, with
// their outcome, error and hint and no attempt; the others drain as
// usual; the submit and every read say which were skipped; a resubmit
// reuses the job, and a retry leaves the skipped targets out. The same
// list with the default is refused at its first refused target.
func runnerSkipInvalid(t *testing.T, s batchdriver.Store) {
	ts, host := skipList()
	fail := batch.NewFetchError(batch.OutcomeUpstream5xx, "", errors.New("upstream: status 502"))
	log := &fetchLog{}
	r := batchtest.NewRunner(t, batch.Config{Store: s, Options: batchsift.Options,
		Fetch: log.wrap(batchtest.ScriptFetcher(map[string]batchtest.Step{ts[4].URL: {Err: fail}}))})
	skip := batch.SubmitOptions{OnInvalid: batch.OnInvalidSkip, Refused: host}

	_, _, err := r.SubmitWith(t.Context(), alice, ts, batch.SubmitOptions{Refused: host})
	var te *batch.TargetError
	if !errors.As(err, &te) || te.Index != 1 || te.Reason != host[0].Error {
		t.Fatalf("the default: %v, want the TargetError of target 1", err)
	}
	ts1 := slices.Clone(ts)
	_, _, err = r.SubmitWith(t.Context(), alice, ts1, batch.SubmitOptions{OnInvalid: batch.OnInvalidReject})
	if !errors.As(err, &te) || te.Index != 3 || te.Reason != "empty url" {
		t.Fatalf("reject without the host's refusal: %v, want the TargetError of target 3", err)
	}

	job, reused, err := r.SubmitWith(t.Context(), alice, ts, skip)
	if err != nil || reused || job.Status != batch.JobQueued || job.TargetsTotal != 6 {
		t.Fatalf("SubmitWith skip = %+v, %v, %v; want a new queued job of 6", job, reused, err)
	}
	want := []batch.Refusal{
		host[0],
		{Idx: 3, Outcome: batch.OutcomeInvalid, Error: "invalid target: empty url"},
		{Idx: 5, Outcome: batch.OutcomeInvalid, Error: `invalid target: unknown mode "fancy"`},
	}
	if !slices.Equal(job.Skipped, want) {
		t.Fatalf("submit's Skipped = %+v\nwant %+v", job.Skipped, want)
	}
	info := batchtest.WaitFinished(t, r, alice, job.ID, waitLong)
	if info.Status != batch.JobPartial || info.TargetsDone != 6 || !slices.Equal(info.Skipped, want) {
		t.Fatalf("finished job = %s, %d done, skipped %+v; want partial, 6 done, the submit's", info.Status, info.TargetsDone, info.Skipped)
	}
	for _, rf := range want {
		ti := info.Targets[rf.Idx]
		if ti.Status != batch.TargetFailed || ti.Outcome != rf.Outcome || ti.Error != rf.Error || ti.Hint != rf.Hint ||
			ti.Attempts != 0 || ti.URL != ts[rf.Idx].URL || ti.Outcome.Retryable() {
			t.Errorf("skipped target %d = %+v, want failed %s %q, no attempt", rf.Idx, ti, rf.Outcome, rf.Error)
		}
	}
	if info.Targets[3].CustomID != "empty" || info.Targets[0].CustomID != "first" {
		t.Errorf("custom ids %q, %q; want them at their idx", info.Targets[0].CustomID, info.Targets[3].CustomID)
	}
	if got := targetStatuses(info); !slices.Equal(got, []batch.TargetStatus{batch.TargetDone, batch.TargetFailed,
		batch.TargetDone, batch.TargetFailed, batch.TargetFailed, batch.TargetFailed}) {
		t.Errorf("targets %v", got)
	}
	wantOutcomes := map[batch.Outcome]int{batch.OutcomeOK: 2, batch.OutcomeBlocked: 1, batch.OutcomeInvalid: 2, batch.OutcomeUpstream5xx: 1}
	if !maps.Equal(info.Outcomes, wantOutcomes) {
		t.Errorf("outcomes %v, want %v", info.Outcomes, wantOutcomes)
	}
	fetched := log.since(0)
	if len(fetched) != 3 || fetched[0].URL != ts[0].URL || fetched[1].URL != ts[2].URL || fetched[2].URL != ts[4].URL {
		t.Errorf("fetched %+v, want targets 0, 2 and 4 alone", fetched)
	}

	again, reused, err := r.SubmitWith(t.Context(), alice, ts, skip)
	if err != nil || !reused || again.ID != job.ID || !slices.Equal(again.Skipped, want) {
		t.Errorf("resubmit = %s reused %v (%v), skipped %+v; want %s reused, the same skipped", again.ID, reused, err, again.Skipped, job.ID)
	}
	retry := mustRetry(t, r, alice, job.ID)
	info = batchtest.WaitFinished(t, r, alice, retry.ID, waitLong)
	wantLineage(t, info, job.ID, ts, 4)
	if len(info.Skipped) != 0 {
		t.Errorf("the retry skipped %+v, want none", info.Skipped)
	}
}

// runnerSkipEvery: a lenient submit whose every target is refused is
// refused as the default would refuse it, and makes no job.
func runnerSkipEvery(t *testing.T, s batchdriver.Store) {
	r := batchtest.NewRunner(t, batch.Config{Store: s, Fetch: batchtest.StaticFetcher("x")})
	ts := []batch.Target{{URL: "https://a.test/"}, {URL: ""}}
	host := []batch.Refusal{{Idx: 0, Outcome: batch.OutcomeBlocked, Error: "blocked: nope"}}
	_, _, err := r.SubmitWith(t.Context(), alice, ts, batch.SubmitOptions{OnInvalid: batch.OnInvalidSkip, Refused: host})
	var te *batch.TargetError
	if !errors.As(err, &te) || te.Index != 0 || te.Reason != "blocked: nope" {
		t.Fatalf("every target refused: %v, want the TargetError of target 0", err)
	}
	if jobs, err := r.List(t.Context(), alice, 10); err != nil || len(jobs) != 0 {
		t.Fatalf("List = %+v, %v; want no job", jobs, err)
	}
	_, _, err = r.SubmitWith(t.Context(), alice, ts, batch.SubmitOptions{OnInvalid: "lenient"})
	if err == nil || errors.Is(err, batch.ErrInvalidTarget) {
		t.Errorf("an unknown OnInvalid: %v, want an error of its own", err)
	}
}
