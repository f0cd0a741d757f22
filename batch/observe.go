package batch

import (
	"context"
	"time"

	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchobserve"
)

// The no-op ends a runner without an Observer uses: package values, so
// that no step allocates.
var (
	endSubmitNop  = func(batchobserve.SubmitEnd) {}
	endJobNop     = func(batchobserve.JobEnd) {}
	endFetchNop   = func(batchobserve.FetchEnd) {}
	endStoreNop   = func(batchobserve.StoreEnd) {}
	endWebhookNop = func(batchobserve.WebhookEnd) {}
	endReapNop    = func(batchobserve.ReapEnd) {}
)

func (r *Runner) observeSubmit(ctx context.Context, ev batchobserve.SubmitEvent) (context.Context, func(batchobserve.SubmitEnd)) {
	if r.obs == nil {
		return ctx, endSubmitNop
	}
	return r.obs.Submit(ctx, ev)
}

// traceOf is the trace context a job created in ctx stores: the
// observer's, else the one the submit was given.
func (r *Runner) traceOf(ctx context.Context, given TraceContext) TraceContext {
	if r.obs == nil {
		return given
	}
	if tc := r.obs.TraceContext(ctx).Clean(); tc.Valid() {
		return tc
	}
	return given
}

func (r *Runner) observeJob(ctx context.Context, c batchdriver.Claimed, claimStart, claimEnd time.Time) (context.Context, func(batchobserve.JobEnd)) {
	if r.obs == nil {
		return ctx, endJobNop
	}
	j := c.Job
	return r.obs.Job(ctx, batchobserve.JobEvent{
		JobID: j.ID, Caller: j.Caller, TargetsTotal: j.TargetsTotal, RetryOf: j.RetryOf,
		Webhook: j.WebhookURL != "", CreatedAt: j.CreatedAt,
		ClaimStart: claimStart, ClaimEnd: claimEnd, Trace: j.Trace.Clean(),
	})
}

func (r *Runner) observeFetch(ctx context.Context, job batchdriver.Job, idx int) (context.Context, func(batchobserve.FetchEnd)) {
	if r.obs == nil {
		return ctx, endFetchNop
	}
	return r.obs.Fetch(ctx, batchobserve.TargetEvent{JobID: job.ID, Caller: job.Caller, Idx: idx})
}

func (r *Runner) observeStore(ctx context.Context, job batchdriver.Job, idx int) (context.Context, func(batchobserve.StoreEnd)) {
	if r.obs == nil {
		return ctx, endStoreNop
	}
	return r.obs.Store(ctx, batchobserve.TargetEvent{JobID: job.ID, Caller: job.Caller, Idx: idx})
}

func (r *Runner) observeWebhook(ctx context.Context, d batchdriver.WebhookDelivery) (context.Context, func(batchobserve.WebhookEnd)) {
	if r.obs == nil {
		return ctx, endWebhookNop
	}
	ev := batchobserve.WebhookAttempt{JobID: d.JobID, Attempt: d.Attempt, Event: EventJobFinished, Status: d.Status}
	if d.Event == batchdriver.HookTargets {
		ev.Event = EventTargetFinished
	}
	// The outbox does not keep the trace; the job does, until it is swept.
	sctx, cancel := storeCtx()
	j, _, err := r.store.Get(sctx, batchdriver.GetParams{Caller: d.Caller, JobID: d.JobID, JobOnly: true})
	cancel()
	if err == nil {
		ev.Trace = j.Trace.Clean()
	}
	return r.obs.Webhook(ctx, ev)
}

func (r *Runner) observeReap(ctx context.Context, reason string) (context.Context, func(batchobserve.ReapEnd)) {
	if r.obs == nil {
		return ctx, endReapNop
	}
	return r.obs.Reap(ctx, batchobserve.ReapEvent{Reason: reason})
}
