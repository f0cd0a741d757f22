package batch_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

func TestRunner_SubmitSkip(t *testing.T) {
	t.Parallel()
	alice := batch.Caller{Name: "alice"}
	skip := batch.SubmitOptions{OnInvalid: batch.OnInvalidSkip}

	t.Run("CountedAtSubmit", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		r := batchtest.NewRunner(t, batch.Config{Fetch: batchtest.HangingFetcher(release)})
		t.Cleanup(func() { close(release) })
		ts := []batch.Target{{URL: "https://a.test/"}, {URL: ""}, {URL: "https://a.test/b"}}
		opts := skip
		opts.Refused = []batch.Refusal{{Idx: 2, Outcome: batch.OutcomeBlocked, Error: "blocked: port"}}
		job, _, err := r.SubmitWith(t.Context(), alice, ts, opts)
		if err != nil {
			t.Fatal(err)
		}
		// Finished before the drain reaches them: a read right after the
		// submit shows them so.
		info, err := r.Status(t.Context(), alice, job.ID, batch.StatusOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if info.TargetsDone != 2 || info.Targets[1].Status != batch.TargetFailed || info.Targets[2].Outcome != batch.OutcomeBlocked {
			t.Errorf("status after the submit: %d done, targets %+v", info.TargetsDone, info.Targets)
		}
		m := scrape(t, r)
		for o, want := range map[string]float64{"invalid": 1, "blocked": 1, "ok": 0} {
			if got := m[`batch_targets_total{outcome="`+o+`"}`].value; got != want {
				t.Errorf("targets_total{outcome=%q} = %v, want %v", o, got, want)
			}
		}
		if got := m["batch_target_seconds_count"].value; got != 0 {
			t.Errorf("target_seconds count = %v: a skipped target took no fetch time", got)
		}
	})

	t.Run("KeyOnlyWhenSkipping", func(t *testing.T) {
		t.Parallel()
		r := batchtest.NewRunner(t, batch.Config{Fetch: batchtest.StaticFetcher("x"), JobsPerCaller: 4})
		ts := batchtest.Targets("k", 2)
		first, _, err := r.Submit(t.Context(), alice, ts)
		if err != nil {
			t.Fatal(err)
		}
		// Nothing to skip: the same request as the default's.
		same, reused, err := r.SubmitWith(t.Context(), alice, ts, skip)
		if err != nil || !reused || same.ID != first.ID || same.Skipped != nil {
			t.Errorf("skip with nothing to skip = %s reused %v (%v), skipped %v; want %s reused", same.ID, reused, err, same.Skipped, first.ID)
		}
		// Refused otherwise: another job, reused only with the same
		// refusals.
		refuse := func(msg string) batch.SubmitOptions {
			o := skip
			o.Refused = []batch.Refusal{{Idx: 1, Outcome: batch.OutcomeBlocked, Error: msg}}
			return o
		}
		a, reused, err := r.SubmitWith(t.Context(), alice, ts, refuse("blocked: a"))
		if err != nil || reused || a.ID == first.ID {
			t.Fatalf("skip of target 1 = %s reused %v (%v), want a new job", a.ID, reused, err)
		}
		b, reused, err := r.SubmitWith(t.Context(), alice, ts, refuse("blocked: a"))
		if err != nil || !reused || b.ID != a.ID {
			t.Errorf("the same refusals = %s reused %v (%v), want %s reused", b.ID, reused, err, a.ID)
		}
		c, reused, err := r.SubmitWith(t.Context(), alice, ts, refuse("blocked: b"))
		if err != nil || reused || c.ID == a.ID {
			t.Errorf("other refusals = %s reused %v (%v), want a new job", c.ID, reused, err)
		}
		for _, id := range []string{first.ID, a.ID, c.ID} {
			batchtest.WaitFinished(t, r, alice, id, 10*time.Second)
		}
	})

	t.Run("HostRefusalsChecked", func(t *testing.T) {
		t.Parallel()
		r := batchtest.NewRunner(t, batch.Config{Fetch: batchtest.StaticFetcher("x")})
		ts := batchtest.Targets("h", 2)
		f := func(what string, rs ...batch.Refusal) {
			t.Helper()
			o := skip
			o.Refused = rs
			_, _, err := r.SubmitWith(t.Context(), alice, ts, o)
			if err == nil || errors.Is(err, batch.ErrInvalidTarget) {
				t.Errorf("%s: %v, want a host error", what, err)
			}
		}
		f("an idx outside the list", batch.Refusal{Idx: 2, Outcome: batch.OutcomeBlocked})
		f("an idx twice", batch.Refusal{Idx: 0, Outcome: batch.OutcomeBlocked}, batch.Refusal{Idx: 0, Outcome: batch.OutcomeInvalid})
		f("outcome ok", batch.Refusal{Idx: 0, Outcome: batch.OutcomeOK})
		f("an unknown outcome", batch.Refusal{Idx: 0, Outcome: "nope"})
		// A refusal without an error reads "refused".
		o := skip
		o.Refused = []batch.Refusal{{Idx: 0, Outcome: batch.OutcomeBlocked}}
		job, _, err := r.SubmitWith(t.Context(), alice, ts, o)
		if err != nil || !slices.Equal(job.Skipped, []batch.Refusal{{Idx: 0, Outcome: batch.OutcomeBlocked, Error: "refused"}}) {
			t.Errorf("a refusal without an error: %+v, %v", job.Skipped, err)
		}
	})
}
