package reliability

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/siftfetch/batchkit/batch"
)

// privateCluster creates a PostgreSQL cluster of the test's own on a free
// port, started, and dropped when the test ends: the faults stop and
// restart it, never the shared server others test against. ctl runs
// pg_ctlcluster with an action (stop, start, restart). Without
// pg_createcluster the test skips, except under CI=true, where it fails.
func privateCluster(t *testing.T) (url string, ctl func(action string)) {
	t.Helper()
	if _, err := exec.LookPath("pg_createcluster"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("pg_createcluster is absent, and CI=true: the fault tests need a private PostgreSQL cluster")
		}
		t.Skip("pg_createcluster is absent: no private PostgreSQL cluster for the fault tests")
	}
	versions, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(versions) == 0 {
		t.Skip("no PostgreSQL server binaries under /usr/lib/postgresql")
	}
	version := filepath.Base(filepath.Dir(filepath.Dir(versions[len(versions)-1])))
	b := make([]byte, 4)
	rand.Read(b)
	name := "batchkit_faults_" + hex.EncodeToString(b)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	run := func(args ...string) error {
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := run("pg_createcluster", version, name, "-p", fmt.Sprint(port), "--", "--auth=trust"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := run("pg_dropcluster", "--stop", version, name); err != nil {
			t.Errorf("drop the private cluster: %v", err)
		}
	})
	ctl = func(action string) {
		t.Helper()
		if err := run("pg_ctlcluster", version, name, action); err != nil {
			t.Fatal(err)
		}
	}
	ctl("start")
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port), ctl
}

// outageWindow is when a fault test's database is down: from the start of
// a fault until a tail after the server answers again (the pools' first
// queries after it may still find a dead connection).
type outageWindow struct {
	mu    sync.Mutex
	down  bool
	until time.Time
}

// outageTail is how long after the server answers again a 503 still counts
// as the outage's.
const outageTail = 2 * time.Second

func (o *outageWindow) begin() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.down = true
}

func (o *outageWindow) end(tail time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.down, o.until = false, time.Now().Add(tail)
}

// allows reports whether a 503 answered now falls in an outage.
func (o *outageWindow) allows() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.down || time.Now().Before(o.until)
}

// agentOf is the User-Agent of the fetches of the daemon with runner id.
func agentOf(id string) string { return "batchkit-reliability/" + id }

// logMark is a position in a log sink.
func logMark(l *logSink) int { return len(l.all()) }

