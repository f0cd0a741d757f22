package batch

import (
	"fmt"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// Job outcomes, the label values of <prefix>_jobs_total.
const (
	jobCreated = "created"
	jobReused  = "reused"
	jobRestart = "restart"
	// jobHandedOn counts the jobs a runner handed back to the queue
	// instead of failing them (Config.Resume).
	jobHandedOn = "handed_on"
	jobOther    = "other"
)

// jobOutcomes is the fixed label set of <prefix>_jobs_total.
var jobOutcomes = []string{
	jobCreated, jobReused, string(JobDone), string(JobPartial), string(JobFailed),
	string(JobCancelled), jobRestart, jobHandedOn, jobOther,
}

// Webhook outcomes, the label values of <prefix>_webhooks_total: an event
// delivered, an attempt that failed (and is retried, unless the event is
// dropped), an event given up after Config.WebhookRetryFor.
const (
	webhookDelivered = "delivered"
	webhookFailed    = "failed"
	webhookDropped   = "dropped"
)

// webhookOutcomes is the fixed label set of <prefix>_webhooks_total.
var webhookOutcomes = []string{webhookDelivered, webhookFailed, webhookDropped}

// Histogram bucket bounds (upper bounds; +Inf is implicit).
var (
	jobSecondsBuckets    = []float64{0.1, 0.5, 1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}
	targetSecondsBuckets = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}
	resultBytesBuckets   = metrics.ExponentialBuckets(256, 4, 8) // 256 B … 4 MiB
)

// metricsHelp describes each metric family of a runner by its name after
// the prefix.
var metricsHelp = map[string]string{
	"_jobs_total": "Batch jobs by outcome: created, reused, done, partial, failed, cancelled, restart, " +
		"handed_on (handed back to the queue by a close, restart or stale reap, with Resume on).",
	"_targets_total":     "Batch targets fetched, by outcome.",
	"_queue_depth":       "Batch jobs queued and waiting for a worker.",
	"_targets_inflight":  "Batch target fetches in flight.",
	"_job_seconds":       "Time from a batch job's claim to its end.",
	"_target_seconds":    "Time one batch target took, busy waits included.",
	"_result_bytes":      "Size of stored batch result envelopes.",
	"_webhooks_total":    "Batch webhook outcomes: delivered events, failed attempts, dropped events.",
	"_webhook_seconds":   "Time one batch webhook delivery attempt took.",
	"_webhooks_inflight": "Batch webhook deliveries in flight on this runner: the pool's busy slots.",
	"_host_waits_total": "Times a batch job waited for its target's host: full (FetchesPerHost fetches in flight), " +
		"interval (HostInterval or a crawl delay), retry_after (the host asked to wait).",
	"_jobs_waiting":      "Batch jobs held by this runner that wait for their host or a busy fetcher, holding no worker.",
	"_retry_after_total": "Batch fetches answered with a request to wait (Retry-After), which held their host back.",
	"_fetch_overruns_total": "Batch fetches that returned more than 1s after their deadline or the runner's close: " +
		"a FetchFunc that ignores its context, holding a worker's fetch slot meanwhile.",
}

// runnerMetrics is a runner's instruments, all in one *metrics.Set.
type runnerMetrics struct {
	set        *metrics.Set
	jobs       map[string]*metrics.Counter
	targets    map[Outcome]*metrics.Counter
	queueDepth *metrics.Gauge
	inflight   *metrics.Gauge
	jobSecs    *metrics.PrometheusHistogram
	targetSecs *metrics.PrometheusHistogram
	resultSize *metrics.PrometheusHistogram
	webhooks   map[string]*metrics.Counter
	// webhookSecs: one delivery attempt, failed ones included.
	webhookSecs *metrics.PrometheusHistogram
	// fetchOverruns: fetches that returned long after their context ended.
	fetchOverruns *metrics.Counter
	// webhooksInFlight: the deliverer's busy slots.
	webhooksInFlight *metrics.Gauge
	// hostWaits: parks by reason; hostWaiting: jobs parked now;
	// retryAfter: Retry-After answers honoured.
	hostWaits   map[string]*metrics.Counter
	hostWaiting *metrics.Gauge
	retryAfter  *metrics.Counter
}

