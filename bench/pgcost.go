package main

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batchstore/pgstore"
)

// The PostgreSQL cost phase: what one target costs the server, in figures
// that do not depend on how fast the machine is. Each run drains the
// drain phase's workload (its submits or inserts included) and divides by
// its targets:
//
//   - server CPU: user plus system time of the run's backends, read from
//     /proc/<pid>/stat (the server runs on this machine), for every
//     connection whose application_name is the run's;
//   - WAL bytes: pg_current_wal_lsn() before and after (server-wide, so
//     other work on the server counts too);
//   - statements: pg_stat_statements calls in this database, when the
//     extension is installed (else "–"), and the statements the client
//     sent, counted by a pgx tracer;
//   - round trips: the client's, counted by the same tracer (a query, a
//     batch, a prepare);
//   - waits: pg_stat_activity sampled every costSample, the run's active
//     backends by wait event; Lock is a heavyweight lock (a row, a tuple,
//     a transaction id), LWLock a shared-memory lock, IO a wait for the
//     disk (WALSync: a commit's flush);
//   - HOT: the share of the run's row updates that were heap-only, from
//     pg_stat_user_tables once the run's connections are closed.
//
// The contenders are the raw twin at 2 and 4 connections and batchkit at
// 1 node of 2 and 4 workers, at 3 nodes of 2 workers each (each node a
// store with a pool of its own and a runner, as three processes would be,
// on one schema), and at 1 node of 6 workers (as many as the 3 nodes).

// costSample is how often the wait sampler looks at pg_stat_activity.
const costSample = 5 * time.Millisecond

// poolHook lets the cost phase see a contender's pool: config before it
// is made, start just before the timed work (its return is called when
// the work ends, and may be called again).
type poolHook struct {
	config func(*pgxpool.Config)
	start  func(*pgxpool.Pool) (stop func(), err error)
}

// costRun is one contender's cost figures in one round.
type costRun struct {
	Targets    int
	Elapsed    time.Duration
	CPU        time.Duration // the run's backends
	ClientCPU  time.Duration // this process (the runners or the twin's loop, and the phase's probes)
	WAL        int64         // bytes
	Calls      int64         // pg_stat_statements calls; -1 without the extension
	ExecMS     float64       // pg_stat_statements total_exec_time
	Sent       int64         // statements the client sent
	RoundTrips int64
	Commits    int64 // COMMITs the client sent, and batches outside a transaction
	Samples    int
	Waits      map[string]int // "type:event" → samples of an active backend waiting on it
	Updates    int64
	HOTUpdates int64
}

func (c costRun) per(v float64) float64 { return v / float64(c.Targets) }

// lockWaits is the count of samples that found a backend of the run
// waiting for a heavyweight lock (typ "Lock") or a light one ("LWLock").
func (c costRun) lockWaits(typ string) int {
	n := 0
	for k, v := range c.Waits {
		if strings.HasPrefix(k, typ+":") {
			n += v
		}
	}
	return n
}

// costMeter counts the round trips and statements of the connections it
// is the tracer of, and reads the server's figures for them.
type costMeter struct {
	app        string // application_name of the run's connections
	sent, rts  atomic.Int64
	commits    atomic.Int64
	batches    atomic.Int64 // batches sent, and the statements in them
	batchStmts atomic.Int64
	countingOn atomic.Bool
}

func newCostMeter() *costMeter {
	var b [4]byte
	crand.Read(b[:])
	return &costMeter{app: "bkcost_" + hex.EncodeToString(b[:])}
}

func (m *costMeter) configure(cfg *pgxpool.Config) {
	cfg.ConnConfig.RuntimeParams["application_name"] = m.app
	cfg.ConnConfig.Tracer = m
}

