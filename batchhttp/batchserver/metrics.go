package batchserver

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/siftfetch/batchkit/batchhttp"
)

// MetricsConfig configures [NewMetrics].
type MetricsConfig struct {
	// Prefix names the HTTP series [Metrics.Observe] keeps:
	// <Prefix>_http_requests_total{route,status} and
	// <Prefix>_http_request_seconds{route}. Defaults to "batch".
	Prefix string
	// Authenticate, if set, guards the endpoint: a request it refuses gets
	// its answer (401), and one it accepts the metrics, whoever the caller.
	// A host passes the API's [batchhttp.CallerFunc] to put /metrics
	// behind the callers' keys, or a [NewKeyAuth] of a key of its own.
	// Defaults to none: the metrics hold no caller's data, only counts.
	Authenticate batchhttp.CallerFunc
	// NoProcessMetrics leaves out the Go runtime and process series
	// (go_*, process_*). Defaults to false: they are written.
	NoProcessMetrics bool
}

// Metrics is a host's GET /metrics: the runner's series, the HTTP series
// of every route (the [batchhttp.Handler]'s through [Metrics.Observe], the
// host's own through [batchhttp.Instrument]), any other sets the host
// adds, and the Go process series, as Prometheus text in which every
// family has a # HELP and a # TYPE line (promtool check metrics passes
// it). It serves the endpoint itself (ServeHTTP). Create one with
// [NewMetrics]; it is safe for concurrent use.
//
// The # TYPE lines come from github.com/VictoriaMetrics/metrics, whose
// metadata switch is global: NewMetrics turns on [metrics.ExposeMetadata]
// for the whole process, so other sets the host writes itself gain
// # HELP and # TYPE lines too (which Prometheus reads as before).
type Metrics struct {
	prefix  string
	auth    batchhttp.CallerFunc
	process bool
	http    *metrics.Set
	serve   http.Handler // ServeHTTP behind a request id

	mu   sync.Mutex
	sets []*metrics.Set
	help map[string]string

	// series caches the HTTP series of each route and status
	// (routeStatus → httpSeries), so that a request formats no names.
	series sync.Map
}

// NewMetrics returns a metrics endpoint with its HTTP series and, if
// opts.NoProcessMetrics is false, the process series. Add the runner with
// m.Add(runner.Metrics(), runner.MetricsHelp()).
func NewMetrics(opts MetricsConfig) (*Metrics, error) {
	prefix := cmp.Or(opts.Prefix, "batch")
	if err := metrics.ValidateMetric(prefix + "_http_requests_total"); err != nil {
		return nil, fmt.Errorf("batchserver: MetricsConfig.Prefix %q: %w", prefix, err)
	}
	metrics.ExposeMetadata(true)
	m := &Metrics{prefix: prefix, auth: opts.Authenticate, process: !opts.NoProcessMetrics, http: metrics.NewSet()}
	m.help = map[string]string{
		prefix + "_http_requests_total":  "HTTP requests by fixed route label and status.",
		prefix + "_http_request_seconds": "HTTP request handling time by fixed route label.",
	}
	m.sets = []*metrics.Set{m.http}
	m.serve = batchhttp.WithRequestID(http.HandlerFunc(m.serveHTTP))
	return m, nil
}

// Add writes set too, after those added before; help gives the # HELP text
// of its families by full name (see batch.Runner.MetricsHelp). A family
// without a text gets a generic one.
func (m *Metrics) Add(set *metrics.Set, help map[string]string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sets = append(m.sets, set)
	maps.Copy(m.help, help)
}

// Observe counts one request of a fixed route label with its status and
// time. It is a [batchhttp.ObserveFunc], for
// [batchhttp.HandlerConfig].Observe and [batchhttp.Instrument]. route must
// come from a fixed set (never a job id or a URL): each route and status
// is a series.
func (m *Metrics) Observe(route string, status int, d time.Duration) {
	s, ok := m.series.Load(routeStatus{route, status})
	if !ok { // the first request of its route and status: name the series once
		s, _ = m.series.LoadOrStore(routeStatus{route, status}, httpSeries{
			requests: m.http.GetOrCreateCounter(fmt.Sprintf(`%s_http_requests_total{route=%q,status="%d"}`, m.prefix, route, status)),
			seconds:  m.http.GetOrCreatePrometheusHistogram(fmt.Sprintf(`%s_http_request_seconds{route=%q}`, m.prefix, route)),
		})
	}
	hs := s.(httpSeries)
	hs.requests.Inc()
	hs.seconds.Update(d.Seconds())
}

// routeStatus keys the HTTP series of a route and an answer's status.
type routeStatus struct {
	route  string
	status int
}

// httpSeries are the series one request of a route and status updates.
type httpSeries struct {
	requests *metrics.Counter
	seconds  *metrics.PrometheusHistogram
}

// ServeHTTP serves the metrics to GET and HEAD, after Authenticate if set.
func (m *Metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.serve.ServeHTTP(w, r)
}

func (m *Metrics) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		batchhttp.WriteError(w, http.StatusMethodNotAllowed, batchhttp.CodeMethodNotAllowed, "method not allowed", "")
		return
	}
	if m.auth != nil {
		if _, ok := m.auth(w, r); !ok {
			return
		}
	}
	var buf bytes.Buffer
	if err := m.WritePrometheus(&buf); err != nil {
		batchhttp.WriteError(w, http.StatusInternalServerError, batchhttp.CodeInternal, "internal error", "")
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(buf.Bytes())
	}
}

// misnamedProcessMetrics are process series whose names break the
// Prometheus naming rules (a counter without _total, a gauge ending in
// _count): left out rather than exposed under a misleading type.
var misnamedProcessMetrics = map[string]bool{
	"go_cgo_calls_count": true,
	"go_cpu_count":       true,
	"go_gc_forced_count": true,
}

// WritePrometheus writes every set, then the process series, as Prometheus
// text exposition with a # HELP and a # TYPE line for every family;
// monotonic *_total process series are typed as counters.
func (m *Metrics) WritePrometheus(w io.Writer) error {
	m.mu.Lock()
	sets := m.sets
	help := maps.Clone(m.help) // Add may write the map once the lock is released
	var buf bytes.Buffer
	for _, s := range sets {
		s.WritePrometheus(&buf)
	}
	m.mu.Unlock()
	if m.process {
		metrics.WriteProcessMetrics(&buf)
	}
	out := bufio.NewWriter(w)
	skip := false
	sc := bufio.NewScanner(&buf)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "# HELP "):
			fam, _, _ := strings.Cut(strings.TrimPrefix(line, "# HELP "), " ")
			skip = misnamedProcessMetrics[fam]
			if !skip {
				text, ok := help[fam]
				if !ok {
					text = "Metric " + fam + "."
					if strings.HasPrefix(fam, "go_") || strings.HasPrefix(fam, "process_") {
						text = "Go runtime metric " + fam + "."
					}
				}
				out.WriteString("# HELP " + fam + " " + text + "\n")
			}
		case strings.HasPrefix(line, "# TYPE "):
			if skip {
				continue
			}
			if f := strings.Fields(line); len(f) == 4 && f[3] == "gauge" && strings.HasSuffix(f[2], "_total") {
				line = "# TYPE " + f[2] + " counter"
			}
			out.WriteString(line + "\n")
		case !skip:
			out.WriteString(line + "\n")
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return out.Flush()
}
