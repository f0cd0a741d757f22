package batchdrivertest

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// labelCases: the caller's labels, a job's metadata and its targets'
// custom ids, kept verbatim, read back by every read and the webhook
// event, and searched within the caller's own jobs.
var labelCases = map[string]func(*testing.T, batchdriver.Store){
	"LabelsInEveryRead":    storeLabelsInEveryRead,
	"LabelsInWebhook":      storeLabelsInWebhook,
	"LabelSearchOwnJobs":   storeLabelSearchOwnJobs,
	"LabelsNoneReadAsNone": storeLabelsNone,
}

// labelled is jobSpec with metadata and custom ids (the second target's
// empty).
func labelled(p batchdriver.CreateParams, meta map[string]string) batchdriver.CreateParams {
	p.Metadata = meta
	p.CustomIDs = make([]string, len(p.Targets))
	for i := range p.CustomIDs {
		if i != 1 {
			p.CustomIDs[i] = fmt.Sprintf("row-%d é\"", i)
		}
	}
	return p
}

// wantLabels checks a job's metadata and custom ids against p's.
func wantLabels(t *testing.T, what string, j batchdriver.Job, p batchdriver.CreateParams) {
	t.Helper()
	if !maps.Equal(j.Metadata, p.Metadata) || !slices.Equal(j.CustomIDs, p.CustomIDs) {
		t.Errorf("%s: metadata %v, custom ids %q; want %v, %q", what, j.Metadata, j.CustomIDs, p.Metadata, p.CustomIDs)
	}
}

