// Package batchconsole is a read-only operator console for a batch service.
//
// Its HTML pages show the queue, the running jobs, the runners and their
// heartbeats, the newest jobs, the last hour's failures by outcome, the
// webhook outbox, and each caller's share of the byte budget. Each job has
// a page with its targets' statuses and outcomes.
//
// # Getting started
//
// [New] returns a [Handler] over a store that implements [batch.Inspector].
// The SQLite, PostgreSQL and in-memory stores do. Mount it on the host's
// mux, under [Config].Prefix ("/console" by default):
//
//	console, err := batchconsole.New(batchconsole.Config{
//		Store: store, // a batch.Inspector
//		Keys:  []string{operatorKey},
//		TTL:   cfg.TTL, StaleAfter: cfg.StaleAfter, MaxBytes: cfg.MaxBytes,
//	})
//	console.Mount(mux)
//
// # Access
//
// Every route needs an operator key, one of [Config].Keys. A request carries
// it as a bearer token, or as the password of HTTP Basic authentication,
// which a browser asks for. Without a valid key the answer is 401.
// Operator keys must not be callers' keys: the console cannot know those,
// so the host makes sure of it.
//
// # What it never shows
//
// No page carries a target URL, a host name, a webhook URL, a result, or an
// error's text, for any caller. A restricted caller appears by its class
// only, and its targets show their status but not their outcome.
//
// The pages are rendered on the server from embedded templates and assets.
// They work without JavaScript; with it, the live part refreshes in place.
// docs/console.md in the repository says more.
package batchconsole
