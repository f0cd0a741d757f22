package batch_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// sample is one parsed line of Prometheus text exposition.
type sample struct {
	name   string // with labels, as written
	family string
	value  float64
}

var (
	sampleRE  = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*\})? (\S+)$`)
	commentRE = regexp.MustCompile(`^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]*( .*)?$`)
)

// parseExposition parses Prometheus text format strictly enough to catch a
// malformed line: every line is a comment or `name{labels} value`.
func parseExposition(t *testing.T, text string) map[string]sample {
	t.Helper()
	out := map[string]sample{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "#") {
			if !commentRE.MatchString(line) {
				t.Fatalf("bad comment line %q", line)
			}
			continue
		}
		m := sampleRE.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("line %q is not Prometheus text exposition", line)
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil && m[3] != "+Inf" && m[3] != "-Inf" && m[3] != "NaN" {
			t.Fatalf("line %q: bad value: %v", line, err)
		}
		name := m[1] + m[2]
		if _, dup := out[name]; dup {
			t.Fatalf("series %s written twice", name)
		}
		out[name] = sample{name: name, family: m[1], value: v}
	}
	return out
}

func scrape(t *testing.T, r *batch.Runner) map[string]sample {
	t.Helper()
	var buf bytes.Buffer
	r.Metrics().WritePrometheus(&buf)
	return parseExposition(t, buf.String())
}

// wantSeries lists every series a fresh runner exposes, but the histograms'
// buckets.
func wantSeries(p string) []string {
	var out []string
	for _, o := range []string{"created", "reused", "done", "partial", "failed", "cancelled", "restart", "handed_on", "other"} {
		out = append(out, fmt.Sprintf(`%s_jobs_total{outcome=%q}`, p, o))
	}
	for _, o := range []string{"ok", "blocked", "timeout", "busy", "upstream_4xx", "upstream_5xx", "unsupported", "too_long", "cancel", "expired", "other", "interrupted", "robots", "invalid"} {
		out = append(out, fmt.Sprintf(`%s_targets_total{outcome=%q}`, p, o))
	}
	for _, o := range []string{"delivered", "failed", "dropped"} {
		out = append(out, fmt.Sprintf(`%s_webhooks_total{outcome=%q}`, p, o))
	}
	for _, w := range []string{"full", "interval", "retry_after"} {
		out = append(out, fmt.Sprintf(`%s_host_waits_total{reason=%q}`, p, w))
	}
	out = append(out, p+"_queue_depth", p+"_targets_inflight", p+"_fetch_overruns_total", p+"_webhooks_inflight",
		p+"_jobs_waiting", p+"_retry_after_total")
	for _, h := range []string{"job_seconds", "target_seconds", "result_bytes", "webhook_seconds"} {
		out = append(out, p+"_"+h+"_sum", p+"_"+h+"_count", p+"_"+h+`_bucket{le="+Inf"}`)
	}
	slices.Sort(out)
	return out
}

func TestRunner_MetricsSeriesNames(t *testing.T) {
	t.Parallel()
	f := func(prefix, want string) {
		t.Helper()
		r := batchtest.NewRunner(t, batch.Config{MetricsPrefix: prefix})
		got := scrape(t, r)
		var names []string
		for name, s := range got {
			if strings.Contains(name, "_bucket{") && !strings.HasSuffix(name, `le="+Inf"}`) {
				continue
			}
			if s.value != 0 {
				t.Errorf("%s = %v on a fresh runner, want 0", name, s.value)
			}
			names = append(names, name)
		}
		slices.Sort(names)
		if !slices.Equal(names, wantSeries(want)) {
			t.Errorf("prefix %q: series\n%s\nwant\n%s", prefix, strings.Join(names, "\n"), strings.Join(wantSeries(want), "\n"))
		}
	}
	f("", "batch")
	f("sift_batch", "sift_batch")
}

func TestRunner_MetricsDuringAndAfterJobs(t *testing.T) {
	t.Parallel()
	fetch := batchtest.NewBlockingFetcher()
	r := batchtest.NewRunner(t, batch.Config{Fetch: fetch.Fetch, Workers: 1})
	alice, bob := batch.Caller{Name: "alice"}, batch.Caller{Name: "bob"}
	id1Job, _, err := r.Submit(t.Context(), alice, batchtest.Targets("a", 2))
	if err != nil {
		t.Fatal(err)
	}
	id1 := id1Job.ID
	<-fetch.Started
	id2Job, _, err := r.Submit(t.Context(), bob, batchtest.Targets("b", 1))
	if err != nil {
		t.Fatal(err)
	}
	id2 := id2Job.ID
	m := scrape(t, r)
	if got := m["batch_targets_inflight"].value; got != 1 {
		t.Errorf("targets_inflight = %v while a target is in flight, want 1", got)
	}
	// The queue depth is a sample of the store, which a submit counts up
	// until the next sample: a claim that the change feed woke can sample
	// before the submit counts, and a collection pass's sample can land
	// late. A readiness probe takes a sample; with one job waiting and the
	// worker busy, every sample is 1.
	depth := m["batch_queue_depth"].value
	for deadline := time.Now().Add(5 * time.Second); depth != 1 && time.Now().Before(deadline); {
		if err := r.Ready(t.Context()); err != nil {
			t.Fatal(err)
		}
		depth = scrape(t, r)["batch_queue_depth"].value
	}
	if depth != 1 {
		t.Errorf("queue_depth = %v with one job waiting, want 1", depth)
	}
	if got := m[`batch_jobs_total{outcome="created"}`].value; got != 2 {
		t.Errorf(`jobs_total{created} = %v, want 2`, got)
	}
	for range 3 {
		fetch.Release()
	}
	batchtest.WaitFinished(t, r, alice, id1, 10*time.Second)
	batchtest.WaitFinished(t, r, bob, id2, 10*time.Second)
	if _, reused, _ := r.Submit(t.Context(), bob, batchtest.Targets("b", 1)); !reused {
		t.Fatal("resubmit was not reused")
	}
	if err := r.Close(t.Context()); err != nil { // the worker has counted everything
		t.Fatal(err)
	}
	m = scrape(t, r)
	want := map[string]float64{
		`batch_jobs_total{outcome="done"}`:     2,
		`batch_jobs_total{outcome="reused"}`:   1,
		`batch_targets_total{outcome="ok"}`:    3,
		`batch_targets_inflight`:               0,
		`batch_queue_depth`:                    0,
		`batch_job_seconds_count`:              2,
		`batch_target_seconds_count`:           3,
		`batch_result_bytes_count`:             3,
		`batch_result_bytes_bucket{le="+Inf"}`: 3,
	}
	for name, v := range want {
		if got := m[name].value; got != v {
			t.Errorf("%s = %v, want %v", name, got, v)
		}
	}
}

func TestRunner_MetricsFoldUnknownOutcome(t *testing.T) {
	t.Parallel()
	weird := batch.NewFetchError(batch.Outcome(`we"ird{}`), "", errors.New("weird"))
	r := batchtest.NewRunner(t, batch.Config{Fetch: batchtest.FailingFetcher(weird)})
	c := batch.Caller{Name: "alice"}
	idJob, _, err := r.Submit(t.Context(), c, batchtest.Targets("w", 2))
	if err != nil {
		t.Fatal(err)
	}
	id := idJob.ID
	info := batchtest.WaitFinished(t, r, c, id, 10*time.Second)
	if info.Targets[0].Outcome != batch.OutcomeOther {
		t.Errorf("stored outcome %q, want other", info.Targets[0].Outcome)
	}
	// The job's status is visible before the worker counts it: close the
	// runner, which waits for the worker, before reading the counters.
	if err := r.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	m := scrape(t, r)
	if got := m[`batch_targets_total{outcome="other"}`].value; got != 2 {
		t.Errorf(`targets_total{other} = %v, want 2`, got)
	}
	if got := m[`batch_jobs_total{outcome="failed"}`].value; got != 1 {
		t.Errorf(`jobs_total{failed} = %v, want 1`, got)
	}
	for name := range m {
		if strings.Contains(name, "ird") {
			t.Errorf("raw outcome became a label: %s", name)
		}
	}
}

