package batchotel

import (
	"context"
	"errors"
	"net/http"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchobserve"
)

// ScopeName is the instrumentation scope of the spans.
const ScopeName = "github.com/siftfetch/batchkit/batchotel"

// Config configures an [Observer].
type Config struct {
	// TracerProvider makes the tracer. Defaults to otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
}

// Observer is a [batch.Observer] that records spans. Make one with [New];
// it is safe for concurrent use.
type Observer struct {
	tracer trace.Tracer
}

var _ batchobserve.Observer = (*Observer)(nil)

// New returns an Observer for cfg.
func New(cfg Config) *Observer {
	tp := cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &Observer{tracer: tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL))}
}

// w3c is the propagator of the stored form: the core stores W3C trace
// context, whatever propagator the host installed globally.
var w3c propagation.TraceContext

// Extract returns a handler that puts the W3C trace context of each
// request's traceparent and tracestate headers into its context before it
// calls next, without starting a span: for a host that does not use
// otelhttp, whose server span would otherwise be the submit's parent.
func Extract(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("traceparent") != "" {
			r = r.WithContext(w3c.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
		}
		next.ServeHTTP(w, r)
	})
}

// FromTraceContext returns ctx with tc as its remote parent span context,
// or ctx itself when tc is not valid.
func FromTraceContext(ctx context.Context, tc batch.TraceContext) context.Context {
	if !tc.Valid() {
		return ctx
	}
	return w3c.Extract(ctx, traceCarrier{parent: tc.Parent, state: tc.State})
}

// traceCarrier is a TextMapCarrier of the two W3C fields, without a map.
type traceCarrier struct{ parent, state string }

func (c traceCarrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.parent
	case "tracestate":
		return c.state
	}
	return ""
}
func (c traceCarrier) Set(string, string) {}
func (c traceCarrier) Keys() []string     { return []string{"traceparent", "tracestate"} }

// injector receives Inject's two fields.
type injector struct{ parent, state string }

func (c *injector) Get(string) string { return "" }
func (c *injector) Set(key, value string) {
	switch key {
	case "traceparent":
		c.parent = value
	case "tracestate":
		c.state = value
	}
}
func (c *injector) Keys() []string { return nil }

// Attributes common to every span.
var (
	attrSystem      = semconv.MessagingSystemKey.String("batchkit")
	attrDestination = semconv.MessagingDestinationName("batch")
)

// Attribute keys of batch's own.
const (
	keyJobID         = attribute.Key("batch.job.id")
	keyCaller        = attribute.Key("batch.caller")
	keyTargets       = attribute.Key("batch.targets")
	keyReused        = attribute.Key("batch.reused")
	keyWebhook       = attribute.Key("batch.webhook")
	keyRetryOf       = attribute.Key("batch.retry_of")
	keyJobStatus     = attribute.Key("batch.job.status")
	keyTargetsTotal  = attribute.Key("batch.job.targets_total")
	keyTargetsDone   = attribute.Key("batch.job.targets_done")
	keyStopped       = attribute.Key("batch.job.stopped")
	keyIdx           = attribute.Key("batch.target.idx")
	keyOutcome       = attribute.Key("batch.target.outcome")
	keyOK            = attribute.Key("batch.target.ok")
	keyResultBytes   = attribute.Key("batch.target.result_bytes")
	keyStoreAttempts = attribute.Key("batch.store.attempts")
	keyHookAttempt   = attribute.Key("batch.webhook.attempt")
	keyHookEvent     = attribute.Key("batch.webhook.event")
	keyHookOutcome   = attribute.Key("batch.webhook.outcome")
	keyHookRetryIn   = attribute.Key("batch.webhook.retry_in_ms")
	keyReapReason    = attribute.Key("batch.reap.reason")
	keyReapJobs      = attribute.Key("batch.reap.jobs")
)

// Submit implements [batch.Observer]: a producer span in ctx's trace, or
// in ev.Trace's when ctx carries none.
func (o *Observer) Submit(ctx context.Context, ev batchobserve.SubmitEvent) (context.Context, func(batchobserve.SubmitEnd)) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = FromTraceContext(ctx, ev.Trace)
	}
	op := "submit"
	attrs := []attribute.KeyValue{attrSystem, attrDestination,
		semconv.MessagingOperationName(op), semconv.MessagingOperationTypeSend,
		keyCaller.String(ev.Caller.Name), keyWebhook.Bool(ev.Webhook)}
	if ev.RetryOf == "" {
		attrs = append(attrs, keyTargets.Int(ev.Targets))
	}
	ctx, span := o.tracer.Start(ctx, "submit batch", trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	restricted := ev.Caller.Restricted
	return ctx, func(res batchobserve.SubmitEnd) {
		switch {
		case res.Err != nil && restricted:
			// As its log line: that it failed, not why.
			span.SetStatus(codes.Error, "")
		case res.Err != nil:
			setError(span, submitErrorType(res.Err))
		default:
			span.SetAttributes(semconv.MessagingMessageID(res.JobID), keyJobID.String(res.JobID),
				keyReused.Bool(res.Reused), keyJobStatus.String(string(res.Status)))
			if ev.RetryOf != "" {
				// Only once the retry took: the id is the caller's
				// input until the runner found its job.
				span.SetAttributes(keyRetryOf.String(ev.RetryOf))
			}
		}
		span.End()
	}
}

