package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// What the agent day's window costs the store beneath the nodes: for
// PostgreSQL, its backends' CPU (the nodes' connections, by
// application_name), the WAL it wrote and the WAL flushes it made
// (pg_stat_wal, server-wide); for SQLite, the fsync and fdatasync calls of
// the nodes' process, counted by perf where it is installed and allowed
// (kernel tracepoints, no sampling).

// adCost is a window's cost beneath the nodes.
type adCost struct {
	PGCPU    time.Duration
	WAL      int64 // bytes
	WALSyncs int64 // -1: not measured
	Fsyncs   int64 // -1: not measured
	Why      string
}

// adMeter measures one window's adCost.
type adMeter struct {
	store  string
	probe  *costProbe
	app    string
	pid    int
	before serverSnap
	syncs0 int64
	perf   *exec.Cmd
	perfTo string
	cost   adCost
}

func newCostMeterFor(store string, probe *costProbe, app string, pid int) *adMeter {
	return &adMeter{store: store, probe: probe, app: app, pid: pid, cost: adCost{WALSyncs: -1, Fsyncs: -1}}
}

func (m *adMeter) begin(ctx context.Context) error {
	switch m.store {
	case storePostgres:
		var err error
		if m.before, err = m.probe.snap(ctx, m.app); err != nil {
			return err
		}
		m.syncs0, err = walSyncs(ctx, m.probe)
		return err
	case storeSQLite:
		m.startPerf()
	}
	return nil
}

func (m *adMeter) end(ctx context.Context) (adCost, error) {
	switch m.store {
	case storePostgres:
		after, err := m.probe.snap(ctx, m.app)
		if err != nil {
			return m.cost, err
		}
		for pid, d := range after.cpu {
			m.cost.PGCPU += d - m.before.cpu[pid]
		}
		m.cost.WAL = after.lsn - m.before.lsn
		syncs, err := walSyncs(ctx, m.probe)
		if err != nil {
			return m.cost, err
		}
		m.cost.WALSyncs = syncs - m.syncs0
	case storeSQLite:
		m.stopPerf()
	}
	return m.cost, nil
}

// walSyncs is pg_stat_wal's count of WAL flushes, server-wide.
func walSyncs(ctx context.Context, p *costProbe) (int64, error) {
	var n int64
	if err := p.conn.QueryRow(ctx, `SELECT wal_sync FROM pg_stat_wal`).Scan(&n); err != nil {
		return 0, fmt.Errorf("pg_stat_wal: %w", err)
	}
	return n, nil
}

// perfEvents are the syscalls perf counts.
const perfEvents = "syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync"

func (m *adMeter) startPerf() {
	path, err := exec.LookPath("perf")
	if err != nil {
		m.cost.Why = "perf is not installed"
		return
	}
	dir, err := os.MkdirTemp("", "agentday-perf-")
	if err != nil {
		m.cost.Why = err.Error()
		return
	}
	m.perfTo = filepath.Join(dir, "stat.csv")
	m.perf = exec.Command(path, "stat", "-x", ",", "-e", perfEvents, "-p", strconv.Itoa(m.pid), "-o", m.perfTo)
	if err := m.perf.Start(); err != nil {
		m.cost.Why = "perf: " + err.Error()
		m.perf = nil
		return
	}
	time.Sleep(50 * time.Millisecond) // let it attach
}

// stopPerf ends perf, if it runs, and reads its counts.
func (m *adMeter) stopPerf() {
	if m.perf == nil {
		return
	}
	defer os.RemoveAll(filepath.Dir(m.perfTo))
	_ = m.perf.Process.Signal(syscall.SIGINT)
	_ = m.perf.Wait()
	m.perf = nil
	b, err := os.ReadFile(m.perfTo)
	if err != nil {
		m.cost.Why = "perf: " + err.Error()
		return
	}
	n, err := parsePerfCounts(string(b))
	if err != nil {
		m.cost.Why = "perf: " + err.Error()
		return
	}
	m.cost.Fsyncs = n
}

// parsePerfCounts sums the counts of perf stat's CSV output (-x ,), and
// fails unless each of perfEvents was counted.
func parsePerfCounts(s string) (int64, error) {
	var sum int64
	seen := 0
	for line := range strings.SplitSeq(s, "\n") {
		f := strings.Split(line, ",")
		if len(f) < 3 || !strings.HasPrefix(f[2], "syscalls:") {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %s", f[2], f[0]) // "<not counted>", "<not supported>"
		}
		sum += n
		seen++
	}
	if want := len(strings.Split(perfEvents, ",")); seen != want {
		return 0, fmt.Errorf("counted %d of %d events", seen, want)
	}
	return sum, nil
}
