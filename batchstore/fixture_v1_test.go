package batchstore

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"
)

// TestWriteFixtureV1 writes testdata/v1/batch.db and its manifest with the
// schema-1 store of this commit. It runs only when BATCHSTORE_WRITE_FIXTURE
// is set; the files it wrote are committed, and the upgrade test reads them.
func TestWriteFixtureV1(t *testing.T) {
	if os.Getenv("BATCHSTORE_WRITE_FIXTURE") == "" {
		t.Skip("set BATCHSTORE_WRITE_FIXTURE=1 to rewrite testdata/v1")
	}
	ctx := context.Background()
	dir := filepath.Join("testdata", "v1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "batch.db")
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		os.Remove(p)
	}
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	lim := batch.Limits{JobsPerCaller: 10, JobsTotal: 100, TTL: 24 * time.Hour}
	yes := true
	type fin = batch.TargetFinish
	ok := func(idx int, content string) fin {
		env, err := batch.Result{Content: content, Meta: map[string]any{"status": 200, "title": "page " + content}}.Envelope()
		if err != nil {
			t.Fatal(err)
		}
		return fin{Idx: idx, Status: batch.TargetDone, Outcome: batch.OutcomeOK, Result: env}
	}
	failed := func(idx int, o batch.Outcome, msg, hint string) fin {
		return fin{Idx: idx, Status: batch.TargetFailed, Outcome: o, Error: msg, Hint: hint}
	}
	type spec struct {
		id      string
		caller  batch.Caller
		targets int
		// what happens: fins are started and finished in order; then
		// cancel, start (one more target started) or finish.
		fins   []fin
		start  bool // start the next target after fins and leave it running
		cancel bool
		finish bool
		claim  bool
	}
	specs := []spec{
		{id: "00000000-0000-4000-8000-00000000000a", caller: batch.Caller{Name: "alice", Class: "agent"}, targets: 3,
			fins: []fin{ok(0, "zero"), ok(1, "one"), ok(2, "two")}, claim: true, finish: true},
		{id: "00000000-0000-4000-8000-00000000000b", caller: batch.Caller{Name: "bob"}, targets: 2,
			fins: []fin{ok(0, "bob zero"), failed(1, batch.OutcomeBlocked, "blocked: private address", "browser")}, claim: true, finish: true},
		{id: "00000000-0000-4000-8000-00000000000c", caller: batch.Caller{Name: "carol", Restricted: true}, targets: 2,
			fins: []fin{failed(0, batch.OutcomeTimeout, "timeout: no result within 1m0s", ""), failed(1, batch.OutcomeUpstream5xx, "upstream 503", "")}, claim: true, finish: true},
		{id: "00000000-0000-4000-8000-00000000000d", caller: batch.Caller{Name: "dave"}, targets: 2, cancel: true},
		{id: "00000000-0000-4000-8000-00000000000e", caller: batch.Caller{Name: "erin"}, targets: 3,
			fins: []fin{ok(0, "erin zero")}, claim: true, start: true, cancel: true},
		{id: "00000000-0000-4000-8000-00000000000f", caller: batch.Caller{Name: "frank", Class: "crawler"}, targets: 3,
			fins: []fin{ok(0, "frank zero")}, claim: true, start: true},
		{id: "00000000-0000-4000-8000-000000000010", caller: batch.Caller{Name: "grace"}, targets: 2},
	}
	for i, sp := range specs {
		now := t0.Add(time.Duration(i) * time.Minute)
		ts := make([]batch.Target, sp.targets)
		for k := range ts {
			ts[k] = batch.Target{URL: "https://fixture.example/" + sp.caller.Name + "/" + string(rune('a'+k))}
		}
		ts[0].Options = batch.Options{Mode: batch.ModeClean, Question: "what?", Grep: "go", Context: &yes, Recover: true}
		if _, _, err := s.Create(ctx, batch.NewJob{ID: sp.id, Caller: sp.caller, IdemKey: batch.IdemKey(sp.caller.Name, ts), Targets: ts, Now: now}, lim); err != nil {
			t.Fatal(err)
		}
		if sp.claim {
			j, _, err := s.Claim(ctx, "runner-v1", now)
			if err != nil || j.ID != sp.id {
				t.Fatalf("claim %s: %v %v", sp.id, j.ID, err)
			}
		}
		for _, f := range sp.fins {
			if err := s.StartTarget(ctx, sp.id, f.Idx, now); err != nil {
				t.Fatal(err)
			}
			if _, err := s.FinishTarget(ctx, sp.id, f, now.Add(10*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		if sp.start {
			if err := s.StartTarget(ctx, sp.id, len(sp.fins), now.Add(20*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		if sp.cancel {
			if err := s.Cancel(ctx, sp.caller.Name, sp.id, now.Add(30*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		if sp.finish {
			if _, err := s.FinishJob(ctx, sp.id, now.Add(40*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The manifest: every job as Get returns it, with results.
	type manifestJob struct {
		Job     batch.Job
		Targets []batch.TargetRecord
	}
	var manifest []manifestJob
	for _, sp := range specs {
		j, ts, err := s.Get(ctx, sp.caller.Name, sp.id, true)
		if err != nil {
			t.Fatal(err)
		}
		manifest = append(manifest, manifestJob{j, ts})
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Fold the WAL into the file, so that the fixture is one file.
	err = s.read(ctx, "checkpoint", func(conn *sqlite.Conn) error {
		return sqlitex.ExecuteTransient(conn, "PRAGMA wal_checkpoint(TRUNCATE)", nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	os.Remove(path + ".lock")
	b, err := json.MarshalIndent(struct {
		Stats batch.Stats
		Jobs  []manifestJob
	}{st, manifest}, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}
