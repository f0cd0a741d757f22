package batchotel_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchotel"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// marker is in every target URL, custom id and webhook URL of the tests,
// in a job's metadata, and in every error the fetcher and the deliverer
// return: it must appear in no span.
const marker = "zz-url-marker-7f3a"

func markedTargets(n int) []batch.Target {
	ts := make([]batch.Target, n)
	for i := range ts {
		ts[i] = batch.Target{URL: fmt.Sprintf("https://%s.example.test/%s/page/%d?q=%s", marker, marker, i, marker),
			CustomID: fmt.Sprintf("%s-%d", marker, i)} // caller data, as the URL is
	}
	return ts
}

const webhookURL = "https://hooks-" + marker + ".example.test/" + marker

// recorder returns a tracer provider that exports every span to an
// in-memory exporter as it ends.
func recorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

// markedFetch fails idx 1 with an error naming the URL and answers the
// others with content that names it too.
func markedFetch(_ context.Context, _ batch.Caller, t batch.Target) (batch.Result, error) {
	if strings.Contains(t.URL, "/page/1?") {
		return batch.Result{}, fmt.Errorf("dial %s: connection refused", t.URL)
	}
	return batch.Result{Content: "content of " + t.URL, Meta: map[string]any{"url": t.URL}}, nil
}

// hookRecorder fails a delivery's first attempt, with an error naming the
// URL, and takes the second; delivered is closed when it has.
type hookRecorder struct {
	delivered chan struct{}
	attempts  atomic.Int32
}

func (h *hookRecorder) deliver(_ context.Context, ev batch.WebhookEvent) error {
	if h.attempts.Add(1) == 1 {
		return fmt.Errorf("post %s: 503", ev.URL)
	}
	close(h.delivered)
	return nil
}

