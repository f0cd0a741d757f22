package batch_test

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

func TestRunner_Labels(t *testing.T) {
	t.Parallel()
	fetched := make(chan batch.Target, 16)
	r := batchtest.NewRunner(t, batch.Config{JobsPerCaller: 8, Fetch: func(_ context.Context, _ batch.Caller, tg batch.Target) (batch.Result, error) {
		fetched <- tg
		if tg.URL == "https://a.test/2" {
			return batch.Result{}, batch.NewFetchError(batch.OutcomeUpstream4xx, "", errors.New("upstream: status 404"))
		}
		return batch.Result{Content: "ok"}, nil
	}})
	caller := batch.Caller{Name: "alice"}
	targets := []batch.Target{{URL: "https://a.test/1", CustomID: "a"}, {URL: "https://a.test/2", CustomID: "b"}, {URL: "https://a.test/3"}}
	meta := map[string]string{"run": "r1"}
	job, reused, err := r.SubmitWith(t.Context(), caller, targets, batch.SubmitOptions{Metadata: meta})
	if err != nil || reused {
		t.Fatalf("SubmitWith = %v, %v", reused, err)
	}
	info := batchtest.WaitFinished(t, r, caller, job.ID, 10*time.Second)
	if !maps.Equal(info.Metadata, meta) || info.Targets[0].CustomID != "a" || info.Targets[1].CustomID != "b" || info.Targets[2].CustomID != "" {
		t.Errorf("status: metadata %v, targets %+v", info.Metadata, info.Targets)
	}
	for range targets {
		if tg := <-fetched; tg.CustomID != "" {
			t.Errorf("the fetcher got custom id %q: caller data it has no use for", tg.CustomID)
		}
	}

	t.Run("Idempotency", func(t *testing.T) {
		same, reused, err := r.SubmitWith(t.Context(), caller, targets, batch.SubmitOptions{Metadata: map[string]string{"run": "r1"}})
		if err != nil || !reused || same.ID != job.ID {
			t.Errorf("the same labels: %s reused %v (%v), want %s reused", same.ID, reused, err, job.ID)
		}
		other, reused, err := r.SubmitWith(t.Context(), caller, targets, batch.SubmitOptions{Metadata: map[string]string{"run": "r2"}})
		if err != nil || reused {
			t.Errorf("other metadata: reused %v (%v), want a new job", reused, err)
		}
		batchtest.WaitFinished(t, r, caller, other.ID, 10*time.Second)
		noIDs := []batch.Target{{URL: targets[0].URL}, {URL: targets[1].URL}, {URL: targets[2].URL}}
		third, reused, err := r.SubmitWith(t.Context(), caller, noIDs, batch.SubmitOptions{Metadata: meta})
		if err != nil || reused {
			t.Errorf("no custom ids: reused %v (%v), want a new job", reused, err)
		}
		batchtest.WaitFinished(t, r, caller, third.ID, 10*time.Second)
		for range 6 {
			<-fetched
		}
	})

	t.Run("Retry", func(t *testing.T) {
		retry, _, err := r.Retry(t.Context(), caller, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		info := batchtest.WaitFinished(t, r, caller, retry.ID, 10*time.Second)
		<-fetched
		if !maps.Equal(info.Metadata, meta) || len(info.Targets) != 1 || info.Targets[0].CustomID != "b" {
			t.Errorf("retry: metadata %v, targets %+v; want the job's metadata and target b", info.Metadata, info.Targets)
		}
	})

	t.Run("Refused", func(t *testing.T) {
		dup := []batch.Target{{URL: "https://a.test/1", CustomID: "x"}, {URL: "https://a.test/2", CustomID: "x"}}
		_, _, err := r.Submit(t.Context(), caller, dup)
		var te *batch.TargetError
		if !errors.As(err, &te) || te.Index != 1 {
			t.Errorf("duplicate custom id: %v, want a TargetError of target 1", err)
		}
		big := map[string]string{}
		for i := range batch.MaxMetadataPairs + 1 {
			big[string(rune('a'+i))] = "v"
		}
		if _, _, err := r.SubmitWith(t.Context(), caller, targets[:1], batch.SubmitOptions{Metadata: big}); !errors.Is(err, batch.ErrInvalidMetadata) {
			t.Errorf("17 pairs: %v, want ErrInvalidMetadata", err)
		}
	})
}
