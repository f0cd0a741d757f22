package batchotel_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchotel"
	"github.com/siftfetch/batchkit/batchstore/pgstore"
	"github.com/siftfetch/batchkit/batchstore/pgstore/pgstoretest"
)

// pgSchema returns the database URL and a fresh schema for the test,
// dropped when it ends (see package pgstoretest).
func pgSchema(t *testing.T) (url, schema string) {
	t.Helper()
	return pgstoretest.Schema(t, "otel")
}

// apiOnly is a node that takes submits and drains nothing: its claims
// find no job, so that the other node drains them all.
type apiOnly struct{ batchdriver.Store }

func (apiOnly) Claim(context.Context, batchdriver.ClaimParams) (batchdriver.Claimed, bool, error) {
	return batchdriver.Claimed{}, false, nil
}

// TestCrossNode: a job submitted through node A, in a request's trace, is
// drained by node B, with a store and a tracer provider of its own, in the
// same trace: B's process span is a child of A's submit span.
func TestCrossNode(t *testing.T) {
	url, schema := pgSchema(t)
	ctx := t.Context()
	open := func() *pgstore.Store {
		s, err := pgstore.Open(ctx, url, pgstore.Config{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	tpA, expA := recorder(t)
	tpB, expB := recorder(t)
	node := func(id string, s batchdriver.Store, tp trace.TracerProvider) *batch.Runner {
		r, err := batch.New(batch.Config{
			Store: s, Fetch: markedFetch, RunnerID: id, Logger: batchtest.Logger(t),
			PollInterval: batch.Duration(50 * time.Millisecond),
			Observer:     batchotel.New(batchotel.Config{TracerProvider: tp}),
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close(context.Background()) })
		return r
	}
	a := node("node-a", apiOnly{open()}, tpA)
	reqCtx, req := tpA.Tracer("test").Start(ctx, "POST /v1/batch")
	caller := batch.Caller{Name: "alice"}
	job, _, err := a.Submit(reqCtx, caller, markedTargets(2))
	req.End()
	if err != nil {
		t.Fatal(err)
	}
	b := node("node-b", open(), tpB)
	for {
		info, err := a.Wait(ctx, caller, job.ID, batch.WaitOptions{Timeout: batch.MaxWait})
		if err != nil {
			t.Fatal(err)
		}
		if info.Status.Finished() {
			break
		}
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	spansA, spansB := expA.GetSpans(), expB.GetSpans()
	submit := one(t, spansA, "submit batch")
	if n := len(byName(spansA, "process batch")); n != 0 {
		t.Fatalf("node A drained %d jobs", n)
	}
	process := one(t, spansB, "process batch")
	if submit.Parent.SpanID() != req.SpanContext().SpanID() {
		t.Errorf("submit's parent %s, want the request %s", submit.Parent.SpanID(), req.SpanContext().SpanID())
	}
	if process.SpanContext.TraceID() != req.SpanContext().TraceID() || process.Parent.SpanID() != submit.SpanContext.SpanID() {
		t.Errorf("node B's process span: trace %s parent %s; want trace %s parent %s (A's submit)",
			process.SpanContext.TraceID(), process.Parent.SpanID(), req.SpanContext().TraceID(), submit.SpanContext.SpanID())
	}
	for _, s := range spansB {
		if s.SpanContext.TraceID() != req.SpanContext().TraceID() {
			t.Errorf("node B's span %q is in trace %s, not the request's", s.Name, s.SpanContext.TraceID())
		}
	}
	if n := len(byName(spansB, "batch target")); n != 2 {
		t.Errorf("node B has %d fetch spans, want 2", n)
	}
	noMarker(t, append(spansA, spansB...))
}
