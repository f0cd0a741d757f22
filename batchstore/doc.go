// Package batchstore is the SQLite [batch.Store], built on
// zombiezen.com/go/sqlite: the embedded default of batchkit, one process
// and one file. Its subpackage batchstore/pgstore is the other store, on
// PostgreSQL, for several nodes that share one database; the two pass the
// same conformance suites and share no code but the reading of their
// numbered migration files. A host imports the one it uses (only pgstore
// compiles pgx).
//
//	store, err := batchstore.Open(ctx, "/var/lib/sift/batch.db", batchstore.Options{})
//	if err != nil { … }         // ErrLocked, ErrCorrupt, ErrReadOnly, …
//	defer store.Close()         // after the runner's Close
//	runner, err := batch.New(batch.Config{Store: store, Fetch: fetch})
//
// [Open] owns its connection pool. [New] takes a pool the host owns, for a
// host that keeps its own tables in the same file.
//
// # Durability
//
// The database runs in WAL mode. Every method that writes is one
// transaction that has committed when the method returns. What a commit
// survives depends on [Options.Synchronous]:
//
//   - [SyncFull] (the default) syncs the WAL at every commit. A commit
//     survives a process crash (kill -9, panic, OOM kill) and a power loss
//     or OS crash, as far as the disk honours fsync.
//   - [SyncNormal] syncs only when a checkpoint copies the WAL into the
//     database. A commit survives a process crash just the same; a power
//     loss or OS crash may roll back the commits made since the last
//     checkpoint (at most about 16 MiB of WAL), and never corrupts the file.
//
// A commit costs roughly three times as much under FULL. The runner commits
// once per fetched target (see The drain), the targets of jobs draining at
// once share commits (see Group commit) and polls do not write (see
// Leases), so FULL is affordable.
//
// # Transactions and lock waits
//
// Every method that writes runs in one immediate transaction (BEGIN
// IMMEDIATE): it takes the write lock before its first read, so a decision
// made from that read (reuse, the caps, a status check) cannot go stale
// under a concurrent writer, and no deferred transaction's lock upgrade can
// fail with SQLITE_BUSY. One goroutine of the store runs every write, on
// one connection it keeps for that from open to Close (so the pool needs
// at least two connections): writes run in arrival order rather than by
// SQLite's sleep-and-retry wait for the lock, which under sustained
// contention can starve one caller until its deadline; the connection's
// page cache stays warm; and writes that arrive together share one commit,
// each in a savepoint of its own, so that one write's error undoes only its
// own changes (see Group commit). A read of a job with its targets runs in a read
// transaction on a pooled connection, so it sees one snapshot; WAL readers
// never wait for the writer.
//
// Each connection prepares a statement once and reuses it. The queries are
// written so that SQLite never silently re-prepares them on reuse (it does
// for a plan that looked at a bound value: a join with a parameter, LIMIT ?,
// "col = ?" feeding an ORDER BY); a test counts compilations to keep it so.
//
// Every call is bounded: a context without a deadline gets
// [Options.Timeout] (30s by default). The wait for a pool connection and
// for the write lock both end at that deadline; the error then matches the
// context's error (context.DeadlineExceeded). The store uses zombiezen's
// default busy handler, which honours the context, and never sets
// busy_timeout, which would not. A write whose context ends before its
// turn does not run; once it runs, its statements (bounded: at most one job
// or one batch of 128 deleted jobs) run to the end, so that no write's
// context can roll back the writes that share its commit.
//
// # Schema
//
// The schema is created by embedded migrations (schema/NNN_name.sql),
// each applied once in an immediate transaction and recorded in the
// store's own table batch_migration: PRAGMA user_version belongs to the
// whole file, which the host may share. A file with a newer schema than
// the build knows is refused ([ErrSchema]).
//
//   - batch_job: one row per job, keyed internally by an integer seq; the
//     job id (the runner's uuid string) is a unique TEXT column. Times are
//     Unix nanoseconds.
//   - batch_target: one row per target, clustered by (job_seq, idx)
//     (WITHOUT ROWID): the rows a status summary reads, and nothing else.
//     Each carries the bytes it adds to the budget and the rowid of its
//     result body.
//   - batch_body: the result envelopes, in a rowid table of their own: a
//     new result is appended to it, with no second index to update. A
//     summary ([Store.Get] without results) never reads its pages, so it
//     costs the same with empty and with 1 MiB results.
//   - batch_runner: one heartbeat row per runner.
//   - batch_webhook: the webhook outbox, one row per pending event (see
//     Webhooks).
//   - batch_stat: one row of counters (the bytes of finished jobs, queued
//     and running jobs) kept exact by triggers on batch_job, so that the
//     byte total, the total cap and [Store.Stats] never scan. The counters
//     can be re-derived from the rows at any time; the tests do after every
//     test.
//   - batch_caller: the bytes of each caller's finished jobs, a row per
//     caller with any, kept exact by triggers on batch_job like batch_stat
//     and indexed by bytes, most first: the eviction's next caller (see
//     Ordering).
//
// Partial indexes serve the queries that must stay flat as the store
// grows: the live jobs per caller (the caps), the queued jobs by age
// (claim), the held jobs by runner (the reaper and the byte total), the
// finished jobs by lease (sweep) and each caller's finished jobs by lease
// (eviction); a live job's lease updates touch neither of the last two. A
// test pins the query plans.
//
// # The drain
//
// A job is held by the runner named in batch_job.runner while one of its
// targets runs; the target in flight is the one whose status is running.
// The claim makes the job running and starts target 0; each later write
// (one transaction, one statement for both rows, which sit side by side in
// the primary key) stores target i and starts target i+1, so a target costs
// one commit. While the job goes on, its row is not written: its done count
// and bytes are read from its targets (a summary reads those rows anyway),
// and its lease moves at most once per [batch.LeaseGrain]. The write that
// stores the last target (or finds the job cancelled) gives the job its
// final status, writes its progress into its row and releases it. A write
// by a runner that no longer holds the job changes nothing and is
// [batch.ErrNotHeld]; a repeat of a write that was applied answers the
// job's current step. Measured per target of a 10 KB result (BenchmarkDrain,
// which counts frames in the WAL): one commit and about 7.5 WAL pages,
// against two commits and 14.4 pages with the schema-1 write path.
//
// # Group commit
//
// The writer commits the writes that arrive together in one transaction:
// with several jobs draining at once, their target writes share one commit,
// so under FULL one WAL sync serves them all, and under NORMAL the header,
// pointer-map and B-tree pages they share are written once.
//
// How a group forms. When a commit returns, the writer first takes every
// write that queued while it ran. It then compares the group with the
// crowd of the last cycle, the writers of the last group plus those that
// queued behind it: a smaller group waits for the rest, and goes the moment
// they are there. Without that wait the crowd splits: the writers a commit
// releases go off to prepare their next write, and the first one back would
// start a commit alone while the others are on their way, so four draining
// jobs would settle into alternating groups of about two. At most 16
// writes share a commit.
//
// How long it may wait: until the expected writers are there, and never
// longer than the writer's recent commit time (a moving average of its
// COMMIT statements, the one cost a group shares), capped at 2 ms. A write
// that waits for siblings thus waits about one commit more at most, which
// under FULL is what it would have waited for the commit in flight anyway;
// under NORMAL, whose commits take microseconds, the wait is as short. A
// writer that does not come back in time (its next fetch is slow, its job
// ended) is not expected again, so writes that trickle in one at a time pay
// for at most one such wait and then none: with one write at a time the
// crowd is one and the writer never waits.
//
// Why it is safe. Nothing happens during the wait: no transaction is open
// and no lock is held (a host's connection may write meanwhile, and WAL
// readers never wait for the writer anyway), no write has run, and a write
// whose context ends during the wait is not run. Each write is answered only
// after the COMMIT that holds it has returned, so a worker is never told
// "stored" before its target is committed (TestStore_GroupAnswersAfterCommit,
// TestRunner_WorkerToldStoredAfterCommit, and the crash test, whose child
// writes from four goroutines, check it). Each write makes its own checks
// (the runner's hold on its job: fencing is per job, as without groups)
// inside the transaction, under the write lock, in a savepoint of its own,
// so a write that fails undoes its own changes and fails alone
// (TestStore_GroupFailsOneWriteAlone); only an error that makes SQLite
// roll back the whole transaction (a full disk) or a failed COMMIT fails
// every write of the group.
//
// Measured with four workers (BenchmarkDrain, 10 KB results, one run of 7
// and one of 9 rounds on the shared 2-core machine, counted in the WAL): per
// target 0.51 commits and 5.8 WAL pages under FULL, 0.94 and 7.3 under
// NORMAL, before the wait; 0.26 and 4.7 under FULL, 0.40 and 5.3 under
// NORMAL with it. The store's speed over its raw twin's (one transaction
// per target), median of the rounds: 1.61× (1.07×–2.37×) before and 2.89×
// (1.04×–6.69×) after under FULL, 1.04× (0.70×–2.15×) and 1.26×
// (0.83×–1.60×) under NORMAL. Those runs met a slow, shared disk (the
// twin at 0.4–1.1k commits a second under FULL). On a quieter one (the twin
// at 2.7–3.3k, an fsync of about 0.3 ms) the gain is smaller: 1.00×
// (0.80×–1.41×) before and 1.37× (0.81×–2.19×) after under FULL, 7 rounds
// each, back to back. The bound is the sync itself: a group's writers all
// wait for its sync, and the connection cannot begin the next transaction
// before its COMMIT returns, so with four workers a sync serves at most four
// targets and nothing else is written while it runs. BENCHMARKS.md has the
// same drain, at four workers, beside the peers.
//
// Pipelined sync: sound, measured slower here, not kept. The way past that
// bound would take the sync out of the commit: the writer's connection
// commits under synchronous=NORMAL (its COMMIT writes the frames and does
// not wait for the disk), a goroutine of the store fsyncs its own
// descriptor of the -wal file and only then answers the writers of every
// group committed before that fsync began, while the writer already runs
// the next groups. It was built (branch sqlsync, commits 05415d8 to
// d8084f7, with tests that hold the fsync and check that no write, and no
// read that saw it, is answered meanwhile) and measured, and it is sound,
// with these points settled against SQLite's documentation
// (https://www.sqlite.org/wal.html, https://www.sqlite.org/walformat.html,
// https://www.sqlite.org/pragma.html#pragma_synchronous,
// https://www.sqlite.org/atomiccommit.html) and the source of the SQLite
// this module builds (3.54.1 in modernc.org/sqlite v1.62.0: walFrames,
// walCheckpoint):
//
//   - A NORMAL commit has written its frames before COMMIT returns: it
//     appends the changed pages to the WAL, the last marked as a commit
//     (wal.html), and NORMAL commits "are durable across application
//     crashes" (pragma synchronous), which needs the frames in the
//     kernel's hands. In walFrames every frame goes out by write(2), is
//     synced only if the commit's sync flags ask (under FULL, not NORMAL),
//     and only then does the wal-index header make it visible. fsync(2)
//     flushes every dirty page of the file, whichever descriptor wrote it,
//     so an fsync begun after COMMIT returned covers that commit and every
//     earlier frame; SQLite's FULL syncs the same file with the same call
//     (this build's unixSync is fsync) at that very point.
//   - Recovery keeps a prefix: a frame counts only if its salts match the
//     header and its checksum, cumulative over the earlier frames, holds;
//     reading stops at the first that fails (walformat.html). A commit on
//     disk brings every earlier one of its WAL with it, so answering in
//     commit order after a later fsync is sound.
//   - Checkpoint, restart, and a crash before our fsync. Under NORMAL "the
//     WAL file is synchronized before each checkpoint and the database
//     file is synchronized after each completed checkpoint and the WAL
//     file header is synchronized when a WAL file begins to be reused"
//     (pragma synchronous). In walCheckpoint the WAL is synced before any
//     frame is copied, and the database file once every frame is, before
//     the WAL is recorded as fully copied (nBackfill); a writer restarts
//     the WAL only once it is fully copied and unread, and writes and
//     syncs the new header first. So a commit written but not yet synced
//     by us, then copied by a checkpoint and overwritten after a restart,
//     is in the synced database file when the crash comes; the crash loses
//     only frames written after the restart, which no one was told about.
//     A commit already answered was synced in the WAL, and a restart
//     overwrites it only after a checkpoint synced it into the database.
//     This holds while no connection checkpoints under synchronous=OFF,
//     which would break SQLite's own FULL alike.
//   - journal_size_limit truncates the -wal file at the first commit after
//     a restart (to the limit or that commit's end), and a TRUNCATE
//     checkpoint after a complete one: only frames already copied and
//     synced into the database go. The file is truncated, never replaced;
//     SQLite deletes it only when the last connection closes, so with the
//     writer's connection open a descriptor opened once names the live
//     WAL. SQLite creates it at open, and an fsync does not persist a
//     directory entry: the directory must be synced once first.
//   - The wal-index (-shm) is never synced, by SQLite either: recovery
//     rebuilds it from the WAL (walformat.html).
//   - Readers see a commit from its wal-index update, which under NORMAL
//     precedes the sync: a status poll could show a target a power loss
//     then undoes. The build made every read wait, once its statements
//     were done, for the sync of every COMMIT begun before it ended (at
//     most the fsync in flight and the next); a host's own connections
//     reading the store's tables would still see commits early.
//   - A failed fsync must be sticky (the kernel may drop the pages it
//     could not write, so no later fsync vouches for them): the build
//     failed the writes it covered and every later write and read.
//
// It is not kept because it was slower, in one run each, on this 2-core
// machine (ext4 on a virtio disk), against this FULL (the writer's COMMIT
// syncs) run beside it: BenchmarkDrain at four workers, the store's speed
// over the raw FULL twin's, median (min–max): 0.93× (0.77×–2.03×) against
// 1.71× (1.63×–1.85×) in 5 rounds, 1.00× (0.59×–1.63×) against 1.63×
// (1.19×–2.50×) in 9; on a quieter disk, before the syncer waited for the
// crowd, 1.55× (1.48×–1.69×) against 1.64× (1.51×–2.41×); at eight workers
// 1.94× (1.76×–2.06×) against 2.19× (1.80×–2.86×). The reason is the
// crowd: each worker has one write outstanding, so all the writes one
// fsync can cover are those of workers waiting for it. An fsync begun as
// soon as a group commits splits the crowd: in the quiet run the fsyncs ran
// back to back, a round every 0.32 ms (the twin's commit with its fsync
// took 0.26 ms), each covering 1.9 targets (0.53 fsyncs per target,
// against 3.8 targets per inline commit), so the disk was the bound. An
// fsync that waits for the crowd (at most one fsync's time, as the writer
// waits for its groups) covers more (0.29–0.34 fsyncs per target) but
// leaves the writer nothing to do during it, as inline, plus the wait.
// Overlap pays only when more writes are outstanding than one sync's
// crowd, i.e. with many more workers or jobs draining, and at eight it
// still did not here. FULL nearer NORMAL at four workers would need a
// shorter sync, not a different one.
//
// # Webhooks
//
// A job with a webhook (batch_job.webhook, NULL for none) gets its pending
// event in batch_webhook from a trigger on batch_job, which fires when a
// job with a webhook becomes finished and released: in the statement of
// the drain's last write that releases the job, of the cancel of a queued
// job, or of a reap, so in the same transaction that gives the job its
// final status. Claims ([Store.ClaimWebhooks]) first look for a due event
// in a point read, so an idle deliverer polling an empty outbox never takes
// the write lock, then, in one write transaction, count each caller's
// events under an unexpired claim, walk the due events in due order,
// picking them round-robin across callers within the per-caller cap (the
// walk stops once it has picked as many callers' first events as the claim
// wants), and move each claimed row's due time past its lease; [Store.FinishWebhook] deletes or reschedules a row, fenced by
// the claim's runner and attempt.
//
// Why a trigger rather than a column on the job row with a partial index:
// the per-target writes of the drain never set batch_job.status or runner
// (they touch the job row at most once per lease grain, for the lease), so
// an AFTER UPDATE OF status, runner trigger costs them nothing, and at a
// job's end a job without a webhook pays the trigger's WHEN clause alone;
// none of the three code paths that finish a job had to change, so none can
// forget the event; and the event lives in a table of its own, so it
// outlives the sweep or eviction of its job and the claim's bookkeeping
// (due time, runner, attempts) never rewrites the job row, whose indexes a
// write would have to maintain. BenchmarkDrain (jobs without a webhook,
// 20 rounds each) measured no change: per target 7.45 WAL pages and 1.03
// commits before (two runs) and after (sync=NORMAL, two workers), and the
// store's speed over its raw twin's within the runs' own spread (median
// ratio 1.02 and 0.88 before, 0.92 after at NORMAL with two workers; 1.36
// and 1.31 before, 1.36 after at FULL with four) on the shared 2-core
// machine.
//
// Ordering: [Store.Claim] takes the oldest queued job by creation time,
// then by insertion order; [Store.List] returns the newest by creation time,
// then by insertion order; [Store.Evict] shares the budget per caller: it
// evicts the job with the oldest lease (then the oldest insert) of the
// caller that holds the most bytes, held jobs' bytes included, the smaller
// name (byte order) of equals, one job at a time. A pick reads the first
// entry of batch_caller's index, the counters of the callers of the few
// held jobs, and that caller's first entry by lease: it costs the same at
// any store size. (The in-memory batchtest store does the same.)
//
// # Leases
//
// [Store.Touch] coalesces: a touch that would move the lease by less than
// [batch.LeaseGrain] is a read only, so a client polling every second
// writes about once a minute.
//
// The store's clock is time.Now, read once per call that has no Now (see
// the clock note on [batch.CreateParams]); a call with a Now uses it.
//
// # File size
//
// A file the store creates gets auto_vacuum = INCREMENTAL before its first
// table. A sweep or eviction that deleted jobs runs PRAGMA
// incremental_vacuum in the same transaction and then a passive checkpoint,
// so the freed pages go back to the file system at once. With the byte
// budget enforced (it counts result and error bytes only), the database
// file stays within the budget plus this overhead:
//
//   - up to one page (4 KiB) per stored result, whose last overflow page is
//     partly empty;
//   - the rows themselves, with their index entries: about 0.2 KiB per
//     stored job, plus per target its URL and options and about 60 bytes
//     (measured: 0.5 KiB per job of 4 targets); the TTL sweep, not the byte
//     budget, bounds how many jobs are stored;
//   - about 256 KiB of schema, pointer-map and partly filled pages.
//
// Beside it, the -wal file is truncated to 4 MiB (journal_size_limit) when
// a checkpoint resets it. Under synchronous=FULL it grows past that by at
// most one transaction; under NORMAL checkpoints run beside the writes
// (see Performance), so it may grow to 16 MiB (and one transaction) before
// the writer resets it. The -shm file is 32 KiB.
//
// auto_vacuum can only be chosen before the first table exists. A host
// file that already has tables when [New] first runs keeps its setting:
// the store never rewrites a host's file, and without incremental
// auto-vacuum deleted pages are reused but the file does not shrink.
//
// # Performance
//
// The benchmarks (go test -run '^$' -bench . ./batchstore/) run every
// operation on stores seeded with 1k, 10k and 100k jobs; each costs the same
// at all three sizes, because every query reads through an index (a test
// pins the plans) and no count or sum is computed by a scan. A status
// summary costs the same with empty and with 200 KB results.
// BenchmarkDrain runs the runner's whole write path against a raw-SQLite
// twin on the same pragmas, in one run.
//
// Under synchronous=NORMAL a commit is CPU work, and SQLite's own
// checkpoint (every 1000 WAL pages, inside the commit that crosses it, with
// two syncs) would cost about a third of the writes' time. The store
// checkpoints beside the writes instead: every ~2 MiB of writes it runs a
// passive checkpoint on a reader connection, which never waits for the
// writer; the writer checkpoints by itself only at 16 MiB of WAL, which a
// checkpoint running beside continuous writes needs to reset the file.
// Under FULL every commit waits for the disk, a checkpoint beside it
// competes for that same disk, and SQLite's own checkpoints stay.
//
// # Opening
//
// [Open] and [New] first lock the sidecar file <database>.lock with flock:
// a second store on the same file, in another process or this one, fails
// at once with [ErrLocked] (naming the holder's pid), because its restart
// hook would fail the first one's running jobs. The kernel drops the lock
// when the holder exits, however it exits. (locking_mode = EXCLUSIVE is not
// used: it would lock out the store's own pool.) Where flock is not
// available (Windows, Plan 9, …) no lock is taken and a second process is
// not detected.
//
// They then run PRAGMA quick_check before anything writes: a file that is
// not a database, or whose pages are damaged behind a valid header, is
// [ErrCorrupt], and the file is left exactly as it was, never re-created.
// The pool is opened without zombiezen's OpenWAL flag for that reason; the
// store switches the file to WAL after the check. Next come incremental
// auto-vacuum (for a file without tables), WAL, the migrations, and a
// write probe that is rolled back: a database that cannot be written is
// [ErrReadOnly] at open, not at the first submit. A "file:" URI with
// mode=ro is refused before SQLite opens anything.
//
// # Connections
//
// Each connection gets foreign_keys = ON, the configured synchronous
// setting and journal_size_limit before its first use: through the pool's
// PrepareConn for [Open], and on the store's first take of each connection
// for [New]. These settings stay on the connection, so with [New] the
// host's own use of it sees them too, and the host's pool should keep a
// fixed set of connections. The pool must outlive the store; Store.Close
// does not close a host's pool.
//
// # One process
//
// The store serves one process; the file lock sees to that. Its
// [Store.Capabilities] say it is not Shared, so a starting runner fails
// every live job it holds, queued ones too, and one runner drains it at a
// time. [Store.Reap] still honours runner-scoped and stale selections, so
// the runner's stale sweep and its Close work as on a shared store.
//
// # Errors
//
// Conditions of the job model are the batch package's sentinels
// ([batch.ErrNotFound], [batch.ErrFinished], [batch.ErrNotHeld],
// [batch.ErrCallerBusy], [batch.ErrBusy]), returned as they are. Conditions of the database are
// this package's: [ErrLocked], [ErrCorrupt], [ErrReadOnly], [ErrFull],
// [ErrSchema], [ErrClosed], each matchable with [errors.Is] and carrying
// the driver error behind it. Anything else is wrapped as
// "batchstore: <operation>: …".
package batchstore
