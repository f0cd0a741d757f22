// Package batchhttp serves a [batch.Runner] over HTTP as the /v1/batch API.
//
// It also has a [Client] for that API, a Standard Webhooks sender, and the
// kit a host daemon needs around it: keys, readiness, metrics, and a server
// with limits and the right shutdown order.
//
// # Getting started
//
// Build a [Handler] from the runner and its hooks, then mount it:
//
//	keys, err := batchserver.ReadKeyFile("keys")        // NAME=SECRET[:restricted] lines, chmod 600
//	auth, err := batchserver.NewKeyAuth(keys)           // or the host's own CallerFunc
//	m, err := batchserver.NewMetrics(batchserver.MetricsConfig{Prefix: "sift", Authenticate: auth})
//	m.Add(runner.Metrics(), runner.MetricsHelp())
//	h, err := batchhttp.NewHandler(runner, &batchhttp.HandlerConfig{
//		Authenticate: auth,
//		Precheck:     guard.PrecheckFunc,             // batchnet: the same rules as the fetcher's dialer
//		Logger:       logger,
//		Observe:      m.Observe,
//	})
//	h.Mount(mux)                                      // /v1/batch and /v1/batch/
//	mux.Handle("GET /readyz", batchserver.ReadyHandler(runner))
//	mux.Handle("GET /metrics", batchhttp.Instrument("/metrics", m, m.Observe, logger))
//	err = batchserver.Serve(ctx, ln, batchserver.ServerConfig{Handler: mux, Runner: runner, AfterShutdown: store.Close})
//
// [HandlerConfig].Prefix serves the API under a path such as "/api".
// examples/embed is a whole host built this way, in one file.
//
// # The API
//
// The routes submit, read, stream, retry, cancel and list jobs; [Routes]
// lists them. The wire shapes are the types of wire.go, such as
// [SubmitRequest] and [StatusResponse]. Every error has one shape,
// [ErrorResponse], with a stable code: branch on the Code constants.
// openapi.json is the contract as an OpenAPI 3.1 document; [OpenAPIHandler]
// serves it, and the tests hold every answer against it.
//
// Every request is authenticated first. Another caller's job gets the same
// 404 as an unknown id, byte for byte. No log line carries a target URL, a
// host name or an idempotency key, for any caller.
//
// # Serving
//
// [Serve] applies [Limits] and shuts down in the order a batch host needs:
// the runner, then the server, then the store. A host with its own
// [http.Server] keeps that order, as [Serve]'s documentation lists it.
//
// # More
//
// In the repository, docs/http-api.md describes each route, status and
// error code, and docs/webhooks.md what a receiver gets. The reasoning
// behind the limits and the shutdown order is in
// docs/design/http-server.md.
package batchhttp