// TraceContext implements [batch.Observer]: the W3C form of ctx's span
// context.
func (o *Observer) TraceContext(ctx context.Context) batch.TraceContext {
	var c injector
	w3c.Inject(ctx, &c)
	return batch.TraceContext{Parent: c.parent, State: c.state}
}

// Job implements [batch.Observer]: the job's process span, a child of its
// submitter's stored context, with the claim as its first child.
func (o *Observer) Job(ctx context.Context, ev batchobserve.JobEvent) (context.Context, func(batchobserve.JobEnd)) {
	ctx = FromTraceContext(ctx, ev.Trace)
	ctx, span := o.tracer.Start(ctx, "process batch",
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(ev.ClaimStart),
		trace.WithAttributes(attrSystem, attrDestination,
			semconv.MessagingOperationName("process"), semconv.MessagingOperationTypeProcess,
			semconv.MessagingMessageID(ev.JobID), keyJobID.String(ev.JobID),
			keyCaller.String(ev.Caller.Name), keyTargetsTotal.Int(ev.TargetsTotal)))
	_, claim := o.tracer.Start(ctx, "claim batch", trace.WithTimestamp(ev.ClaimStart),
		trace.WithAttributes(attrSystem, attrDestination,
			semconv.MessagingOperationName("claim"), semconv.MessagingOperationTypeReceive,
			semconv.MessagingMessageID(ev.JobID), keyJobID.String(ev.JobID)))
	claim.End(trace.WithTimestamp(ev.ClaimEnd))
	ctx = context.WithValue(ctx, slotKey{}, &targetSlot{})
	return ctx, func(res batchobserve.JobEnd) {
		span.SetAttributes(keyJobStatus.String(string(res.Status)), keyTargetsDone.Int(res.TargetsDone))
		switch {
		case res.Stopped != "":
			span.SetAttributes(keyStopped.String(res.Stopped))
			if res.Stopped != "closed" {
				setError(span, res.Stopped)
			}
		case res.Status == batch.JobFailed:
			setError(span, string(res.Status))
		}
		span.End()
	}
}

// slotKey is the context key of a job's [targetSlot].
type slotKey struct{}

// targetSlot holds, between a target's fetch and its write, the target's
// span: the job's targets run one at a time, so one slot per job serves.
type targetSlot struct{ span trace.Span }

// Fetch implements [batch.Observer]: it starts the target's span, which
// the target's write ends (see Store).
func (o *Observer) Fetch(ctx context.Context, ev batchobserve.TargetEvent) (context.Context, func(batchobserve.FetchEnd)) {
	ctx, span := o.tracer.Start(ctx, "batch target",
		trace.WithAttributes(keyJobID.String(ev.JobID), keyIdx.Int(ev.Idx)))
	restricted := ev.Caller.Restricted
	slot, _ := ctx.Value(slotKey{}).(*targetSlot)
	return ctx, func(res batchobserve.FetchEnd) {
		if !span.IsRecording() { // sampled out: nothing to add
			span.End()
			return
		}
		switch {
		case res.Status == "": // cut short by Close: no write follows
			span.SetAttributes(keyStopped.String("closed"))
			span.End()
			return
		case restricted:
			span.SetAttributes(keyOK.Bool(res.Status == batch.TargetDone))
			if res.Status != batch.TargetDone {
				span.SetStatus(codes.Error, "")
			}
		default:
			span.SetAttributes(keyOutcome.String(string(res.Outcome)))
			if res.Status == batch.TargetDone {
				span.SetAttributes(keyResultBytes.Int(res.Bytes))
			} else {
				setError(span, string(res.Outcome))
			}
		}
		if slot == nil { // not in a job's context: no write will end it
			span.End()
			return
		}
		span.AddEvent("fetched")
		slot.span = span
	}
}