func storeLabelsInEveryRead(t *testing.T, s batchdriver.Store) {
	ctx := t.Context()
	p := labelled(jobSpec("alice", "l", 3, t0), map[string]string{"run": "2026-01-02", "step": "fetch", "note": "ünïcode \"quoted\""})
	wantLabels(t, "Create", mustCreate(t, s, p), p)
	j, reused, err := s.Create(ctx, p)
	if err != nil || !reused {
		t.Fatalf("Create again = %v, %v; want the job reused", reused, err)
	}
	wantLabels(t, "reused Create", j, p)
	c := claimJob(t, s, runnerA, p.ID, t0)
	wantLabels(t, "Claim", c.Job, p)
	for i := range 3 {
		finish(t, s, runnerA, p.ID, okFinish(i, "x"), t0)
	}
	j, _, err = s.Get(ctx, batchdriver.GetParams{Caller: "alice", JobID: p.ID})
	if err != nil {
		t.Fatal(err)
	}
	wantLabels(t, "Get", j, p)
	j, _, err = s.Get(ctx, batchdriver.GetParams{Caller: "alice", JobID: p.ID, JobOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	wantLabels(t, "Get JobOnly", j, p)
	j, _, err = s.GetTarget(ctx, batchdriver.GetTargetParams{Caller: "alice", JobID: p.ID, Idx: 2})
	if err != nil {
		t.Fatal(err)
	}
	wantLabels(t, "GetTarget", j, p)
	jobs, err := s.List(ctx, batchdriver.ListParams{Caller: "alice", Limit: 10})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("List = %v, %v", jobs, err)
	}
	wantLabels(t, "List", jobs[0], p)
}

func storeLabelsInWebhook(t *testing.T, s batchdriver.Store) {
	p := hookSpec("alice", "lh", 1, t0)
	p.Metadata = map[string]string{"pipeline": "nightly"}
	mustCreate(t, s, p)
	claimJob(t, s, runnerA, p.ID, t0)
	finish(t, s, runnerA, p.ID, okFinish(0, "x"), t0)
	d := oneHook(t, s, runnerA, p.ID, t0)
	if !maps.Equal(d.Metadata, p.Metadata) {
		t.Errorf("event metadata %v, want %v", d.Metadata, p.Metadata)
	}
	q := hookSpec("alice", "plain", 1, t0)
	mustCreate(t, s, q)
	if err := s.Cancel(t.Context(), batchdriver.CancelParams{Caller: "alice", JobID: q.ID, Now: nowAt(t0)}); err != nil {
		t.Fatal(err)
	}
	if d := oneHook(t, s, runnerA, q.ID, t0); d.Metadata != nil {
		t.Errorf("event of a job without metadata: %v, want nil", d.Metadata)
	}
}

func storeLabelSearchOwnJobs(t *testing.T, s batchdriver.Store) {
	ctx := t.Context()
	run := map[string]string{"run": "r1", "team": "a"}
	var want []string
	for i := range 4 {
		meta := map[string]string{"run": "r1", "team": "a", "i": fmt.Sprint(i)}
		if i == 2 {
			meta = map[string]string{"run": "r2", "team": "a"}
		}
		p := jobSpec("alice", fmt.Sprint(i), 1, t0.Add(time.Duration(i)*time.Second))
		p.Metadata = meta
		mustCreate(t, s, p)
		if i != 2 {
			want = append([]string{p.ID}, want...) // newest first
		}
	}
	plain := jobSpec("alice", "plain", 1, t0.Add(time.Minute))
	mustCreate(t, s, plain)
	for _, caller := range []string{"bob", "mallory"} {
		p := jobSpec(caller, "x", 1, t0.Add(time.Hour)) // newer than every job of alice
		p.Metadata = run
		mustCreate(t, s, p)
	}
	ids := func(p batchdriver.ListParams) []string {
		t.Helper()
		jobs, err := s.List(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, j := range jobs {
			if j.Caller.Name != p.Caller {
				t.Errorf("List(%s) returned a job of %s", p.Caller, j.Caller.Name)
			}
			out = append(out, j.ID)
		}
		return out
	}
	if got := ids(batchdriver.ListParams{Caller: "alice", Limit: 10, Metadata: run}); !slices.Equal(got, want) {
		t.Errorf("search %v = %v, want %v", run, got, want)
	}
	if got := ids(batchdriver.ListParams{Caller: "alice", Limit: 2, Metadata: run}); !slices.Equal(got, want[:2]) {
		t.Errorf("search with limit 2 = %v, want %v: the limit counts the jobs that match", got, want[:2])
	}
	if got := ids(batchdriver.ListParams{Caller: "alice", Limit: 10, Metadata: map[string]string{"run": "r1", "i": "3"}}); !slices.Equal(got, want[:1]) {
		t.Errorf("search of two pairs = %v, want %v", got, want[:1])
	}
	for _, m := range []map[string]string{{"run": "R1"}, {"run": "r1 "}, {"nope": "r1"}, {"run": ""}} {
		if got := ids(batchdriver.ListParams{Caller: "alice", Limit: 10, Metadata: m}); len(got) != 0 {
			t.Errorf("search %q = %v, want none", m, got)
		}
	}
	if got := ids(batchdriver.ListParams{Caller: "carol", Limit: 10, Metadata: run}); len(got) != 0 {
		t.Errorf("search by a caller with no jobs = %v", got)
	}
	if got := ids(batchdriver.ListParams{Caller: "bob", Limit: 10, Metadata: run}); len(got) != 1 {
		t.Errorf("bob's search = %v, want his one job", got)
	}
}

func storeLabelsNone(t *testing.T, s batchdriver.Store) {
	p := jobSpec("alice", "n", 2, t0)
	wantLabels(t, "Create", mustCreate(t, s, p), p)
	j, _ := getJob(t, s, "alice", p.ID)
	if j.Metadata != nil || j.CustomIDs != nil {
		t.Errorf("a job without labels reads metadata %#v, custom ids %#v; want nil, nil", j.Metadata, j.CustomIDs)
	}
	if jobs, err := s.List(t.Context(), batchdriver.ListParams{Caller: "alice", Limit: 10, Metadata: map[string]string{"k": "v"}}); err != nil || len(jobs) != 0 {
		t.Errorf("search among jobs without labels = %v, %v", jobs, err)
	}
}