func (m *costMeter) TraceQueryStart(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if m.countingOn.Load() {
		m.rts.Add(1)
		m.sent.Add(1)
		sql := strings.TrimSpace(d.SQL)
		// A COMMIT, or a statement outside a transaction, which commits
		// on its own.
		if strings.EqualFold(sql, "commit") || c.PgConn().TxStatus() == 'I' && !strings.HasPrefix(strings.ToLower(sql), "begin") {
			m.commits.Add(1)
		}
	}
	return ctx
}
func (m *costMeter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (m *costMeter) TraceBatchStart(ctx context.Context, c *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	if m.countingOn.Load() {
		m.rts.Add(1)
		m.batches.Add(1)
		if c.PgConn().TxStatus() == 'I' { // an implicit transaction: the batch commits
			m.commits.Add(1)
		}
	}
	return ctx
}
func (m *costMeter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	if m.countingOn.Load() {
		m.sent.Add(1)
		m.batchStmts.Add(1)
	}
}
func (m *costMeter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
func (m *costMeter) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	if m.countingOn.Load() {
		m.rts.Add(1)
	}
	return ctx
}
func (m *costMeter) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// serverSnap is what the server says at one moment.
type serverSnap struct {
	lsn    int64
	calls  int64
	execMS float64
	cpu    map[int32]time.Duration
}

// costProbe is the phase's own connection to the server: snapshots and
// the wait sampler.
type costProbe struct {
	url  string
	conn *pgx.Conn
	pgss bool
}

func newCostProbe(ctx context.Context, url string) (*costProbe, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	p := &costProbe{url: url, conn: conn}
	// pg_stat_statements must be preloaded and created in this database;
	// the phase never installs it (that needs a server restart).
	err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements')`).Scan(&p.pgss)
	if err == nil && p.pgss {
		if _, err := conn.Exec(ctx, `SELECT count(*) FROM pg_stat_statements`); err != nil {
			p.pgss = false // created, but not preloaded
		}
	}
	return p, nil
}

func (p *costProbe) close() { p.conn.Close(context.Background()) }

func (p *costProbe) snap(ctx context.Context, app string) (serverSnap, error) {
	s := serverSnap{cpu: map[int32]time.Duration{}, calls: -1}
	if err := p.conn.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&s.lsn); err != nil {
		return s, err
	}
	if p.pgss {
		err := p.conn.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::bigint, coalesce(sum(total_exec_time), 0)
			FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND query NOT LIKE '%pg_stat_%' AND query NOT LIKE '%pg_current_wal_lsn%'`).Scan(&s.calls, &s.execMS)
		if err != nil {
			return s, err
		}
	}
	rows, err := p.conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, app)
	if err != nil {
		return s, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return s, err
	}
	for _, pid := range pids {
		if d, err := procCPU(pid); err == nil {
			s.cpu[pid] = d
		}
	}
	return s, nil
}

// selfCPU is this process's user plus system time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clockTick is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on
// Linux).
const clockTick = 10 * time.Millisecond

// procCPU is a process's user plus system time.
func procCPU(pid int32) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	// After the command: state is field 3, utime 14 and stime 15.
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad times", pid)
	}
	return time.Duration(ut+st) * clockTick, nil
}

// sampleWaits samples the run's active backends' wait events until stop
// is closed; it returns the count of samples and of each event.
func sampleWaits(url, app string, stop <-chan struct{}) (func() (int, map[string]int), error) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	var (
		mu      sync.Mutex
		samples int
		waits   = map[string]int{}
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		defer conn.Close(ctx)
		t := time.NewTicker(costSample)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			rows, err := conn.Query(ctx, `SELECT wait_event_type || ':' || wait_event FROM pg_stat_activity
				WHERE application_name = $1 AND state = 'active' AND wait_event IS NOT NULL`, app)
			if err != nil {
				return
			}
			evs, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return
			}
			mu.Lock()
			samples++
			for _, e := range evs {
				waits[e]++
			}
			mu.Unlock()
		}
	}()
	return func() (int, map[string]int) {
		<-done
		mu.Lock()
		defer mu.Unlock()
		return samples, waits
	}, nil
}

// costContender is one way of draining in the cost phase.
type costContender struct {
	Key, Name string
	Nodes     int  // batchkit nodes; 0 for the twin
	Workers   int  // per node, or the twin's connections
	Steady    bool // batchkit on a store at its working size (see costBatchkit)
	run       func(ctx context.Context, e *drainEnv, p *costProbe) (costRun, error)
}

// measure wraps the timed part of a run: a snapshot before, the sampler,
// a snapshot after, the counters.
type measure struct {
	client time.Duration // this process's CPU at the start
	p      *costProbe
	m      *costMeter
	before serverSnap
	stopS  chan struct{}
	result func() (int, map[string]int)
	once   sync.Once
	run    costRun
	err    error
}

func (x *measure) start(ctx context.Context) (func(), error) {
	var err error
	if x.before, err = x.p.snap(ctx, x.m.app); err != nil {
		return nil, err
	}
	x.stopS = make(chan struct{})
	if x.result, err = sampleWaits(x.p.url, x.m.app, x.stopS); err != nil {
		return nil, err
	}
	x.m.countingOn.Store(true)
	x.client = selfCPU()
	return func() {
		x.once.Do(func() {
			x.run.ClientCPU = selfCPU() - x.client
			x.m.countingOn.Store(false)
			close(x.stopS)
			after, err := x.p.snap(context.WithoutCancel(ctx), x.m.app)
			if err != nil {
				x.err = err
				return
			}
			r := &x.run
			r.WAL = after.lsn - x.before.lsn
			if after.calls >= 0 {
				r.Calls, r.ExecMS = after.calls-x.before.calls, after.execMS-x.before.execMS
			} else {
				r.Calls = -1
			}
			for pid, d := range after.cpu {
				r.CPU += d - x.before.cpu[pid]
			}
			r.Sent, r.RoundTrips, r.Commits = x.m.sent.Load(), x.m.rts.Load(), x.m.commits.Load()
			r.Samples, r.Waits = x.result()
		})
	}, nil
}

// tableStats reads the HOT share of schema's updates once its connections
// are gone (a backend reports its table counts as it exits).
func (x *measure) tableStats(ctx context.Context, schema string) error {
	time.Sleep(300 * time.Millisecond)
	conn, err := pgx.Connect(ctx, x.p.url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, `SELECT coalesce(sum(n_tup_upd), 0)::bigint, coalesce(sum(n_tup_hot_upd), 0)::bigint
		FROM pg_stat_user_tables WHERE schemaname = $1`, schema).Scan(&x.run.Updates, &x.run.HOTUpdates)
}

func costTwin(conns int) *costContender {
	return &costContender{
		Key: fmt.Sprintf("raw-%d", conns), Name: fmt.Sprintf("raw twin, %d connections", conns), Workers: conns,
		run: func(ctx context.Context, e *drainEnv, p *costProbe) (costRun, error) {
			schema, drop, err := newPGSchema(ctx, e.pgURL)
			if err != nil {
				return costRun{}, err
			}
			defer drop()
			x := &measure{p: p, m: newCostMeter()}
			hook := &poolHook{config: x.m.configure, start: func(*pgxpool.Pool) (func(), error) { return x.start(ctx) }}
			d, err := rawPGRound(ctx, e, schema, conns, hook)
			if err != nil {
				return costRun{}, err
			}
			if x.err != nil {
				return costRun{}, x.err
			}
			if err := x.tableStats(ctx, schema); err != nil {
				return costRun{}, err
			}
			x.run.Elapsed, x.run.Targets = d, e.work.total()
			return x.run, nil
		},
	}
}

// costBatchkit is batchkit at nodes nodes of workers workers each. A
// steady run first drains the workload once, untimed, then sweeps every
// job (through the store, so its counters stay exact) and vacuums without
// truncating, so that the timed drain finds the free space of a store at
// its working size, as sweeps and autovacuum keep one, rather than empty
// files it must extend.
func costBatchkit(nodes, workers int, steady bool) *costContender {
	key := fmt.Sprintf("batchkit-%dx%d", nodes, workers)
	name := fmt.Sprintf("batchkit, %d node%s × %d workers", nodes, map[bool]string{true: "s"}[nodes > 1], workers)
	if steady {
		key, name = key+"-steady", name+", steady state"
	}
	return &costContender{
		Key: key, Nodes: nodes, Workers: workers, Steady: steady, Name: name,
		run: func(ctx context.Context, e *drainEnv, p *costProbe) (costRun, error) {
			schema, drop, err := newPGSchema(ctx, e.pgURL)
			if err != nil {
				return costRun{}, err
			}
			defer drop()
			x := &measure{p: p, m: newCostMeter()}
			var stores []*pgstore.Store
			var pools []*pgxpool.Pool
			defer func() {
				for _, s := range stores {
					s.Close()
				}
				for _, pl := range pools {
					pl.Close()
				}
			}()
			for range nodes {
				cfg, err := pgxpool.ParseConfig(e.pgURL)
				if err != nil {
					return costRun{}, err
				}
				cfg.MaxConns = int32(workers) + 2
				x.m.configure(cfg)
				pool, err := pgxpool.NewWithConfig(ctx, cfg)
				if err != nil {
					return costRun{}, err
				}
				pools = append(pools, pool)
				s, err := pgstore.New(ctx, pool, pgstore.Config{Schema: schema})
				if err != nil {
					return costRun{}, err
				}
				stores = append(stores, s)
			}
			nodesOf := make([]batchdriver.Store, len(stores))
			for i, s := range stores {
				nodesOf[i] = s
			}
			if steady {
				if err := warmStore(ctx, e, nodesOf, workers, pools[0], schema); err != nil {
					return costRun{}, err
				}
			}
			d, err := drainNodes(ctx, e, nodesOf, workers, func() (func(), error) { return x.start(ctx) })
			if err != nil {
				return costRun{}, err
			}
			if x.err != nil {
				return costRun{}, x.err
			}
			for _, s := range stores {
				s.Close()
			}
			for _, pl := range pools {
				pl.Close()
			}
			stores, pools = nil, nil
			if err := x.tableStats(ctx, schema); err != nil {
				return costRun{}, err
			}
			x.run.Elapsed, x.run.Targets = d, e.work.total()
			return x.run, nil
		},
	}
}

// warmStore drains the workload once on stores, untimed, then sweeps all
// of it and vacuums job and target (their TOAST table with them) without
// truncating the files: the steady state of costBatchkit.
func warmStore(ctx context.Context, e *drainEnv, stores []batchdriver.Store, workers int, pool *pgxpool.Pool, schema string) error {
	if _, err := drainNodes(ctx, e, stores, workers, nil); err != nil {
		return fmt.Errorf("warm-up drain: %w", err)
	}
	later := time.Now().Add(24 * time.Hour)
	for {
		n, err := stores[0].Sweep(ctx, batchdriver.SweepParams{TTL: time.Second, Now: &later})
		if err != nil {
			return fmt.Errorf("warm-up sweep: %w", err)
		}
		if n == 0 {
			break
		}
	}
	sch := pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(ctx, `VACUUM (TRUNCATE false) `+sch+`.job, `+sch+`.target`); err != nil {
		return fmt.Errorf("warm-up vacuum: %w", err)
	}
	return nil
}

// pgCostReport is the cost phase's outcome: each contender's runs, one
// per round.
type pgCostReport struct {
	Work       drainWork
	Rounds     int
	PGSS       bool
	Contenders []*costContender
	Runs       map[string][]costRun
	Elapsed    time.Duration
}

func pgCostPhase(ctx context.Context, sz sizes, tmp, pgURL string) (*pgCostReport, error) {
	e, err := newDrainEnv(sz.drain, tmp, pgURL)
	if err != nil {
		return nil, err
	}
	p, err := newCostProbe(ctx, pgURL)
	if err != nil {
		return nil, err
	}
	defer p.close()
	cs := []*costContender{costTwin(2), costTwin(4), costBatchkit(1, 2, false), costBatchkit(1, 4, false),
		costBatchkit(3, 2, false), costBatchkit(1, 6, false), costBatchkit(1, 2, true), costBatchkit(3, 2, true), costBatchkit(1, 6, true)}
	if only := os.Getenv("BKCOST_ONLY"); only != "" { // profiling one contender by hand
		var keep []*costContender
		for _, c := range cs {
			if strings.Contains(","+only+",", ","+c.Key+",") {
				keep = append(keep, c)
			}
		}
		cs = keep
	}
	if path := os.Getenv("BKCOST_PPROF"); path != "" { // profiling by hand
		f, err := os.Create(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	rep := &pgCostReport{Work: sz.drain, Rounds: sz.rounds, PGSS: p.pgss, Contenders: cs, Runs: map[string][]costRun{}}
	start := time.Now()
	for round := range sz.rounds {
		for k := range cs {
			c := cs[(k+round)%len(cs)]
			rctx, cancel := context.WithTimeout(ctx, roundTimeout)
			r, err := c.run(rctx, e, p)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("pgcost round %d, %s: %w", round+1, c.Key, err)
			}
			rep.Runs[c.Key] = append(rep.Runs[c.Key], r)
			logf("pgcost round %d/%d  %-28s %6.0f items/s  client %5.0f µs  cpu %5.0f µs  wal %5.0f B  stmts %4.2f/%4.2f  rts %4.2f  commits %4.2f  lock %d lw %d of %d  hot %d/%d",
				round+1, sz.rounds, c.Key, float64(r.Targets)/r.Elapsed.Seconds(), r.per(float64(r.ClientCPU.Microseconds())),
				r.per(float64(r.CPU.Microseconds())), r.per(float64(r.WAL)), r.per(float64(r.Calls)), r.per(float64(r.Sent)),
				r.per(float64(r.RoundTrips)), r.per(float64(r.Commits)), r.lockWaits("Lock"), r.lockWaits("LWLock"), r.Samples,
				r.HOTUpdates, r.Updates)
			logf("pgcost waits %s", topWaits([]costRun{r}, 6))
		}
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// topWaits names the most sampled wait events of runs, most first.
func topWaits(runs []costRun, n int) string {
	sum := map[string]int{}
	for _, r := range runs {
		for k, v := range r.Waits {
			sum[k] += v
		}
	}
	keys := make([]string, 0, len(sum))
	for k := range sum {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return sum[keys[i]] > sum[keys[j]] || sum[keys[i]] == sum[keys[j]] && keys[i] < keys[j]
	})
	if len(keys) > n {
		keys = keys[:n]
	}
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, sum[k]))
	}
	return strings.Join(parts, ", ")
}
