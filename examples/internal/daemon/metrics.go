package daemon

import (
	"bufio"
	"bytes"
	"io"
	"strings"

	"github.com/VictoriaMetrics/metrics"
)

// batchHelp describes the runner's metric families by their name after the
// configurable prefix.
var batchHelp = map[string]string{
	"_jobs_total":       "Batch jobs by outcome: created, reused, done, partial, failed, cancelled, restart.",
	"_targets_total":    "Batch targets fetched, by outcome.",
	"_queue_depth":      "Batch jobs queued and waiting for a worker.",
	"_targets_inflight": "Batch target fetches in flight.",
	"_job_seconds":      "Time from a batch job's claim to its end.",
	"_target_seconds":   "Time one batch target took, busy waits included.",
	"_result_bytes":     "Size of stored batch result envelopes.",
	"_webhooks_total":   "Batch webhook outcomes: delivered events, failed attempts, dropped events.",
	"_webhook_seconds":  "Time one batch webhook delivery attempt took.",
}

var otherHelp = map[string]string{
	"batchd_http_requests_total":  "HTTP requests by fixed route label and status.",
	"batchd_http_request_seconds": "HTTP request handling time by fixed route label.",
}

// dropped are process metrics whose names break Prometheus naming rules
// (a counter without _total, a gauge ending in _count): left out rather
// than exposed under a misleading type.
var dropped = map[string]bool{
	"go_cgo_calls_count": true,
	"go_cpu_count":       true,
	"go_gc_forced_count": true,
}

// writeMetrics writes sets and the Go process metrics as Prometheus text
// that passes `promtool check metrics`: every family has a # HELP text and a
// # TYPE, and monotonic *_total process metrics are typed as counters.
func writeMetrics(w io.Writer, sets ...*metrics.Set) error {
	metrics.ExposeMetadata(true) // global, and only this process's concern
	var buf bytes.Buffer
	for _, s := range sets {
		s.WritePrometheus(&buf)
	}
	metrics.WriteProcessMetrics(&buf)

	out := bufio.NewWriter(w)
	skip := false
	sc := bufio.NewScanner(&buf)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "# HELP "):
			fam, _, _ := strings.Cut(strings.TrimPrefix(line, "# HELP "), " ")
			skip = dropped[fam]
			if !skip {
				out.WriteString("# HELP " + fam + " " + help(fam) + "\n")
			}
		case strings.HasPrefix(line, "# TYPE "):
			if skip {
				continue
			}
			fields := strings.Fields(line)
			if len(fields) == 4 && fields[3] == "gauge" && strings.HasSuffix(fields[2], "_total") {
				line = "# TYPE " + fields[2] + " counter"
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

func help(fam string) string {
	if h, ok := otherHelp[fam]; ok {
		return h
	}
	for suffix, h := range batchHelp {
		if strings.HasSuffix(fam, suffix) && !strings.HasPrefix(fam, "go_") && !strings.HasPrefix(fam, "process_") {
			return h
		}
	}
	return "Go runtime metric " + fam + "."
}
