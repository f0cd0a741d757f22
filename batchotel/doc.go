// Package batchotel traces batch jobs with OpenTelemetry.
//
// [New] returns a [batch.Observer] that records each job's life as spans:
// its submit, claim, fetches, store writes, final status, webhook attempts
// and reaps. The spans join the trace of the request that submitted the
// job, on whichever node drains it.
//
// # Getting started
//
// Set the observer in the runner's config:
//
//	obs := batchotel.New(batchotel.Config{TracerProvider: tp}) // default: otel.GetTracerProvider()
//	runner, err := batch.New(batch.Config{Store: store, Fetch: fetch, Observer: obs})
//
// A host without an OpenTelemetry HTTP middleware (otelhttp) wraps its
// handler in [Extract]. A submit's context then carries the caller's
// traceparent:
//
//	http.ListenAndServe(addr, batchotel.Extract(mux))
//
// # Spans
//
// Names and attributes follow the messaging conventions where they apply.
// The rest are batch.* attributes:
//
//	submit batch   producer  a Submit or Retry
//	process batch  consumer  a job's drain on this node, from its claim to its final status
//	claim batch    internal  the store's claim that took the job
//	batch target   internal  one target: its fetch, an event "fetched", then the write of its outcome
//	batch webhook  internal  one webhook delivery attempt, a child of the submit span
//	batch reap     internal  a reap that failed jobs or failed itself
//
// The drain is a child of the submit span, not a new trace with a link.
// A failure sets the span's status to Error with a fixed description: a
// status or outcome name, never an error's text.
//
// # Never recorded
//
// No span carries a target URL, a host, a webhook URL, an idempotency key
// or an error's text: the core never hands them to an observer. For a
// restricted caller, a target's span says whether it was ok, not its
// outcome, and a refused submit's span that it failed, not why (no
// error.type), as its log lines do.
//
// # More
//
// docs/operations.md in the repository lists each span's attributes and
// batchd's exporter settings. docs/design/tracing.md says why the drain is
// a child span, and how to measure what tracing costs.
package batchotel