func TestOutcome_Fold(t *testing.T) {
	t.Parallel()
	f := func(in, want batch.Outcome) {
		t.Helper()
		if got := in.Fold(); got != want {
			t.Errorf("Outcome(%q).Fold() = %q, want %q", in, got, want)
		}
	}
	f("ok", "ok")
	f("too_long", "too_long")
	f("cancel", "cancel")
	f("expired", "expired")
	f("", "other")
	f("OK", "other")
	f("upstream_3xx", "other")
}

func TestOutcome_Retryable(t *testing.T) {
	t.Parallel()
	f := func(in batch.Outcome, want bool) {
		t.Helper()
		if got := in.Retryable(); got != want {
			t.Errorf("Outcome(%q).Retryable() = %v, want %v", in, got, want)
		}
	}
	f(batch.OutcomeOK, false)
	f(batch.OutcomeBlocked, false)
	f(batch.OutcomeUpstream4xx, false)
	f(batch.OutcomeUnsupported, false)
	f(batch.OutcomeTooLong, false)
	f(batch.OutcomeTimeout, true)
	f(batch.OutcomeBusy, true)
	f(batch.OutcomeExpired, true)
	f(batch.OutcomeUpstream5xx, true)
	f(batch.OutcomeCancel, true)
	f(batch.OutcomeOther, true)
	f("upstream_3xx", true) // unknown: judged as other
}

// Every family of a runner's set has a # HELP text in MetricsHelp, under
// its full name, and MetricsHelp names no family the set lacks.
func TestRunner_MetricsHelp(t *testing.T) {
	t.Parallel()
	r := batchtest.NewRunner(t, batch.Config{MetricsPrefix: "sift_batch"})
	help := r.MetricsHelp()
	var buf bytes.Buffer
	r.Metrics().WritePrometheus(&buf)
	families := map[string]bool{}
	for line := range strings.Lines(buf.String()) {
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(strings.Fields(line)[0], "{")
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && help[base] != "" {
				name = base
			}
		}
		families[name] = true
		if help[name] == "" {
			t.Errorf("family %s has no help text", name)
		}
	}
	for name := range help {
		if !families[name] {
			t.Errorf("MetricsHelp names %s, which the set does not have", name)
		}
	}
}
