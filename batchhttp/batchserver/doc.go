// Package batchserver has the pieces a daemon needs to serve the batch
// API of package [batchhttp]. It reads bearer keys and checks them
// ([NewKeyAuth]). It serves metrics ([Metrics]) and readiness and
// liveness probes ([ReadyHandler], [HealthHandler]). It runs the server
// within [Limits] and shuts it down in the right order ([Serve]).
//
// A host builds the handler on the keys, mounts it with the probes and
// the metrics on one mux, and serves the mux:
//
//	keys, err := batchserver.ReadKeyFile("keys") // NAME=SECRET[:restricted] lines, chmod 600
//	auth, err := batchserver.NewKeyAuth(keys)
//	m, err := batchserver.NewMetrics(batchserver.MetricsConfig{Prefix: "sift", Authenticate: auth})
//	m.Add(runner.Metrics(), runner.MetricsHelp())
//	h, err := batchhttp.NewHandler(runner, &batchhttp.HandlerConfig{Authenticate: auth, Observe: m.Observe})
//	h.Mount(mux)
//	mux.Handle("GET /readyz", batchserver.ReadyHandler(runner))
//	mux.Handle("GET /metrics", batchhttp.Instrument("/metrics", m, m.Observe, logger))
//	err = batchserver.Serve(ctx, ln, batchserver.ServerConfig{Handler: mux, Runner: runner, AfterShutdown: store.Close})
//
// Serve returns once ctx is done and everything is closed. It closes the
// runner first, with a context of its own. Then it ends the requests in
// flight. Then it calls AfterShutdown, which closes the store. The zero
// Limits fit the API: a long-poll lasts up to [batch.MaxWait].
//
// A host that runs its own [http.Server] does what Serve does. It sets
// BaseContext to a context it cancels after the runner's Close. It wraps
// its listener with [LimitListener] and sets ConnState to
// [LimitedListener.ConnState], so that idle connections make room for
// new ones. Its WriteTimeout exceeds [batch.MaxWait].
//
// examples/embed is a whole host built this way, in one file.
package batchserver
