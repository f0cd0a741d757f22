// Package batchhttp serves a [batch.Runner] over HTTP as the /v1/batch wire
// API, provides a [Client] for it, and has the rest of what a host daemon
// needs around it: readiness, metrics, a server with limits and the right
// shutdown order, bearer keys, and a Standard Webhooks sender.
//
// A host builds a [Handler] with [NewHandler] from the runner and its hooks
// ([HandlerOpts]: authenticate, pre-check, logger, observe) and mounts it on
// its mux with [Handler.Mount]; [HandlerOpts].Prefix serves it under a path
// such as "/api" (or put [http.StripPrefix] in front of a handler without
// one):
//
//	keys, err := batchhttp.ReadKeyFile("keys")        // NAME=SECRET[:restricted] lines, chmod 600
//	auth, err := batchhttp.NewKeyAuth(keys)           // or the host's own CallerFunc
//	m, err := batchhttp.NewMetrics(batchhttp.MetricsOpts{Prefix: "sift", Authenticate: auth})
//	m.Add(runner.Metrics(), runner.MetricsHelp())
//	h, err := batchhttp.NewHandler(runner, &batchhttp.HandlerOpts{
//		Authenticate: auth,
//		Precheck:     guard.PrecheckFunc,             // batchnet: the same rules as the fetcher's dialer
//		Logger:       logger,
//		Observe:      m.Observe,
//	})
//	h.Mount(mux)                                      // /v1/batch and /v1/batch/
//	mux.Handle("GET /readyz", batchhttp.ReadyHandler(runner))
//	mux.Handle("GET /metrics", batchhttp.Instrument("/metrics", m, m.Observe, logger))
//	err = batchhttp.Serve(ctx, ln, batchhttp.ServerOpts{Handler: mux, Runner: runner, AfterShutdown: store.Close})
//
// examples/embed is a whole host built this way, in one file.
//
// # Routes
//
//	POST   /v1/batch                 submit        202 {"success":true,"job_id","status","targets","reused"}
//	GET    /v1/batch/{id}            status        200 {"job_id","status","error"?,"retry_of"?,"targets_total","targets_done",
//	                                                    "created_at","expires_at","targets":[TargetStatus…]}
//	GET    /v1/batch/{id}?results=1  with results  each done target also has "result", its stored envelope
//	GET    /v1/batch/{id}/{idx}      one result    200 {"job_id","idx","url","status","outcome"?,"retryable"?,"retry_of_idx"?,
//	                                                    "result"?,"error"?,"hint"?,"expires_at"}
//	GET    /v1/batch/{id}/results    stream        200 application/x-ndjson, one TargetStatus with its result per line
//	POST   /v1/batch/{id}/retry      retry         202 as a submit, with "retry_of"
//	DELETE /v1/batch/{id}            cancel        200 {"success":true,"status":"cancelled"}
//	GET    /v1/batch[?limit=n]       list          200 {"jobs":[{"job_id","status","retry_of"?,"targets_total","targets_done",
//	                                                    "created_at","expires_at"}]}
//	GET    /v1/batch/webhook-secret  webhook key   200 {"caller","secret"}: the caller's own (see Webhooks)
//
// A TargetStatus is {"idx","url","status","outcome"?,"retryable"?,
// "retry_of_idx"?,"error"?,"hint"?,"result"?}. The shapes are the types of
// wire.go ([SubmitResponse], [StatusResponse], [TargetStatus],
// [ResultResponse], [CancelResponse], [ListResponse]). Times are RFC 3339
// in UTC, to the second. Every JSON response carries Cache-Control:
// no-store, and every response an X-Request-Id (see [RequestIDHeader]).
//
// Outcomes. Every finished target carries "outcome", a [batch.Outcome], and
// "retryable", [batch.Outcome.Retryable]: an agent tells a failure worth
// retrying from a permanent one without parsing "error".
//
// Errors. Every error has one shape, [ErrorResponse]:
// {"success":false,"code":"…","error":"…","hint"?,"request_id":"…"}. code
// is one of the Code constants, stable across releases; error is English
// for a person. The statuses and messages: 400
// "invalid batch: …" ([CodeInvalidBatch]); 422 "blocked: target <idx>:
// <reason>" ([CodeBlocked]; no job is created); 422 "invalid option:
// target <idx>: <reason>" ([CodeInvalidOption]: the host's
// [HandlerOpts].CheckTarget refused a target's options); 422 "too many targets (max
// N)" ([CodeTooManyTargets]); 429 "busy: a batch of yours is still running"
// with Retry-After: 30 ([CodeCallerBusy]); 429 "batch jobs busy" with
// Retry-After: 60 ([CodeJobsBusy]); 413 for a body over [MaxBodyBytes]
// ([CodeBodyTooLarge]); 404 "not found" ([CodeNotFound]); 409 "job already
// finished" ([CodeJobFinished]). Besides: 400 "invalid request: …" for a
// bad query parameter ([CodeInvalidRequest]); 401 from the authenticator
// ([CodeUnauthorized]); 405 "method not allowed" with an Allow header; 409
// [CodeJobLive] and [CodeNothingToRetry] for a retry; 503 "batch jobs
// unavailable" with Retry-After: 5 while the runner is not started,
// closing, or its store timed out ([CodeUnavailable]); 500 "internal
// error" for anything else, whose text is never sent.
//
// Retry. POST /v1/batch/{id}/retry makes a new job of the finished job's
// targets that did not end done, as [batch.Runner.Retry] describes; the
// answer is a submit's, with "retry_of". Its targets passed the pre-check
// when they were submitted and are not checked again; the fetcher's
// connect-time guard holds for them as for any target.
//
// Results stream. GET /v1/batch/{id}/results writes one NDJSON line per
// finished target, in idx order, holding one result in memory at a time.
// ?follow=1 keeps the stream open, writing each target as it finishes,
// until the job ends or [batch.MaxWait] has passed; ?after=N starts after
// target N. The stream ends with the [StatusTrailer] trailer, the job's
// status then: a live status means the cap ended it, and the client
// resumes with ?after= the last idx it read ([Client.Results] does). A
// stream that fails after its header (the job swept mid-stream, a store
// error) is cut short, without the trailer.
//
// Every request is authenticated first, whatever its path. A job of another
// caller, an unknown id, an id that cannot be a job id and an idx outside
// the job all get the same 404, byte for byte.
//
// # OpenAPI
//
// openapi.json is the contract of these routes as an OpenAPI 3.1 document:
// every route, status, header and body shape, for client generators. It is
// embedded ([OpenAPI]) and served by [OpenAPIHandler], which a host mounts
// at [OpenAPIPath]; it needs no key. The package's tests hold every answer
// of the handler against it.
//
// # Submit body
//
// The body is {"targets":[{"url","mode","question","pages","grep","jq",
// "context","recover"}, …]}, at most [MaxBodyBytes]. It is decoded strictly:
// unknown fields, keys that differ from the field names in case only,
// duplicate keys, wrong types, invalid UTF-8 and data after the object are
// all 400; null counts as an absent field. The Content-Type is not checked.
// The order of checks is: size (413), syntax and shape (400), the target
// count (422), the pre-check of each URL in order (422), the host's check
// of each target's options in order (422), then the runner's
// own validation (400 for an empty url or unknown mode) and caps (429).
//
// # Long-polls, expiry and the job list
//
// Long-poll. GET /v1/batch/{id}?wait=<d> answers as soon as the job is
// finished, or, with since=<n>, as soon as its targets_done differs from n;
// otherwise when d has passed, with the summary as it is then. d is a Go
// duration ("30s") or a number of seconds ("30"), capped at 60s. since
// without wait is ignored. The wait holds no store connection: it runs
// [batch.Runner.Wait], which re-reads the store when the local runner
// changes a job and every PollInterval, so it also sees progress made by
// another runner sharing the store. It ends when the client goes away. A
// host's http.Server WriteTimeout must exceed 60s for long-polls to work,
// and since http.Server.Shutdown waits for them, a host that wants them to
// end at once cancels the context it returns from http.Server.BaseContext.
//
// Expiry. Every status, result and list body carries "expires_at": when the
// finished job may be swept (its lease plus the TTL). A status or result
// read by the owner bumps the lease first, so the value it shows includes
// that bump. Listing does not bump leases.
//
// List. GET /v1/batch lists the caller's own jobs, newest first: limit
// defaults to [DefaultListLimit] and is capped at [MaxListLimit]; a limit
// below 1 or not a number is 400. An agent that lost a job id finds it here.
//
// # Webhooks
//
// A submit may carry "webhook": {"url": "https://…"} beside "targets"
// ([SubmitRequest]). The URL passes the same pre-check as a target (422
// "blocked: webhook: <reason>"), then the runner's check (400 "invalid
// batch: webhook: …" for anything but an absolute http or https URL; 422
// "webhooks are not enabled on this server" for a runner without
// Config.Deliver). It is part of the idempotency key: the same list with
// the same webhook reuses the job, with another one it is a new job. The
// owner's status answers echo it as "webhook": {"url"}; nobody else sees
// the job at all. It never reaches a log line.
//
// When the job finishes, [WebhookSender] (the runner's Config.Deliver)
// POSTs a [WebhookPayload] as the Standard Webhooks specification says:
//
//	POST <url>
//	content-type: application/json
//	webhook-id: msg_<22 base64url chars> the same on every attempt (an HMAC of the job id)
//	webhook-timestamp: <unix seconds>   of this attempt
//	webhook-signature: v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">
//
//	{"type":"batch.finished","timestamp":"<finished_at>","data":{"job_id","status","error"?,
//	 "targets_total","targets_done","targets_ok","targets_failed","created_at","finished_at","expires_at"}}
//
// The key is the secret of the job's caller, which no other caller holds:
// the deployment keeps one master secret, "whsec_" and the standard base64
// of 24 to 64 random bytes ([NewWebhookSecret]), and [CallerWebhookSecret]
// derives each caller's from it, "whsec_" and the base64 of
// HMAC-SHA256(master key, "batchkit webhook v1\x00" + caller name). The
// operator hands each caller its own (batchd prints one with
// -print-webhook-secret NAME; a host calls CallerWebhookSecret or
// [WebhookSender.CallerSecret]), or the caller fetches it with GET
// /v1/batch/webhook-secret ([WebhookSecretResponse]; served when
// [HandlerOpts].WebhookSecret is set, else 422 webhooks_disabled), so caller
// A cannot sign an event caller B's receiver accepts. A Go receiver checks a delivery with [VerifyWebhook]
// and its secret, others with any Standard Webhooks library. A 2xx answer delivers the event; anything else (a redirect
// included: the sender does not follow them) is retried by the runner. The
// sender connects through the client the host gives it, which should
// carry the same connect-time guard as the fetcher's.
//
// The runner delivers from a pool (Config.WebhookWorkers slots, each
// delivery in its own), claims round-robin across callers, and keeps at
// most Config.WebhookInFlightPerCaller of one caller's deliveries in
// flight, so one caller's receiver that hangs holds a slot or two and no
// one else's delivery waits for it. A submit (or retry) with a webhook by
// a caller with Config.WebhookPendingPerCaller events pending is 429
// "webhooks_busy" ([CodeWebhooksBusy], Retry-After: 60).
//
// # Limits
//
// A request that fails authentication is answered at once and its
// connection closed: its body is never read, so a client that announces a
// body and stalls cannot hold the connection, not even until the read
// timeout. A submit's body must arrive
// within [HandlerOpts].BodyTimeout (10s; then 408) and be at most
// [MaxBodyBytes] (then 413). A ?results=1 answer is written one result at a
// time, carries at most [HandlerOpts].MaxResultsBytes of results (8 MiB;
// a larger job is 422 "results too large for one answer", with a hint to
// read GET /v1/batch/{id}/{idx}), and at most
// [HandlerOpts].MaxResultsInFlight (4) are written at once (then 429 with
// Retry-After: 1). One caller holds at most [HandlerOpts].MaxWaitsPerCaller
// long-polls (8; then 429 waits_busy) and [HandlerOpts].MaxStreamsPerCaller
// results streams (4; then 429 streams_busy) at once, both with
// Retry-After: 5 and counted per handler (per node), so that no caller
// holds every connection; a stream line holds its result once, as stored.
// Any other refusal whose body was not read closes its connection within a
// quarter of a second. [Serve] does the same for a refusal written before
// the Handler runs, by a host's own auth middleware say; a host that runs
// its own server wraps its handler in [CloseRefused]. The server's own
// limits (header size and timeouts, idle connections, the number of
// connections, which idle ones are closed to make room) are [Limits],
// which [Serve] applies; their defaults fit this API.
//
// # Serving and shutdown
//
// [Serve] runs the host's mux until its context ends and then shuts down
// in the order a batch host needs: the runner first, with a context of its
// own (a signal's context is already done, and a runner closed with it
// returns at once, leaving its jobs running for the next start to fail),
// which ends long-polls and cuts in-flight fetches short; then the
// server's Shutdown, which first gives those long-polls a moment to write
// their answers; then the server's base context, so that streams and slow
// host routes see theirs done, for the rest of the grace period; then the
// store. A host that runs its
// own [http.Server] does the same: BaseContext from a context it cancels,
// [CloseRefused] around its handler, [LimitListener] around its listener
// with its [LimitedListener.ConnState] as the server's ConnState (so that
// idle connections make room for new ones), WriteTimeout above
// [batch.MaxWait].
//
// # A host's own routes
//
// [ReadyHandler] (GET /readyz: 200 while the runner and its store can
// serve, else 503 with Retry-After) and [HealthHandler] (GET /healthz)
// need no key. [Metrics] serves GET /metrics with # HELP and # TYPE lines
// for every family, optionally behind a key; its [Metrics.Observe] is the
// [ObserveFunc] that gives every route its series. [Instrument] wraps a
// host route with a request id, one observation and one debug log line
// that never carries the URL. [ReadKeyFile] reads the keys of a
// [NewKeyAuth] from a file, refusing one that others can read.
//
// # Logs and metrics
//
// Each request logs exactly one line, "batch http", at debug level (at
// error for a 5xx, so that a busy API does not flood the log), with the route label,
// the HTTP status, the caller, the job id, the target count, the job status
// and reused flag when known, and for an error a fixed code (such as
// "blocked" or "not_found") instead of the message. No line carries a
// target URL, a host name, an idem key or a pre-check reason, for any
// caller; the cause of a 500 is logged for unrestricted callers only.
//
// The [ObserveFunc] gets a fixed route label, the path of one of [Routes]
// or [RouteOther], never a job id; a client that went away before the
// answer is counted as status 499.
package batchhttp
