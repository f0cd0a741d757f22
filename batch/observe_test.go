package batch_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchobserve"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

func TestTraceContext_Valid(t *testing.T) {
	t.Parallel()
	const ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, c := range []struct {
		parent string
		valid  bool
	}{
		{ok, true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later", true}, // a later version: its 00 fields
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},
		{"", false},
		{ok + "-", false}, // version 00 is exactly 55 characters
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false}, // upper case
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g", false},
		{"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n", false},
	} {
		if got := (batch.TraceContext{Parent: c.parent}).Valid(); got != c.valid {
			t.Errorf("Valid(%q) = %v, want %v", c.parent, got, c.valid)
		}
	}
}

// TestSubmit_TraceContext: without an observer, a submit's explicit trace
// context is stored as checked: a later version cut to the fields of 00,
// an invalid tracestate dropped, an invalid traceparent dropped whole; a
// bad one never fails the submit.
func TestSubmit_TraceContext(t *testing.T) {
	t.Parallel()
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	long := strings.Repeat("a=b,", 200)
	for i, c := range []struct {
		given, want batch.TraceContext
	}{
		{batch.TraceContext{Parent: parent, State: "rojo=00f067aa0ba902b7, congo=t61rcWkgMzE"}, batch.TraceContext{Parent: parent, State: "rojo=00f067aa0ba902b7, congo=t61rcWkgMzE"}},
		{batch.TraceContext{Parent: "cc" + parent[2:] + "-what-next", State: "t@v=1"}, batch.TraceContext{Parent: "cc" + parent[2:], State: "t@v=1"}},
		{batch.TraceContext{Parent: parent, State: "Rojo=1"}, batch.TraceContext{Parent: parent}},
		{batch.TraceContext{Parent: parent, State: "rojo=a=b"}, batch.TraceContext{Parent: parent}},
		{batch.TraceContext{Parent: parent, State: "rojo=1\n"}, batch.TraceContext{Parent: parent}},
		{batch.TraceContext{Parent: parent, State: long}, batch.TraceContext{Parent: parent}},
		{batch.TraceContext{Parent: "00-garbage", State: "rojo=1"}, batch.TraceContext{}},
		{batch.TraceContext{State: "rojo=1"}, batch.TraceContext{}},
	} {
		store := batchtest.NewStore()
		r := batchtest.NewRunner(t, batch.Config{Store: store})
		caller := batch.Caller{Name: fmt.Sprint("c", i)}
		job, _, err := r.SubmitWith(t.Context(), caller, batchtest.Targets("t", 1), batch.SubmitOptions{Trace: c.given})
		if err != nil {
			t.Fatalf("%+v: %v", c.given, err)
		}
		j, _, err := store.Get(t.Context(), batchdriver.GetParams{Caller: caller.Name, JobID: job.ID, JobOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if j.Trace != c.want {
			t.Errorf("given %+v: stored %+v, want %+v", c.given, j.Trace, c.want)
		}
	}
}

// recObserver records the steps it sees, in order.
type recObserver struct {
	mu    sync.Mutex
	steps []string
	trace batch.TraceContext // what TraceContext answers
}

type traceKey struct{}

func (o *recObserver) add(s string) {
	o.mu.Lock()
	o.steps = append(o.steps, s)
	o.mu.Unlock()
}

func (o *recObserver) Submit(ctx context.Context, ev batchobserve.SubmitEvent) (context.Context, func(batchobserve.SubmitEnd)) {
	o.add(fmt.Sprintf("submit %s %d", ev.Caller.Name, ev.Targets))
	return context.WithValue(ctx, traceKey{}, "submit"), func(res batchobserve.SubmitEnd) {
		o.add(fmt.Sprintf("submitted %s %v", res.Status, res.Err))
	}
}

func (o *recObserver) TraceContext(ctx context.Context) batch.TraceContext {
	if ctx.Value(traceKey{}) != "submit" {
		o.add("TraceContext without the submit's context")
	}
	return o.trace
}

func (o *recObserver) Job(ctx context.Context, ev batchobserve.JobEvent) (context.Context, func(batchobserve.JobEnd)) {
	o.add(fmt.Sprintf("job %d %s claimed in order %v", ev.TargetsTotal, ev.Trace.Parent, !ev.ClaimEnd.Before(ev.ClaimStart)))
	return context.WithValue(ctx, traceKey{}, "job"), func(res batchobserve.JobEnd) {
		o.add(fmt.Sprintf("job end %s %d %q", res.Status, res.TargetsDone, res.Stopped))
	}
}

func (o *recObserver) Fetch(ctx context.Context, ev batchobserve.TargetEvent) (context.Context, func(batchobserve.FetchEnd)) {
	o.add(fmt.Sprintf("fetch %d in %v", ev.Idx, ctx.Value(traceKey{})))
	return context.WithValue(ctx, traceKey{}, "fetch"), func(res batchobserve.FetchEnd) {
		o.add(fmt.Sprintf("fetched %d %s %s", ev.Idx, res.Status, res.Outcome))
	}
}

func (o *recObserver) Store(ctx context.Context, ev batchobserve.TargetEvent) (context.Context, func(batchobserve.StoreEnd)) {
	o.add(fmt.Sprintf("store %d in %v", ev.Idx, ctx.Value(traceKey{})))
	return ctx, func(res batchobserve.StoreEnd) {
		o.add(fmt.Sprintf("stored %d %d %s %d %v", ev.Idx, res.Attempts, res.Status, res.Next, res.Err))
	}
}

func (o *recObserver) Webhook(ctx context.Context, ev batchobserve.WebhookAttempt) (context.Context, func(batchobserve.WebhookEnd)) {
	o.add("webhook")
	return ctx, func(batchobserve.WebhookEnd) {}
}

func (o *recObserver) Reap(ctx context.Context, ev batchobserve.ReapEvent) (context.Context, func(batchobserve.ReapEnd)) {
	o.add("reap " + ev.Reason)
	return ctx, func(res batchobserve.ReapEnd) { o.add(fmt.Sprintf("reaped %d %v", res.Jobs, res.Err)) }
}

// TestObserver_Steps: the steps of one job, in order, each in the context
// the step before returned; the fetcher gets the fetch step's, and the
// job stores the observer's trace context.
func TestObserver_Steps(t *testing.T) {
	t.Parallel()
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	obs := &recObserver{trace: batch.TraceContext{Parent: parent}}
	var fetchCtx []any
	var mu sync.Mutex
	fetch := func(ctx context.Context, c batch.Caller, tg batch.Target) (batch.Result, error) {
		mu.Lock()
		fetchCtx = append(fetchCtx, ctx.Value(traceKey{}))
		mu.Unlock()
		if strings.HasSuffix(tg.URL, "/1") {
			return batch.Result{}, fmt.Errorf("boom")
		}
		return batch.Result{Content: "x"}, nil
	}
	r, err := batch.New(batch.Config{Store: batchtest.NewStore(), Fetch: fetch, Observer: obs, Workers: 1, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	caller := batch.Caller{Name: "alice"}
	job, _, err := r.Submit(t.Context(), caller, batchtest.Targets("t", 2))
	if err != nil {
		t.Fatal(err)
	}
	for {
		info, err := r.Wait(t.Context(), caller, job.ID, batch.WaitOptions{Timeout: batch.MaxWait})
		if err != nil {
			t.Fatal(err)
		}
		if info.Status.Finished() {
			break
		}
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The submit step ends when Submit returns, which the worker may beat:
	// its end is anywhere after its start, the rest in this order.
	want := []string{
		"reap start", "reaped 0 <nil>",
		"submit alice 2",
		"job 2 " + parent + " claimed in order true",
		"fetch 0 in job", "fetched 0 done ok", "store 0 in job", "stored 0 1 running 1 <nil>",
		"fetch 1 in job", "fetched 1 failed other", "store 1 in job", "stored 1 1 partial -1 <nil>",
		"job end partial 2 \"\"",
		"reap close", "reaped 0 <nil>",
	}
	obs.mu.Lock()
	got := slices.Clone(obs.steps)
	obs.mu.Unlock()
	const submitted = "submitted queued <nil>"
	if i, j := slices.Index(got, "submit alice 2"), slices.Index(got, submitted); i < 0 || j < i {
		t.Errorf("steps:\n%s\nwant %q after the submit's start", strings.Join(got, "\n"), submitted)
	} else {
		got = slices.Delete(got, j, j+1)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("steps:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if fmt.Sprint(fetchCtx) != "[fetch fetch]" {
		t.Errorf("the fetcher got contexts %v, want the fetch step's", fetchCtx)
	}
}