// newRunnerMetrics creates every series of the fixed vocabulary up front, so
// that each one is exposed (at 0) from construction.
func newRunnerMetrics(prefix string) *runnerMetrics {
	s := metrics.NewSet()
	m := &runnerMetrics{
		set:        s,
		jobs:       make(map[string]*metrics.Counter, len(jobOutcomes)),
		targets:    make(map[Outcome]*metrics.Counter, len(batchdriver.Outcomes)),
		queueDepth: s.NewGauge(prefix+"_queue_depth", nil),
		inflight:   s.NewGauge(prefix+"_targets_inflight", nil),
		jobSecs:    s.NewPrometheusHistogramExt(prefix+"_job_seconds", jobSecondsBuckets),
		targetSecs: s.NewPrometheusHistogramExt(prefix+"_target_seconds", targetSecondsBuckets),
		resultSize: s.NewPrometheusHistogramExt(prefix+"_result_bytes", resultBytesBuckets),
		webhooks:   make(map[string]*metrics.Counter, len(webhookOutcomes)),

		webhookSecs:      s.NewPrometheusHistogramExt(prefix+"_webhook_seconds", targetSecondsBuckets),
		webhooksInFlight: s.NewGauge(prefix+"_webhooks_inflight", nil),

		fetchOverruns: s.NewCounter(prefix + "_fetch_overruns_total"),

		hostWaits:   make(map[string]*metrics.Counter, len(hostWaitReasons)),
		hostWaiting: s.NewGauge(prefix+"_jobs_waiting", nil),
		retryAfter:  s.NewCounter(prefix + "_retry_after_total"),
	}
	for _, w := range hostWaitReasons {
		m.hostWaits[w] = s.NewCounter(fmt.Sprintf(`%s_host_waits_total{reason=%q}`, prefix, w))
	}
	for _, o := range jobOutcomes {
		m.jobs[o] = s.NewCounter(fmt.Sprintf(`%s_jobs_total{outcome=%q}`, prefix, o))
	}
	for _, o := range batchdriver.Outcomes {
		m.targets[o] = s.NewCounter(fmt.Sprintf(`%s_targets_total{outcome=%q}`, prefix, o))
	}
	for _, o := range webhookOutcomes {
		m.webhooks[o] = s.NewCounter(fmt.Sprintf(`%s_webhooks_total{outcome=%q}`, prefix, o))
	}
	return m
}

// hostWait counts one wait for a host, by one of hostWaitReasons.
func (m *runnerMetrics) hostWait(reason string) { m.hostWaits[reason].Inc() }

// webhook counts one webhook outcome, one of webhookOutcomes.
func (m *runnerMetrics) webhook(outcome string) { m.webhooks[outcome].Inc() }

// job counts one job outcome; an unknown one counts as other.
func (m *runnerMetrics) job(outcome string) {
	c, ok := m.jobs[outcome]
	if !ok {
		c = m.jobs[jobOther]
	}
	c.Inc()
}

// target counts one target outcome (folded) and its duration.
func (m *runnerMetrics) target(o Outcome, d time.Duration) {
	m.targets[o.Fold()].Inc()
	m.targetSecs.Update(d.Seconds())
}

// skipped counts a target that its submit skipped: it took no fetch time.
func (m *runnerMetrics) skipped(o Outcome) { m.targets[o.Fold()].Inc() }

// expired counts n targets that a deadline ended before they started:
// they took no fetch time.
func (m *runnerMetrics) expired(n int) {
	if n > 0 {
		m.targets[OutcomeExpired].Add(n)
	}
}
