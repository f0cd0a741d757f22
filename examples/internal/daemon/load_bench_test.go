package daemon

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp/batchserver"
)

// BenchmarkDaemon_StatusLoad: status-summary reads against the whole daemon
// (its server and limits, the batch handler, the SQLite store) on loopback,
// beside the daemon's static /healthz on the same server and a bare static
// handler on a plain server of the same process, at 1, 10 and 50
// concurrent clients with keep-alive connections. Each phase runs for
// loadPhase; they alternate, so that all see the same machine. It reports
// requests/s of each, the ratio of status to /healthz and to the bare
// handler, and p50 and p99 of the status reads and of /healthz. The load
// generator shares the cores with the server.
//
//	go test -run '^$' -bench StatusLoad -benchtime 3x ./examples/internal/daemon/
func BenchmarkDaemon_StatusLoad(b *testing.B) {
	addr, path := loadDaemon(b)
	bare := staticServer(b)
	for _, clients := range []int{1, 10, 50} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			var st, hz, dy loadResult
			for range b.N {
				st = st.add(runLoad(b, "http://"+bare+"/", "", clients))
				hz = hz.add(runLoad(b, "http://"+addr+"/healthz", "", clients))
				dy = dy.add(runLoad(b, "http://"+addr+path, "alice-key", clients))
			}
			b.ReportMetric(dy.rps(), "status-req/s")
			b.ReportMetric(hz.rps(), "healthz-req/s")
			b.ReportMetric(st.rps(), "bare-req/s")
			b.ReportMetric(dy.rps()/hz.rps(), "ratio")
			b.ReportMetric(dy.rps()/st.rps(), "ratio-bare")
			b.ReportMetric(dy.quantile(0.50).Seconds()*1e3, "p50-ms")
			b.ReportMetric(dy.quantile(0.99).Seconds()*1e3, "p99-ms")
			b.ReportMetric(hz.quantile(0.99).Seconds()*1e3, "healthz-p99-ms")
		})
	}
}

// loadPhase is how long one phase of load runs.
const loadPhase = 2 * time.Second

// loadDaemon serves a daemon with one finished job of 32 targets and
// returns its address and the job's status path.
func loadDaemon(b *testing.B) (addr, statusPath string) {
	b.Helper()
	d, path := loadDaemonInProcess(b)
	return serveOn(b, d), path
}

// loadDaemonInProcess opens a daemon holding one finished job of 32
// targets, fetched from a local page server, and returns it with the
// job's status path. The daemon is closed when b ends.
func loadDaemonInProcess(b *testing.B) (*Daemon, string) {
	b.Helper()
	pages := http.NewServeMux()
	pages.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html><body><p>a fetched page</p></body></html>")
	})
	pln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	psrv := &http.Server{Handler: pages}
	go psrv.Serve(pln)
	b.Cleanup(func() { psrv.Close() })
	cfg := Config{
		DB:     filepath.Join(b.TempDir(), "load.db"),
		Keys:   []batchserver.Key{{Name: "alice", Secret: "alice-key"}},
		Allow:  []string{pln.Addr().String()},
		Limits: batchserver.Limits{MaxConns: 1024},
	}
	d, err := Open(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close(context.Background()) })

	caller := batch.Caller{Name: "alice"}
	targets := make([]batch.Target, 32)
	for i := range targets {
		targets[i] = batch.Target{URL: fmt.Sprintf("http://%s/page/%d", pln.Addr(), i)}
	}
	job, _, err := d.Runner().Submit(context.Background(), caller, targets)
	if err != nil {
		b.Fatal(err)
	}
	info, err := d.Runner().Wait(context.Background(), caller, job.ID, batch.WaitOptions{Timeout: batch.MaxWait})
	for err == nil && !info.Status.Finished() {
		info, err = d.Runner().Wait(context.Background(), caller, job.ID, batch.WaitOptions{Timeout: batch.MaxWait})
	}
	if err != nil || info.Status != batch.JobDone {
		b.Fatalf("load job: %s, %v", info.Status, err)
	}
	return d, "/v1/batch/" + job.ID
}

// staticServer serves a small static JSON answer, the ceiling of the
// process's HTTP stack.
func staticServer(b *testing.B) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`+"\n")
	})}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// loadResult is what one or more phases measured.
type loadResult struct {
	requests  int
	elapsed   time.Duration
	latencies []time.Duration
}

func (r loadResult) add(o loadResult) loadResult {
	return loadResult{r.requests + o.requests, r.elapsed + o.elapsed, append(r.latencies, o.latencies...)}
}

func (r loadResult) rps() float64 { return float64(r.requests) / r.elapsed.Seconds() }

func (r loadResult) quantile(q float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	l := slices.Clone(r.latencies)
	slices.Sort(l)
	return l[min(len(l)-1, int(q*float64(len(l))))]
}

// runLoad sends GETs of url from clients goroutines, each on its own
// keep-alive connection, for loadPhase, and fails on any answer but 200.
func runLoad(b *testing.B, url, key string, clients int) loadResult {
	b.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	deadline := time.Now().Add(loadPhase)
	var mu sync.Mutex
	var res loadResult
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		wg.Go(func() {
			var lat []time.Duration
			for time.Now().Before(deadline) {
				req, _ := http.NewRequest(http.MethodGet, url, nil)
				if key != "" {
					req.Header.Set("Authorization", "Bearer "+key)
				}
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lat = append(lat, time.Since(t0))
				if resp.StatusCode != http.StatusOK {
					b.Errorf("GET %s: %d", url, resp.StatusCode)
					return
				}
			}
			mu.Lock()
			res.latencies = append(res.latencies, lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.requests = len(res.latencies)
	return res
}

// BenchmarkDaemon_StatusHandler: one status-summary read through the
// daemon's handler in process, without the network: what a read costs the
// server.
func BenchmarkDaemon_StatusHandler(b *testing.B) {
	d, path := loadDaemonInProcess(b)
	h := d.Handler()
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer alice-key")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatal(w.Code)
		}
	}
}
