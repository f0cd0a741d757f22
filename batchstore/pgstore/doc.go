// Package pgstore is the PostgreSQL [batch.Store]: several batchkit nodes
// (daemons behind a load balancer) share one database, and any node
// accepts, drains, reads and cancels any job, while the caps and
// idempotency hold across the fleet. It is built on
// github.com/jackc/pgx/v5 (pgxpool) and passes batchdrivertest.TestStore,
// batchdrivertest.TestRunner and batchdrivertest.TestStoreReopen, cluster cases
// included: its [Store.Capabilities] say Shared.
//
//	store, err := pgstore.Open(ctx, "postgres://batch@db.internal/app", pgstore.Options{})
//	if err != nil { … }            // errors.Is(err, batch.ErrUnavailable): the server cannot serve now
//	defer store.Close()            // after the runner's Close
//	runner, err := batch.New(batch.Config{Store: store, Fetch: fetch, RunnerID: hostname})
//
// [Open] owns its pool. [New] takes a pool the host owns, for a host that
// keeps its own tables in the same database.
//
// The package is part of batchkit's main module, not a module of its own:
// the README's one go test ./... runs its tests with everyone else's, and
// a release carries one version. Go compiles only the packages a program
// imports, and batch/deps_test.go checks that no package but this one
// imports pgx, over the whole import graph: a host that uses the SQLite
// store, or none, never compiles pgx; it only sees pgx listed in go.mod.
//
// # Schema and migrations
//
// Every table lives in one schema ([Options.Schema], "batchkit" by
// default), and every statement names it, so the store does not depend on
// search_path. The schema is created by embedded, versioned migrations
// (migrations/NNN_name.sql), each applied once in its own transaction and
// recorded in the schema's own table schema_migrations. A node that starts
// on a schema already at its version reads one row; otherwise it takes a
// session advisory lock keyed by the schema on one connection, so that of
// several nodes starting at once one migrates and the others wait, then
// find nothing to do (CREATE … IF NOT EXISTS is not safe against a
// concurrent create). A schema newer than the build is refused with
// [ErrSchema]. PostgreSQL 14 or later is required.
//
//   - job: a row per job; a partial index each for the caps (live jobs),
//     the claim (queued jobs by age), the reaper (held jobs by runner) and
//     the sweep and eviction (released finished jobs by lease), so that
//     each stays flat as finished jobs accumulate; a test pins the plans.
//   - target: a row per target. The result envelope is bytea with lz4
//     compression, out of line once past about 2 KB, so a status summary,
//     which never names the result column, costs the same whatever the
//     results weigh. URLs, errors and hints are bytea too, stored byte for
//     byte (text would refuse a NUL or invalid UTF-8).
//   - runner: a heartbeat row per runner.
//   - stat: the byte counter (see Byte budget).
//   - caller_bytes: the byte counter of each caller, a row per caller with
//     released bytes, kept by triggers on job and indexed by bytes, most
//     first (see Byte budget); job_evict, a partial index of each caller's
//     released finished jobs by lease, serves the eviction.
//   - webhook: the webhook outbox, a row per pending event (see the
//     guarantees below); job.webhook is a job's webhook URL, NULL for none.
//
// # The clock
//
// A call without a Now (what a runner without Config.Now makes: see the
// clock note on [batch.CreateParams]) is on the database's clock for every
// time it writes and compares: leases, creation and finish times,
// heartbeats, staleness and the outbox's due times, so that the nodes'
// clocks need not agree. Its bounds (SweepParams.TTL,
// ReapParams.StaleAfter, the webhook lease and retry) are ages taken from
// the database's now(), the start of the transaction; a heartbeat is a
// statement of its own. Each statement gets the clock as one nullable
// parameter, coalesce($n, now()). A call with a Now uses that instant
// instead: the conformance suites' fake clocks reach the store that way,
// and a cluster whose runners have a Config.Now needs clocks that agree.
//
// # What each guarantee across nodes rests on
//
// Every transaction sets READ COMMITTED itself, whatever the server's
// default: each statement sees what committed before it started, which
// the locks below rely on.
//
//   - Caps and reuse ([Store.Create]): a transaction-scoped advisory lock
//     on the caller, taken by a statement of its own before the reuse
//     lookup and the caller's live count, then the global advisory lock
//     before the count of all live jobs and the insert. Creates of one
//     caller, and all inserts, run one at a time across the cluster; two
//     identical submits make one job, and racing callers never exceed a
//     cap. The locks are held until the commit (its WAL flush included),
//     which bounds creates to roughly one per commit latency, cluster-wide.
//     SERIALIZABLE with retries was measured against this
//     (BenchmarkCreateCaps: 16 submitters, 8 callers, one in ten a
//     resubmit, on a 2-core machine with the server on it): the locks
//     made 4 to 7 times the creates per second (690–1,350/s against
//     180–190/s) at a tenth of the p99 (58–79 ms against 590–660 ms),
//     and serializable retried 7.7 to 8 times per create.
//   - Claims ([Store.Claim]): one statement, FOR UPDATE SKIP LOCKED on the
//     oldest queued job, that makes it running, held by the runner with
//     target 0 in flight, and records the runner's heartbeat. Concurrent
//     claims take different jobs without waiting. SKIP LOCKED may return
//     nothing while a job is queued (another transaction holds its row for
//     a moment); Claim then looks again, a few times, before it reports an
//     empty queue.
//   - The drain ([Store.FinishTarget]): one statement per target, that
//     stores the target, and in the job's row
//     starts the next target or gives the job its final status and
//     releases it. Every target but a job's last is a step, whose
//     statement names only the columns a step changes, so that the job's
//     triggers (column-specific: status and runner) are not even
//     considered for it and no counter is touched; a write the step does
//     not match (the last target, a cancelled job, one no longer held)
//     changes nothing and runs as the full write, which releases the job.
//     The job's row is the fence: the write matches only
//     while the runner holds the job with that target in flight, so a
//     runner that was reaped gets [batch.ErrNotHeld] and changes nothing.
//     The target in flight is the one the job's row names (it reads as
//     running), so a write changes two rows, the job's and the target's,
//     as a raw store of a result and a counter would. Group commit: the
//     writes of jobs that drain at once, which arrive while a write is at
//     the server, go in the next round trip together, as one transaction
//     with one commit (one WAL flush); each is answered only once that
//     commit has returned, each is fenced by its own job's row as alone,
//     and a write that fails rolls its group back, whose writes then run
//     again one by one, so it fails alone. At most two groups are at the
//     server at once, so two workers do not wait for each other; a runner
//     of 4 workers commits about 0.75 times per target (BENCHMARKS.md).
//   - Cancel, from any node: an update of the job's row, which the drain
//     write of the node that holds the job waits for and then sees (READ
//     COMMITTED re-reads a row it waited for): the target in flight is
//     stored, nothing after it starts.
//   - Liveness ([Store.Heartbeat], [Store.Reap]): a row per runner, on the
//     database's clock. The reaper first deletes the stale heartbeats: a
//     heartbeat racing with it is ordered by that row's lock (one that
//     committed first keeps its runner alive; one after it finds no row,
//     and its runner's jobs are reaped, so its next drain write is
//     refused). It then locks the jobs of runners without a heartbeat row,
//     in seq order (so that the sweepers of several nodes reaping one dead
//     runner cannot deadlock), fails them, and fails the targets their rows
//     named in flight.
//   - Webhooks ([Store.ClaimWebhooks], [Store.FinishWebhook]): a row
//     trigger on job writes a job's pending event in the statement that
//     makes a job with a webhook finished and released (the drain write
//     that releases it, the cancel of a queued job, a reap), so in the
//     transaction that gives it its final status, on any node. The drain
//     statement is unchanged; the trigger's WHEN clause is evaluated on
//     each write that releases a job and queues nothing for a job without
//     a webhook (a step names neither status nor runner, so the trigger
//     is not considered for it). A claim is one statement, under a
//     transaction-scoped advisory lock that makes the claims of all nodes
//     run one after the other: it finds the callers with a skip scan of
//     webhook (caller, due_at, job_id), takes each caller's oldest due
//     events up to its room under the per-caller cap (its events under an
//     unexpired claim counted, whichever node holds them), orders them
//     round-robin (every caller's first before anyone's second), and moves
//     each one's due time past a lease kept in the row, so claims on
//     several nodes never return one event twice nor together exceed a
//     caller's cap, and no lock is held while the delivery runs; a node that dies mid-delivery leaves its events due
//     again once their leases have passed (a reap of the node, at its
//     restart under the same runner id or its Close, releases them at
//     once). The outcome of a claim is fenced by its runner and attempt
//     number, so a claim that was taken over cannot delete the event.
//     The outbox is its own table, so an event outlives the sweep of its
//     job. (A trigger, rather than a column of the job row with a partial
//     index, keeps the claims' bookkeeping off the job row and its
//     indexes, and the three paths that finish a job unchanged.)
//   - Sweep and eviction ([Store.Sweep], [Store.Evict]): both lock the byte
//     counter's rows first, so passes on several nodes decide one after the
//     other: an eviction sees the totals the previous one left and never
//     deletes more than one alone would. Their candidates skip rows another
//     transaction holds (a lease bump). A pass with nothing to do is a read
//     or two that lock nothing (a sweep folds the callers' byte deltas if
//     there are any; see Byte budget). The caller whose jobs an eviction takes is
//     decided in its transaction from caller_bytes, on any node: the share
//     per caller holds across nodes.
//
// # Byte budget
//
// The store's byte total is exact: the counter's rows hold the bytes of
// every job that is not held, and the bytes of the held jobs (the few
// being drained, on their partial index) are added to them when they are
// read. A target write moves its job's bytes only; the write that releases
// a job, a reap, a sweep and an eviction move the counter in the same
// statement or transaction. The counter is 16 rows, summed when read: a
// release adds to the row its job's seq names, so that the releases of
// many nodes rarely wait for each other's commits, and a sweep or an
// eviction locks all 16, in id order, before it decides, so that no
// release commits while it does. The counter can be re-derived at any time as
// the sum of the bytes of the jobs no runner holds; the tests do, after
// every test.
//
// The budget is shared per caller ([batch.Store.Evict]): an eviction takes
// the oldest-lease released finished job (then the oldest insert) of the
// caller that holds the most bytes, its held jobs' included, the smaller
// name in byte order (COLLATE "C") of equals. caller_bytes holds each
// caller's released bytes. Row triggers on job append the change of a
// job's share (a release, a reap, a sweep, an eviction) to
// caller_bytes_log in the statement that moves it, which locks no row, so
// one caller's releases on several nodes do not wait for each other; the
// store folds the log into caller_bytes under the counter's locks (one
// fold at a time, its caller rows locked in caller order): an eviction
// before each pick, a sweep at the end of its pass or, with nothing to
// sweep, on its own, so the log holds about a sweep interval of releases
// at most. The console adds the log's deltas to the rows it reads. A pick
// reads the first two entries of caller_bytes by bytes and the rows of the
// callers of the held jobs, and deletes that caller's oldest jobs while it
// still holds more than the runner-up: a cost that does not grow with the
// store. The tests re-derive each caller's row plus its deltas after every
// test too.
//
// # Change feed
//
// [Store.Subscribe] implements [batch.ChangeFeed] with LISTEN/NOTIFY on
// one channel per schema (<schema>_changes, lower-case, so that NOTIFY and
// LISTEN name the same channel). Every change the store commits (a queued
// job, a claim, a stored target, a cancel, a final status, a reap) is
// delivered to this store's subscribers at once, and to the other nodes
// by a NOTIFY sent after the commit, at most once per 40 ms per store: the
// changes of that window share one payload of job ids (split below
// PostgreSQL's 8000-byte limit), tagged so that a store skips its own.
// NOTIFY is not sent inside the drain's transactions: a notifying commit
// takes a database-wide lock and gets a commit record of its own, and
// this one commits without waiting for the WAL flush. Measured across two
// nodes (TestCluster_LongPollWakesAcrossNodes, BenchmarkLongPollWake,
// 200 to 2,000 transitions): a long-poll on one node returned p50 6–7 ms,
// p99 11–14 ms, max 14–22 ms after the other stored a target.
//
// The first Subscribe opens the listener: a connection of its own,
// outside the pool, with the pool's settings. It pings a quiet connection
// every 15 s and reconnects with a jittered back-off (100 ms doubling to
// 5 s). What was sent while it was away is lost, so after a reconnect it
// wakes each subscriber's idle workers; waits catch up at their next poll.
// Polling every Config.PollInterval stays the runner's way to be correct;
// the feed only makes it prompt. Close stops the listener and the
// notifier and waits for them.
//
// # Durability
//
// A method that writes has committed when it returns, with the server's
// synchronous_commit (on by default): a commit survives a crash of the
// server (and, with a synchronous standby, of its machine, as far as the
// setting says). The URL may set it for the store's connections, e.g.
// ?synchronous_commit=off, which makes drain writes up to about twice as
// fast here: a server crash may then lose the commits of the last few
// hundred milliseconds, never corrupting anything. The cost falls on the
// jobs in flight: a lost drain write makes the runner's next write for
// that job [batch.ErrNotHeld], and the job stays held by a live runner
// until that runner closes or restarts. Keep it on unless that is
// acceptable.
//
// # Errors
//
// Conditions of the job model are the batch package's sentinels
// ([batch.ErrNotFound], [batch.ErrFinished], [batch.ErrNotHeld],
// [batch.ErrCallerBusy], [batch.ErrBusy]), returned as they are.
// Everything else is "pgstore: <operation>: …" with the driver's error in
// the chain (errors.As finds a *pgconn.PgError), marked with
// [batch.ErrUnavailable] when the server cannot serve now but may later:
// a refused or lost connection, too many connections (53300), no disk or
// memory, a lock_timeout or statement_timeout, an admin or crash shutdown
// (57P01, 57P02, 57P03), a serialization failure or deadlock, a read-only
// standby, a context deadline. A bad password or an unknown database is
// not. A closed store is [ErrClosed] (also unavailable); a schema the
// build cannot use is [ErrSchema]. Messages are the server's and never
// carry a statement's parameters, so no target URL reaches an error. The
// store logs nothing but the change feed's connection troubles, to
// [Options.Logger].
//
// # Connections
//
// Each store uses its pool ([Options.MaxConns] for [Open]; pgxpool's
// default is the larger of 4 and the number of CPUs) plus one listener
// connection once subscribed. A runner holds at most one pool connection
// per worker while draining, and briefly one for its heartbeat, its
// sweeper and each read; Workers + 2 is enough for a node that serves
// few reads. Budget max_connections (100 by default, 3 kept for
// superusers) for every node: nodes × (MaxConns + 1), with room for
// migrations and the host. A server over its limit refuses a new
// connection at once with 53300, which is unavailable. Connect directly,
// or through a pooler in session mode: the migration lock and LISTEN are
// session features that a transaction pooler breaks.
package pgstore