// runJob submits one marked job of three targets, with a webhook, in the
// trace of a request span, waits for it and its delivery, closes the
// runner and returns the request span's context and the job's id.
func runJob(t *testing.T, tp trace.TracerProvider, caller batch.Caller) (trace.SpanContext, string) {
	t.Helper()
	hooks := &hookRecorder{delivered: make(chan struct{})}
	r, err := batch.New(batch.Config{
		Store: batchtest.NewStore(), Fetch: markedFetch, Logger: batchtest.Logger(t),
		Deliver: hooks.deliver, WebhookBackoff: batch.Duration(time.Millisecond),
		Observer: batchotel.New(batchotel.Config{TracerProvider: tp}),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	reqCtx, req := tp.Tracer("test").Start(ctx, "POST /v1/batch")
	job, _, err := r.SubmitWith(reqCtx, caller, markedTargets(3), batch.SubmitOptions{WebhookURL: webhookURL,
		Metadata: map[string]string{"key-" + marker: "value-" + marker}})
	req.End()
	if err != nil {
		t.Fatal(err)
	}
	for {
		info, err := r.Wait(ctx, caller, job.ID, batch.WaitOptions{Timeout: batch.MaxWait})
		if err != nil {
			t.Fatal(err)
		}
		if info.Status.Finished() {
			break
		}
	}
	select {
	case <-hooks.delivered:
	case <-ctx.Done():
		t.Fatal("the webhook was never delivered")
	}
	if err := r.Close(context.Background()); err != nil { // waits for the delivery's span to end
		t.Fatal(err)
	}
	return req.SpanContext(), job.ID
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value)
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func byName(spans tracetest.SpanStubs, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func one(t *testing.T, spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	t.Helper()
	got := byName(spans, name)
	if len(got) != 1 {
		t.Fatalf("%d spans named %q, want 1 (spans: %v)", len(got), name, names(spans))
	}
	return got[0]
}

func names(spans tracetest.SpanStubs) []string {
	var n []string
	for _, s := range spans {
		n = append(n, s.Name)
	}
	return n
}

// TestJobSpans: a job's spans, their parentage, kinds, attributes and
// statuses, all in the trace of the request that submitted it.
func TestJobSpans(t *testing.T) {
	tp, exp := recorder(t)
	req, id := runJob(t, tp, batch.Caller{Name: "alice"})
	spans := exp.GetSpans()

	submit := one(t, spans, "submit batch")
	process := one(t, spans, "process batch")
	claim := one(t, spans, "claim batch")
	targets := byName(spans, "batch target")
	hooks := byName(spans, "batch webhook")
	if len(targets) != 3 || len(hooks) != 2 {
		t.Fatalf("%d target and %d webhook spans, want 3 and 2: %v", len(targets), len(hooks), names(spans))
	}
	for _, s := range targets { // the fetch, then the write, in one span
		if _, ok := attrs(s)["batch.store.attempts"]; !ok || len(s.Events) != 1 || s.Events[0].Name != "fetched" {
			t.Errorf("target span %v: batch.store.attempts set %v, events %v; want it set and one event \"fetched\"", attrs(s)["batch.target.idx"].AsInterface(), ok, s.Events)
		}
	}
	if n := len(byName(spans, "batch reap")); n != 0 {
		t.Errorf("%d reap spans for reaps that failed nothing", n)
	}
	for _, s := range spans {
		if s.SpanContext.TraceID() != req.TraceID() {
			t.Errorf("span %q is in trace %s, not the request's %s", s.Name, s.SpanContext.TraceID(), req.TraceID())
		}
	}
	parent := func(s tracetest.SpanStub, p trace.SpanContext, what string) {
		t.Helper()
		if s.Parent.SpanID() != p.SpanID() {
			t.Errorf("span %q's parent is %s, want %s (%s)", s.Name, s.Parent.SpanID(), p.SpanID(), what)
		}
	}
	parent(submit, req, "the request")
	parent(process, submit.SpanContext, "the submit, stored with the job")
	if !process.Parent.IsRemote() {
		t.Error("the process span's parent is not remote: it was not restored from the stored trace context")
	}
	parent(claim, process.SpanContext, "the job")
	for _, s := range targets {
		parent(s, process.SpanContext, "the job")
	}
	for _, s := range hooks {
		parent(s, submit.SpanContext, "the submit, stored with the job")
	}

	if submit.SpanKind != trace.SpanKindProducer || process.SpanKind != trace.SpanKindConsumer {
		t.Errorf("kinds: submit %s, process %s; want producer, consumer", submit.SpanKind, process.SpanKind)
	}
	want := func(s tracetest.SpanStub, key string, v any) {
		t.Helper()
		got, ok := attrs(s)[attribute.Key(key)]
		if !ok || got.AsInterface() != v {
			t.Errorf("span %q: %s = %v (set %v), want %v", s.Name, key, got.AsInterface(), ok, v)
		}
	}
	want(submit, "messaging.system", "batchkit")
	want(submit, "messaging.operation.type", "send")
	want(submit, "messaging.message.id", id)
	want(submit, "batch.caller", "alice")
	want(submit, "batch.targets", int64(3))
	want(submit, "batch.webhook", true)
	want(submit, "batch.reused", false)
	want(process, "messaging.operation.type", "process")
	want(process, "messaging.message.id", id)
	want(process, "batch.job.status", "partial")
	want(process, "batch.job.targets_done", int64(3))
	want(claim, "messaging.operation.type", "receive")
	if claim.StartTime.Before(process.StartTime) || claim.EndTime.After(process.EndTime) {
		t.Error("the claim span is not within the process span")
	}
	if process.Status.Code != codes.Unset {
		t.Errorf("a partial job's span has status %v, want unset", process.Status)
	}
	slices.SortFunc(targets, func(a, b tracetest.SpanStub) int {
		return int(attrs(a)["batch.target.idx"].AsInt64() - attrs(b)["batch.target.idx"].AsInt64())
	})
	for i, f := range targets {
		want(f, "batch.job.id", id)
		want(f, "batch.store.attempts", int64(1))
		want(f, "batch.target.idx", int64(i))
		if i == 1 {
			want(f, "batch.target.outcome", "other")
			want(f, "error.type", "other")
			if f.Status.Code != codes.Error || f.Status.Description != "other" {
				t.Errorf("failed fetch's status = %+v, want error \"other\"", f.Status)
			}
		} else {
			want(f, "batch.target.outcome", "ok")
			if f.Status.Code != codes.Unset {
				t.Errorf("fetch %d's status = %+v, want unset", i, f.Status)
			}
		}
	}
	slices.SortFunc(hooks, func(a, b tracetest.SpanStub) int {
		return int(attrs(a)["batch.webhook.attempt"].AsInt64() - attrs(b)["batch.webhook.attempt"].AsInt64())
	})
	want(hooks[0], "batch.webhook.attempt", int64(1))
	want(hooks[0], "batch.webhook.outcome", "retry")
	want(hooks[1], "batch.webhook.attempt", int64(2))
	want(hooks[1], "batch.webhook.outcome", "delivered")
	if hooks[0].Status.Code != codes.Error || hooks[1].Status.Code != codes.Unset {
		t.Errorf("webhook statuses %v, %v; want error, unset", hooks[0].Status, hooks[1].Status)
	}
	noMarker(t, spans)
}

// TestRestrictedCaller: a restricted caller's target spans say whether
// the target was ok, like its log lines, and not its outcome.
func TestRestrictedCaller(t *testing.T) {
	tp, exp := recorder(t)
	runJob(t, tp, batch.Caller{Name: "agent", Restricted: true})
	spans := exp.GetSpans()
	fetches := byName(spans, "batch target")
	if len(fetches) != 3 {
		t.Fatalf("%d target spans, want 3", len(fetches))
	}
	failed := 0
	for _, f := range fetches {
		a := attrs(f)
		for _, k := range []attribute.Key{"batch.target.outcome", "error.type", "batch.target.result_bytes"} {
			if v, ok := a[k]; ok {
				t.Errorf("a restricted caller's fetch span has %s = %v", k, v.AsInterface())
			}
		}
		if f.Status.Description != "" {
			t.Errorf("a restricted caller's fetch span has status description %q", f.Status.Description)
		}
		ok, set := a["batch.target.ok"]
		if !set {
			t.Error("a restricted caller's fetch span has no batch.target.ok")
		}
		if !ok.AsBool() {
			failed++
			if f.Status.Code != codes.Error {
				t.Errorf("a failed target's span has status %v", f.Status)
			}
		}
	}
	if failed != 1 {
		t.Errorf("%d fetch spans not ok, want 1", failed)
	}
	noMarker(t, spans)
}

// noMarker fails if the URL marker is in any span's name, attribute,
// event, link, status, trace state or resource.
func noMarker(t *testing.T, spans tracetest.SpanStubs) {
	t.Helper()
	if len(spans) == 0 {
		t.Fatal("no spans to check")
	}
	check := func(s tracetest.SpanStub, where, text string) {
		if strings.Contains(text, marker) {
			t.Errorf("span %q: the URL marker is in %s: %q", s.Name, where, text)
		}
	}
	kvs := func(s tracetest.SpanStub, where string, list []attribute.KeyValue) {
		for _, kv := range list {
			check(s, where+" key", string(kv.Key))
			check(s, where+" "+string(kv.Key), kv.Value.String())
		}
	}
	for _, s := range spans {
		check(s, "name", s.Name)
		check(s, "status", s.Status.Description)
		check(s, "trace state", s.SpanContext.TraceState().String())
		kvs(s, "attribute", s.Attributes)
		for _, ev := range s.Events {
			check(s, "event", ev.Name)
			kvs(s, "event attribute", ev.Attributes)
		}
		for _, l := range s.Links {
			kvs(s, "link attribute", l.Attributes)
		}
		if s.Resource != nil {
			kvs(s, "resource", s.Resource.Attributes())
		}
	}
}

// TestSubmitFailure: a refused submit ends its span with the error's kind,
// never its text, and stores nothing.
func TestSubmitFailure(t *testing.T) {
	tp, exp := recorder(t)
	r := batchtest.NewRunner(t, batch.Config{Observer: batchotel.New(batchotel.Config{TracerProvider: tp}), Options: batchsift.Options})
	ts := markedTargets(1)
	ts[0].Options = json.RawMessage(`{"mode":"bogus-` + marker + `"}`)
	_, _, err := r.Submit(t.Context(), batch.Caller{Name: "alice"}, ts)
	if !errors.Is(err, batch.ErrInvalidTarget) {
		t.Fatalf("Submit = %v, want ErrInvalidTarget", err)
	}
	if !strings.Contains(err.Error(), marker) {
		t.Fatalf("the error %q does not carry the marker: the test checks nothing", err)
	}
	s := one(t, exp.GetSpans(), "submit batch")
	if s.Status.Code != codes.Error || s.Status.Description != "invalid_target" || attrs(s)["error.type"].AsString() != "invalid_target" {
		t.Errorf("status %+v, error.type %v; want error invalid_target", s.Status, attrs(s)["error.type"].AsInterface())
	}
	noMarker(t, exp.GetSpans())
}

// TestRestrictedSubmitFailure: a restricted caller's refused submit (or
// retry) marks its span as an error and no more, as its log line leaves the
// error out: no error.type, no status description.
func TestRestrictedSubmitFailure(t *testing.T) {
	tp, exp := recorder(t)
	r := batchtest.NewRunner(t, batch.Config{Observer: batchotel.New(batchotel.Config{TracerProvider: tp}), Options: batchsift.Options})
	agent := batch.Caller{Name: "agent", Restricted: true}
	ts := markedTargets(1)
	ts[0].Options = json.RawMessage(`{"mode":"bogus"}`)
	if _, _, err := r.Submit(t.Context(), agent, ts); !errors.Is(err, batch.ErrInvalidTarget) {
		t.Fatalf("Submit = %v, want ErrInvalidTarget", err)
	}
	if _, _, err := r.Retry(t.Context(), agent, "no-such-job"); !errors.Is(err, batch.ErrNotFound) {
		t.Fatalf("Retry = %v, want ErrNotFound", err)
	}
	spans := byName(exp.GetSpans(), "submit batch")
	if len(spans) != 2 {
		t.Fatalf("%d submit spans, want 2", len(spans))
	}
	for _, s := range spans {
		if v, ok := attrs(s)["error.type"]; ok {
			t.Errorf("a restricted caller's submit span has error.type = %v", v.AsInterface())
		}
		if s.Status.Code != codes.Error || s.Status.Description != "" {
			t.Errorf("a restricted caller's submit span has status %+v, want error without a description", s.Status)
		}
	}
}

// TestRetryOfUnknownJob: a retry of a job the caller does not have records
// no batch.retry_of: the id is the caller's input until a job is found.
func TestRetryOfUnknownJob(t *testing.T) {
	tp, exp := recorder(t)
	r := batchtest.NewRunner(t, batch.Config{Observer: batchotel.New(batchotel.Config{TracerProvider: tp})})
	bogus := "no-such-job-" + marker
	if _, _, err := r.Retry(t.Context(), batch.Caller{Name: "alice"}, bogus); !errors.Is(err, batch.ErrNotFound) {
		t.Fatalf("Retry = %v, want ErrNotFound", err)
	}
	s := one(t, exp.GetSpans(), "submit batch")
	if v, ok := attrs(s)["batch.retry_of"]; ok {
		t.Errorf("a failed retry's span has batch.retry_of = %q", v.AsString())
	}
	noMarker(t, exp.GetSpans())
}

// TestExplicitTraceContext: a submit given a traceparent (and no span in
// its context) is parented on it, and the job stores the submit's.
func TestExplicitTraceContext(t *testing.T) {
	tp, exp := recorder(t)
	store := batchtest.NewStore()
	r := batchtest.NewRunner(t, batch.Config{Store: store, Observer: batchotel.New(batchotel.Config{TracerProvider: tp})})
	tc := batch.TraceContext{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "rojo=00f067aa0ba902b7"}
	job, _, err := r.SubmitWith(t.Context(), batch.Caller{Name: "alice"}, batchtest.Targets("x", 1), batch.SubmitOptions{Trace: tc})
	if err != nil {
		t.Fatal(err)
	}
	s := one(t, exp.GetSpans(), "submit batch")
	if got := s.SpanContext.TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("submit span in trace %s, want the given one", got)
	}
	if got := s.Parent.SpanID().String(); got != "00f067aa0ba902b7" {
		t.Errorf("submit span's parent %s, want the given one", got)
	}
	stored, _, err := store.Get(t.Context(), batchdriver.GetParams{Caller: "alice", JobID: job.ID, JobOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	want := batch.TraceContext{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-" + s.SpanContext.SpanID().String() + "-01", State: "rojo=00f067aa0ba902b7"}
	if stored.Trace != want {
		t.Errorf("stored trace %+v, want the submit span's %+v", stored.Trace, want)
	}
}

// TestExtract: the middleware puts a request's traceparent in its context.
func TestExtract(t *testing.T) {
	var got trace.SpanContext
	h := batchotel.Extract(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = trace.SpanContextFromContext(r.Context())
	}))
	req := httptest.NewRequest("POST", "/v1/batch", nil)
	req.Header.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	h.ServeHTTP(httptest.NewRecorder(), req)
	if !got.IsRemote() || got.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || !got.IsSampled() {
		t.Errorf("span context %+v, want the header's, remote and sampled", got)
	}
	req = httptest.NewRequest("POST", "/v1/batch", nil)
	req.Header.Set("traceparent", "00-00000000000000000000000000000000-b7ad6b7169203331-01")
	h.ServeHTTP(httptest.NewRecorder(), req)
	if got.IsValid() {
		t.Errorf("an all-zero trace id gave span context %+v", got)
	}
}

// TestUnsampledRequest: a job whose request was not sampled is not
// recorded on the draining runner either (the parent-based default
// sampler follows the stored flags), and still drains.
func TestUnsampledRequest(t *testing.T) {
	tp, exp := recorder(t)
	r := batchtest.NewRunner(t, batch.Config{Fetch: markedFetch, Observer: batchotel.New(batchotel.Config{TracerProvider: tp})})
	caller := batch.Caller{Name: "alice"}
	tc := batch.TraceContext{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"} // not sampled
	job, _, err := r.SubmitWith(t.Context(), caller, markedTargets(2), batch.SubmitOptions{Trace: tc})
	if err != nil {
		t.Fatal(err)
	}
	for {
		info, err := r.Wait(t.Context(), caller, job.ID, batch.WaitOptions{Timeout: batch.MaxWait})
		if err != nil {
			t.Fatal(err)
		}
		if info.Status.Finished() {
			if info.Status != batch.JobPartial {
				t.Errorf("job %s, want partial", info.Status)
			}
			break
		}
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if spans := exp.GetSpans(); len(spans) != 0 {
		t.Errorf("%d spans recorded of an unsampled request: %v", len(spans), names(spans))
	}
}