// Store implements [batch.Observer]: the write ends the target's span
// that its fetch started, or, without one, a span of its own.
func (o *Observer) Store(ctx context.Context, ev batchobserve.TargetEvent) (context.Context, func(batchobserve.StoreEnd)) {
	restricted := ev.Caller.Restricted
	var span trace.Span
	if slot, _ := ctx.Value(slotKey{}).(*targetSlot); slot != nil && slot.span != nil {
		span, slot.span = slot.span, nil
		ctx = trace.ContextWithSpan(ctx, span)
	} else {
		ctx, span = o.tracer.Start(ctx, "batch target",
			trace.WithAttributes(keyJobID.String(ev.JobID), keyIdx.Int(ev.Idx)))
	}
	return ctx, func(res batchobserve.StoreEnd) {
		if !span.IsRecording() {
			span.End()
			return
		}
		span.SetAttributes(keyStoreAttempts.Int(res.Attempts))
		switch {
		case res.Err != nil && restricted: // no error.type, as for its fetch
			span.SetStatus(codes.Error, "")
		case res.Err != nil:
			setError(span, storeErrorType(res.Err))
		default:
			span.SetAttributes(keyJobStatus.String(string(res.Status)))
		}
		span.End()
	}
}

// Webhook implements [batch.Observer]: a span per attempt, in the job's
// trace while the job is stored.
func (o *Observer) Webhook(ctx context.Context, ev batchobserve.WebhookAttempt) (context.Context, func(batchobserve.WebhookEnd)) {
	ctx = FromTraceContext(ctx, ev.Trace)
	attrs := []attribute.KeyValue{keyJobID.String(ev.JobID), keyHookAttempt.Int(ev.Attempt), keyHookEvent.String(ev.Event)}
	if ev.Status != "" {
		attrs = append(attrs, keyJobStatus.String(string(ev.Status)))
	}
	ctx, span := o.tracer.Start(ctx, "batch webhook", trace.WithAttributes(attrs...))
	return ctx, func(res batchobserve.WebhookEnd) {
		span.SetAttributes(keyHookOutcome.String(res.Outcome))
		switch res.Outcome {
		case "retry":
			span.SetAttributes(keyHookRetryIn.Int64(res.RetryIn.Milliseconds()))
			setError(span, res.Outcome)
		case "dropped":
			setError(span, res.Outcome)
		}
		if res.Err != nil && res.Outcome != "retry" && res.Outcome != "dropped" {
			setError(span, storeErrorType(res.Err))
		}
		span.End()
	}
}

// Reap implements [batch.Observer]. Most reaps (one per heartbeat) fail
// nothing: only one that failed jobs, or failed itself, is recorded, as a
// span of its own from its start.
func (o *Observer) Reap(ctx context.Context, ev batchobserve.ReapEvent) (context.Context, func(batchobserve.ReapEnd)) {
	start := time.Now()
	return ctx, func(res batchobserve.ReapEnd) {
		if res.Jobs == 0 && res.Err == nil {
			return
		}
		_, span := o.tracer.Start(ctx, "batch reap", trace.WithTimestamp(start),
			trace.WithAttributes(keyReapReason.String(ev.Reason), keyReapJobs.Int(res.Jobs)))
		if res.Err != nil {
			setError(span, storeErrorType(res.Err))
		}
		span.End()
	}
}

// setError marks span failed with the low-cardinality kind of failure as
// both its error.type and its status description.
func setError(span trace.Span, kind string) {
	span.SetAttributes(semconv.ErrorTypeKey.String(kind))
	span.SetStatus(codes.Error, kind)
}

// submitErrors name the sentinels a submit fails with, for error.type.
var submitErrors = []struct {
	err  error
	name string
}{
	{batch.ErrInvalidCaller, "invalid_caller"},
	{batch.ErrNoTargets, "no_targets"},
	{batch.ErrTooManyTargets, "too_many_targets"},
	{batch.ErrInvalidTarget, "invalid_target"},
	{batch.ErrCallerBusy, "caller_busy"},
	{batch.ErrWebhooksBusy, "webhooks_busy"},
	{batch.ErrBusy, "busy"},
	{batch.ErrInvalidWebhook, "invalid_webhook"},
	{batch.ErrWebhooksDisabled, "webhooks_disabled"},
	{batch.ErrNotStarted, "not_started"},
	{batch.ErrClosed, "closed"},
	{batch.ErrNotFound, "not_found"},
	{batch.ErrLive, "live"},
	{batch.ErrNothingToRetry, "nothing_to_retry"},
	{batch.ErrUnavailable, "unavailable"},
	{context.DeadlineExceeded, "timeout"},
	{context.Canceled, "canceled"},
}

func submitErrorType(err error) string {
	for _, e := range submitErrors {
		if errors.Is(err, e.err) {
			return e.name
		}
	}
	return semconv.ErrorTypeOther.Value.AsString()
}

func storeErrorType(err error) string {
	switch {
	case errors.Is(err, batchdriver.ErrNotHeld):
		return "not_held"
	case errors.Is(err, batch.ErrNotFound):
		return "not_found"
	case errors.Is(err, batch.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return semconv.ErrorTypeOther.Value.AsString()
}
