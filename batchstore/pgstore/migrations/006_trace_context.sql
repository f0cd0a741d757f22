-- 006_trace_context: a job keeps the W3C trace context of the request that
-- submitted it, so that its drain, on whichever node claims it, continues
-- that trace.
--
-- {s} is the store's schema, quoted.
--
-- * job.trace_parent is a traceparent value, '' for none; checked by the
--   runner before it is stored.
-- * job.trace_state is a tracestate value, '' for none.
--
-- A column with a constant default rewrites no row (PostgreSQL 11+).

ALTER TABLE {s}.job ADD COLUMN trace_parent text NOT NULL DEFAULT '',
	ADD COLUMN trace_state text NOT NULL DEFAULT '';
