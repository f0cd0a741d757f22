-- 007_trace_context: a job keeps the W3C trace context of the request that
-- submitted it, so that its drain, on whichever process claims it,
-- continues that trace.
--
-- * batch_job.trace_parent is a traceparent value, '' for none; checked by
--   the runner before it is stored.
-- * batch_job.trace_state is a tracestate value, '' for none.
--
-- Adding a column with a constant default rewrites no row.

ALTER TABLE batch_job ADD COLUMN trace_parent TEXT NOT NULL DEFAULT '';

ALTER TABLE batch_job ADD COLUMN trace_state TEXT NOT NULL DEFAULT '';
