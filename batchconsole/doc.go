// Package batchconsole is a read-only operator console for a batch
// service: an HTML page that shows the queue, the running jobs, the
// runners and their heartbeats, the newest jobs, the last hour's failures
// by outcome, the webhook outbox and each caller's share of the byte
// budget, and one page per job with its targets' statuses and outcomes.
//
// # Mounting
//
// [New] returns a [Handler] over a store that implements
// [batch.Inspector] (the SQLite, PostgreSQL and in-memory stores do).
// A host mounts it on its own mux with [Handler.Mount], under
// [Opts].Prefix (default "/console"):
//
//	console, err := batchconsole.New(batchconsole.Opts{
//		Store: store, // a batch.Inspector
//		Keys:  []string{operatorKey},
//		TTL:   cfg.TTL, StaleAfter: cfg.StaleAfter, MaxBytes: cfg.MaxBytes,
//	})
//	console.Mount(mux)
//
// # Access
//
// Every route needs an operator key, one of [Opts].Keys. They must not be
// callers' keys, which the console cannot know: the host makes sure of it
// (batchd refuses an admin key that is also a caller's), and an operator
// key is no caller of the batch API. A request carries it as a bearer token
// (Authorization: Bearer KEY) or as the password of HTTP Basic
// authentication (any user name), which is what a browser asks for: a
// request without a valid key gets 401 with a Basic challenge.
//
// # What it shows, and what it never shows
//
// No page and no response of the console carries a target URL, a host
// name, a webhook URL, a result, or the text of an error (a fetcher's
// error may quote its URL), for any caller: the views are built field by
// field from the store's answers, and a job's targets show their index,
// status and outcome only. A restricted caller ([batch.Caller].Restricted)
// is shown by its class only: its jobs' caller column says "restricted"
// and the class, its job's page tells each target's status but not its
// outcome (as its log lines say whether a target was ok, and no more),
// and the byte budget lists the restricted callers of a class as one row
// with their count. The last hour's failures by outcome count every
// caller's, as the metrics' outcome counters do. An operator who needs
// more reads the database.
//
// # Pages
//
// The pages are rendered on the server with html/template, from templates
// and assets embedded in the binary (no CDN, no build step), and read
// without JavaScript: a page without it refreshes itself every few
// seconds. With JavaScript, a small script polls the same URL with
// ?fragment=live and swaps the live part of the page in place, without a
// reload; a button pauses and resumes it. The pages use landmarks,
// headings, table captions and header cells, visible focus and colours of
// at least 4.5:1 contrast; no information is given by colour alone.
//
// Each poll is one [batch.Inspector.Overview] (or InspectJob) call, whose
// cost the stores keep flat as they grow; the console holds no state of
// its own.
package batchconsole