// waitLogAfter waits until a line after mark contains s and returns how
// long that took, or false after d.
func waitLogAfter(l *logSink, mark int, s string, d time.Duration) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < d {
		lines := l.all()
		for _, line := range lines[min(mark, len(lines)):] {
			if strings.Contains(line, s) {
				return time.Since(start), true
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0, false
}

// logSummary counts, in the lines after mark, the WARN and ERROR lines
// and the jobs the stale reaps failed.
func logSummary(l *logSink, mark int) (warn, errs, reaped int, msgs map[string]int) {
	msgs = map[string]int{}
	lines := l.all()
	for _, line := range lines[min(mark, len(lines)):] {
		var rec struct {
			Level, Msg string
			Jobs       int
		}
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		switch rec.Level {
		case "WARN":
			warn++
			msgs[rec.Msg]++
		case "ERROR":
			errs++
			msgs[rec.Msg]++
		}
		if rec.Msg == "batch jobs of stale runners failed" {
			reaped += rec.Jobs
		}
	}
	return warn, errs, reaped, msgs
}

// Three daemons on one PostgreSQL cluster of the test's own, under load,
// through these faults: the server restarted; stopped for longer
// than StaleAfter; every backend terminated; a node frozen with SIGSTOP
// past StaleAfter, then woken; a node killed and restarted under its
// runner id. Nothing acknowledged is lost, nothing stays live, no page is
// fetched twice, and the database's faults fail no job of a live node.
func TestCluster_Faults(t *testing.T) {
	url, ctl := privateCluster(t)
	outage := 3 * time.Second // StaleAfter is 2s
	if long() {
		outage = 7 * time.Second
	}
	up := newUpstream(t, 5*time.Millisecond)
	bc := killBatch()
	bc.HeartbeatInterval, bc.StaleAfter, bc.SweepInterval = batch.Duration(250*time.Millisecond), batch.Duration(2*time.Second), batch.Duration(500*time.Millisecond)
	node := func(id string) childConfig {
		c := childConfig{DB: url, Allow: []string{up.addr()}, Callers: append(killCallers, "gc"), Batch: bc, UserAgent: agentOf(id)}
		c.Batch.RunnerID = id
		return c
	}
	logs := &logSink{}
	procs := []*daemonProc{startDaemon(t, node("n0"), logs), startDaemon(t, node("n1"), logs), startDaemon(t, node("n2"), logs)}
	nodes := &nodeSet{}
	addrs := func(skip int) []string {
		var a []string
		for i, p := range procs {
			if i != skip {
				a = append(a, p.addr)
			}
		}
		return a
	}
	nodes.set(addrs(-1)...)
	w := &workload{ledger: newLedger(), up: up, counts: newCounts()}
	var down outageWindow
	w.counts.allow503 = true // planned while the database is down, and only then
	w.counts.planned503 = down.allows
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for i, caller := range killCallers {
		wg.Go(func() { w.run(ctx, caller, uint64(300+i), nodes.get) })
	}
	defer func() { stop(); wg.Wait() }()
	settle := func() { sleep(ctx, 1500*time.Millisecond) }
	settle()

	// The database's faults: no job of a live node may fail.
	dbFault := func(name string, fault func()) {
		t.Helper()
		mark := logMark(logs)
		start := time.Now()
		down.begin()
		fault()
		back := time.Now()
		down.end(outageTail)
		resumed, ok := waitLogAfter(logs, logMark(logs), `"msg":"batch target finished"`, 30*time.Second)
		settle()
		warn, errs, reaped, msgs := logSummary(logs, mark)
		if reaped > 0 {
			t.Errorf("%s: %d jobs of live nodes failed as stale", name, reaped)
		}
		if !ok {
			t.Errorf("%s: no target finished within 30s of the server answering again", name)
		}
		t.Logf("%s: fault %s; first target finished %s after the server answered again; %d WARN and %d ERROR lines over 3 nodes %v",
			name, back.Sub(start).Round(10*time.Millisecond), resumed.Round(time.Millisecond), warn, errs, msgs)
	}
	dbFault("server restart", func() { ctl("restart") })
	dbFault(fmt.Sprintf("server stopped %s (stale_after %s)", outage, bc.StaleAfter), func() {
		ctl("stop")
		time.Sleep(outage)
		ctl("start")
	})
	dbFault("every backend terminated", func() {
		conn, err := pgx.Connect(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(t.Context(), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"); err != nil {
			t.Fatal(err)
		}
	})

	// gated submits six jobs whose first page hangs until gate opens, and
	// waits until each first page is being fetched. They spread over the
	// three nodes as the nodes claim them: n0 has 4 workers, so n1 and n2
	// hold at least 2 of them together. It returns the one of n1 and n2
	// that holds the most, the node the fault then hits mid-target, and
	// how many it holds.
	gated := func(gate int) (pick, held int) {
		t.Helper()
		gc := newClient(procs[0].addr, "gc", w.counts)
		defer gc.close()
		var pages []string
		for i := range 6 {
			first := fmt.Sprintf("fgate%d-%d", gate, i)
			urls := []string{up.url(first), up.url(fmt.Sprintf("f-gated%d-%d", gate, i))}
			sr, a, err := gc.submit(t.Context(), urls)
			if err != nil || a.code != 202 {
				t.Fatalf("gated submit: %v %d", err, a.code)
			}
			w.ledger.ack(ackedJob{id: sr.JobID, caller: "gc", urls: urls})
			pages = append(pages, first)
		}
		holds := map[string]int{}
		deadline := time.Now().Add(30 * time.Second)
		for _, page := range pages {
			for {
				if a, ok := up.agent(page); ok {
					holds[a]++
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("gated page %s not fetched within 30s", page)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		pick = 1
		if holds[agentOf("n2")] > holds[agentOf("n1")] {
			pick = 2
		}
		held = holds[agentOf(fmt.Sprintf("n%d", pick))]
		if held == 0 {
			t.Fatalf("gated jobs by node %v: n1 and n2 hold none", holds)
		}
		return pick, held
	}
	restartLines := func(mark int) (stale, own int) {
		lines := logs.all()
		for _, line := range lines[min(mark, len(lines)):] {
			var rec struct {
				Msg  string
				Jobs int
			}
			if json.Unmarshal([]byte(line), &rec) == nil {
				switch rec.Msg {
				case "batch jobs of stale runners failed":
					stale += rec.Jobs
				case "batch jobs failed by restart":
					own += rec.Jobs
				}
			}
		}
		return stale, own
	}

	// A node frozen past StaleAfter is taken for dead: its jobs move on;
	// woken, its late writes are refused.
	fi, fheld := gated(1)
	frozen := procs[fi]
	nodes.set(addrs(fi)...)
	mark := logMark(logs)
	frozen.cmd.Process.Signal(syscall.SIGSTOP)
	froze := time.Now()
	up.openGate(1) // the others' gated jobs go on; the frozen node's wait
	reapAt, reapOK := waitLogAfter(logs, mark, `"msg":"batch jobs of stale runners failed"`, time.Duration(bc.StaleAfter+bc.HeartbeatInterval)+10*time.Second)
	took, restarted := w.waitNoneHeld(t, procs[0].addr, time.Duration(bc.StaleAfter+bc.HeartbeatInterval)+10*time.Second)
	stale, _ := restartLines(mark)
	if !reapOK {
		t.Errorf("SIGSTOP of n%d: no stale reap within stale_after + heartbeat_interval + 10s", fi)
	}
	if stale < fheld {
		t.Errorf("SIGSTOP of n%d: %d jobs reaped as stale; it held %d gated ones", fi, stale, fheld)
	}
	t.Logf("SIGSTOP of n%d, holding %d gated jobs: %d jobs reaped %s after the freeze (stale_after %s + heartbeat_interval %s = %s); every job running then moved on within %s, %d failed as restart",
		fi, fheld, stale, reapAt.Round(10*time.Millisecond), bc.StaleAfter, bc.HeartbeatInterval, bc.StaleAfter+bc.HeartbeatInterval, took.Round(10*time.Millisecond), restarted)
	sleep(ctx, time.Duration(bc.StaleAfter)-time.Since(froze)+time.Second) // frozen past StaleAfter
	frozen.cmd.Process.Signal(syscall.SIGCONT)
	nodes.set(addrs(-1)...)
	settle()

	// A node killed and restarted under its runner id fails its own jobs
	// at once.
	ki, kheld := gated(2)
	procs[ki].kill()
	nodes.set(addrs(ki)...)
	up.openGate(2)
	mark = logMark(logs)
	restart := time.Now()
	procs[ki] = startDaemon(t, node(fmt.Sprintf("n%d", ki)), logs)
	nodes.set(addrs(-1)...)
	started := time.Since(restart)
	took, restarted = w.waitNoneHeld(t, procs[0].addr, 10*time.Second)
	stale, own := restartLines(mark)
	if stale > 0 {
		t.Errorf("SIGKILL of n%d and restart under its id: %d jobs failed as stale; want its own failed by its restart", ki, stale)
	}
	if own < kheld {
		t.Errorf("SIGKILL of n%d and restart under its id: %d jobs failed by its restart; it held %d gated ones", ki, own, kheld)
	}
	t.Logf("SIGKILL of n%d, holding %d gated jobs, restarted under its id (serving %s after the kill): %d of its jobs failed by its restart; every job running then moved on within %s more, %d failed as restart",
		ki, kheld, started.Round(10*time.Millisecond), own, took.Round(10*time.Millisecond), restarted)
	settle()

	stop()
	wg.Wait()
	w.verify(t, procs[0].addr, 0, true, time.Minute)
	for _, p := range procs {
		if err := p.stop(); err != nil {
			t.Errorf("graceful stop: %v", err)
		}
	}
	w.counts.check(t)
	// No line names 127.0.0.1: the driver's text never reaches a log.
	checkLogs(t, logs, up)
	jobs, results := w.ledger.counts()
	t.Logf("%d acknowledged jobs, %d results seen done, none lost or changed; %s", jobs, results, w.counts)
	if jobs == 0 || results == 0 {
		t.Fatal("the load acknowledged nothing: the test tested nothing")
	}
}
