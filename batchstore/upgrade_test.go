package batchstore

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// testdata/v1 is a file written by the schema-1 store (commit 5bf4e93,
// TestWriteFixtureV1 there), with a manifest of what its Get returned for
// each job: done, partial and failed jobs, a job cancelled while queued,
// one cancelled with a target in flight, one running mid-drain and one
// queued.
type fixtureV1 struct {
	Stats batchdriver.Stats
	Jobs  []struct {
		Job     batchdriver.Job
		Targets []batchdriver.TargetRecord
	}
}

func readFixtureV1(t *testing.T) (path string, want fixtureV1) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "v1", "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	db, err := os.ReadFile(filepath.Join("testdata", "v1", "batch.db"))
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "batch.db")
	if err := os.WriteFile(path, db, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, want
}

// A file written by the schema-1 store opens, keeps every job and result
// readable exactly as before, and drains new jobs; a runner's start then
// fails the jobs that file left live, as the restart hook always did.
func TestStore_UpgradeFromSchema1(t *testing.T) {
	t.Parallel()
	path, want := readFixtureV1(t)
	ctx := t.Context()
	s, err := Open(ctx, path, Config{})
	if err != nil {
		t.Fatalf("Open of a schema-1 file: %v", err)
	}
	defer s.Close()
	migs, err := schemaMigrations()
	if err != nil {
		t.Fatal(err)
	}
	if v, last := countRows(t, s, `SELECT max(version) FROM batch_migration`), int64(migs[len(migs)-1].Version); v != last {
		t.Fatalf("schema version %d after open, want %d", v, last)
	}
	for _, w := range want.Jobs {
		j, ts, err := s.Get(ctx, batchdriver.GetParams{Caller: w.Job.Caller.Name, JobID: w.Job.ID, Results: true})
		if err != nil {
			t.Fatalf("Get(%s): %v", w.Job.ID, err)
		}
		if !sameJob(j, w.Job) {
			t.Errorf("job %s after the upgrade:\n got %+v\nwant %+v", w.Job.ID, j, w.Job)
		}
		if len(ts) != len(w.Targets) {
			t.Fatalf("job %s: %d targets, want %d", w.Job.ID, len(ts), len(w.Targets))
		}
		for i := range ts {
			if !sameTarget(ts[i], w.Targets[i]) {
				t.Errorf("job %s target %d after the upgrade:\n got %+v\nwant %+v", w.Job.ID, i, ts[i], w.Targets[i])
			}
		}
	}
	if st, err := s.Stats(ctx); err != nil || st != want.Stats {
		t.Errorf("Stats after the upgrade = %+v, %v; want %+v", st, err, want.Stats)
	}
	if err := s.checkCounters(ctx); err != nil {
		t.Error(err)
	}

	// A runner starts on it: the job left running and the queued one fail
	// as a restart; the cancelled job's target in flight fails with it.
	// It delivers webhooks (schema 4): none for the jobs of the old file,
	// which had none, one for a new job that asks for it.
	var mu sync.Mutex
	var events []batch.WebhookEvent
	deliver := func(_ context.Context, ev batch.WebhookEvent) error {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, ev)
		return nil
	}
	// The fixture's jobs finished long ago: a TTL of years keeps the
	// runner's sweep from deleting them before they are read.
	r := batchtest.NewRunner(t, batch.Config{
		Store: s, Fetch: batchtest.StaticFetcher("new"), Deliver: deliver, PollInterval: batch.Duration(10 * time.Millisecond),
		TTL: batch.Duration(10 * 365 * 24 * time.Hour),
	})
	byName := map[string]batch.JobInfo{}
	for _, w := range want.Jobs {
		info, err := r.Status(ctx, w.Job.Caller, w.Job.ID, batch.StatusOptions{Results: true})
		if err != nil {
			t.Fatal(err)
		}
		byName[w.Job.Caller.Name] = info
	}
	f := func(name string, status batchdriver.JobStatus, targets ...batchdriver.TargetStatus) {
		t.Helper()
		info := byName[name]
		var got []batchdriver.TargetStatus
		for _, tg := range info.Targets {
			got = append(got, tg.Status)
		}
		if info.Status != status || !slices.Equal(got, targets) {
			t.Errorf("%s's job after the restart: %s %v, want %s %v", name, info.Status, got, status, targets)
		}
	}
	done, failed, pending := batchdriver.TargetDone, batchdriver.TargetFailed, batchdriver.TargetPending
	f("alice", batchdriver.JobDone, done, done, done)
	f("bob", batchdriver.JobPartial, done, failed)
	f("carol", batchdriver.JobFailed, failed, failed)
	f("dave", batchdriver.JobCancelled, pending, pending)
	f("erin", batchdriver.JobCancelled, done, failed, pending)
	f("frank", batchdriver.JobFailed, done, failed, pending)
	f("grace", batchdriver.JobFailed, pending, pending)
	if e := byName["frank"]; e.Error != "restart" || e.Targets[1].Error != "restart" || e.Targets[0].Result == nil {
		t.Errorf("frank's job = %+v", e)
	}

	// New jobs drain on the upgraded file.
	caller := batchdriver.Caller{Name: "zoe"}
	job, _, err := r.SubmitWith(ctx, caller, batchtest.Targets("after-upgrade", 3), batch.SubmitOptions{WebhookURL: "https://hooks.example/zoe"})
	if err != nil {
		t.Fatal(err)
	}
	if info := batchtest.WaitFinished(t, r, caller, job.ID, 10*time.Second); info.Status != batchdriver.JobDone || info.Targets[2].Result == nil {
		t.Fatalf("new job on the upgraded file = %+v", info)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		got := slices.Clone(events)
		mu.Unlock()
		if len(got) > 0 || time.Now().After(deadline) {
			if len(got) != 1 || got[0].JobID != job.ID || got[0].Status != batchdriver.JobDone || got[0].TargetsOK != 3 {
				t.Fatalf("webhook events on the upgraded file = %+v, want the new job's alone", got)
			}
			break
		}
	}
	// A job with per-target events (schema 12): its targets' events in idx
	// order, then its completion.
	job, _, err = r.SubmitWith(ctx, caller, batchtest.Targets("per-target", 3), batch.SubmitOptions{
		WebhookURL: "https://hooks.example/zoe", WebhookEvents: []string{batch.EventTargetFinished, batch.EventJobFinished}})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		got := slices.Clone(events[1:])
		mu.Unlock()
		if n := len(got); n > 0 && got[n-1].Type == batch.EventJobFinished || time.Now().After(deadline) {
			var idxs []int
			for _, ev := range got[:max(n-1, 0)] {
				for _, tg := range ev.Targets {
					idxs = append(idxs, tg.Idx)
				}
			}
			if n == 0 || got[n-1].JobID != job.ID || got[n-1].TargetsOK != 3 || !slices.Equal(idxs, []int{0, 1, 2}) {
				t.Fatalf("per-target webhook events on the upgraded file = %+v, want targets 0 to 2, then the completion", got)
			}
			break
		}
	}
	if err := s.checkCounters(ctx); err != nil {
		t.Error(err)
	}
}

func sameJob(a, b batchdriver.Job) bool {
	return a.ID == b.ID && a.Caller == b.Caller && a.IdemKey == b.IdemKey && a.Status == b.Status &&
		a.Error == b.Error && a.TargetsTotal == b.TargetsTotal && a.TargetsDone == b.TargetsDone &&
		a.CreatedAt.Equal(b.CreatedAt) && a.Lease.Equal(b.Lease) && a.FinishedAt.Equal(b.FinishedAt) &&
		a.Bytes == b.Bytes && a.Runner == b.Runner
}

func sameTarget(a, b batchdriver.TargetRecord) bool {
	ja, _ := json.Marshal(a.Target)
	jb, _ := json.Marshal(b.Target)
	return a.Idx == b.Idx && string(ja) == string(jb) && a.Status == b.Status && string(a.Result) == string(b.Result) &&
		a.Error == b.Error && a.Hint == b.Hint && a.Outcome == b.Outcome
}
