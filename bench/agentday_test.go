package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/internal/ablation"
)

func TestLognormal(t *testing.T) {
	t.Parallel()
	l := lognormalOf(300*time.Millisecond, 3*time.Second)
	if got := l.quantile(0); got != 300*time.Millisecond {
		t.Errorf("median = %s, want 300ms", got)
	}
	if got := l.quantile(z99); math.Abs(float64(got-3*time.Second)) > float64(time.Millisecond) {
		t.Errorf("p99 = %s, want 3s", got)
	}
	r := rand.New(rand.NewPCG(1, 2))
	const n = 200_000
	s := make([]time.Duration, n)
	var sum time.Duration
	for i := range s {
		s[i] = l.sample(r)
		sum += s[i]
	}
	slices.Sort(s)
	near := func(name string, got, want time.Duration, tol float64) {
		t.Helper()
		if math.Abs(float64(got)/float64(want)-1) > tol {
			t.Errorf("sampled %s = %s, want %s ± %.0f %%", name, got, want, 100*tol)
		}
	}
	near("p50", quantile(s, 0.5), 300*time.Millisecond, 0.02)
	near("p99", quantile(s, 0.99), 3*time.Second, 0.05)
	near("mean", sum/n, l.mean(), 0.03)
}

func TestUpstreamModel_Draw(t *testing.T) {
	t.Parallel()
	m := upstreamModel{Latency: lognormalOf(time.Millisecond, 10*time.Millisecond), Hang: time.Hour,
		TimeoutShare: 0.01, Share4xx: 0.03, Share5xx: 0.02}
	r := rand.New(rand.NewPCG(3, 4))
	const n = 100_000
	count := map[int]int{}
	for range n {
		a := m.draw(r)
		count[a.status]++
		if a.status == 0 && a.after != time.Hour {
			t.Fatalf("a timeout answers after %s, want the hang", a.after)
		}
	}
	for status, want := range map[int]float64{0: 0.01, 404: 0.03, 500: 0.02, 200: 0.94} {
		if got := float64(count[status]) / n; math.Abs(got-want) > 0.005 {
			t.Errorf("share of %d = %.4f, want %.2f", status, got, want)
		}
	}
}

func TestBusyMeter(t *testing.T) {
	t.Parallel()
	at := func(ms int) time.Time { return time.Unix(1000, 0).Add(time.Duration(ms) * time.Millisecond) }
	b := newBusyMeter()
	before := b.begin(at(0))       // straddles the start: counts 100..300
	b.end(b.begin(at(10)), at(50)) // ends before the window: not counted
	b.open(at(100))
	inside := b.begin(at(150))
	b.end(inside, at(250)) // 100 ms, whole
	b.end(before, at(300)) // 200 ms inside, 300 ms in all
	after := b.begin(at(900))
	f := b.close(at(1000)) // after counts 900..1000
	b.end(after, at(1200)) // too late: not counted again
	want := busyFigures{Window: 900 * time.Millisecond, Busy: 400 * time.Millisecond, Ended: 2, LatSum: 400 * time.Millisecond, Peak: 2}
	if f != want {
		t.Errorf("figures = %+v, want %+v", f, want)
	}
	if got := f.utilization(2); math.Abs(got-400.0/1800) > 1e-9 {
		t.Errorf("utilization = %v", got)
	}
	if got := f.meanLatency(); got != 200*time.Millisecond {
		t.Errorf("mean latency = %s", got)
	}
	if !math.IsNaN((busyFigures{}).utilization(64)) {
		t.Error("utilization of no window is a number")
	}
}

func TestHostIndex(t *testing.T) {
	t.Parallel()
	for _, i := range []int{0, 7, 127, 1000} {
		if got := hostIndex(hostName(i)); got != i {
			t.Errorf("hostIndex(hostName(%d)) = %d", i, got)
		}
	}
	for _, bad := range []string{"", "h.agentday.test", "hx.agentday.test", "h001.example.com", "x001.agentday.test", "h-1.agentday.test"} {
		if got := hostIndex(bad); got != -1 {
			t.Errorf("hostIndex(%q) = %d, want -1", bad, got)
		}
	}
}

func TestWorkersOf(t *testing.T) {
	t.Parallel()
	f := func(n int, want []int) {
		t.Helper()
		if got := workersOf(64, n); !slices.Equal(got, want) {
			t.Errorf("workersOf(%d) = %v, want %v", n, got, want)
		}
	}
	f(1, []int{64})
	f(3, []int{22, 21, 21})
}

func TestParsePerfCounts(t *testing.T) {
	t.Parallel()
	out := "# started on Mon\n\n12,,syscalls:sys_enter_fsync,1000,100.00,,\n30,,syscalls:sys_enter_fdatasync,1000,100.00,,\n"
	if n, err := parsePerfCounts(out); err != nil || n != 42 {
		t.Errorf("parsePerfCounts = %d, %v; want 42", n, err)
	}
	for _, bad := range []string{"", "12,,syscalls:sys_enter_fsync,1000,100.00,,\n",
		"<not supported>,,syscalls:sys_enter_fsync,,,,\n3,,syscalls:sys_enter_fdatasync,,,,\n"} {
		if _, err := parsePerfCounts(bad); err == nil {
			t.Errorf("parsePerfCounts(%q) accepted it", bad)
		}
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(101-i)*time.Millisecond)
	}
	s := summarize(d)
	want := durSummary{N: 100, P50: 50 * time.Millisecond, P90: 90 * time.Millisecond, P99: 99 * time.Millisecond,
		Max: 100 * time.Millisecond, Mean: 50500 * time.Microsecond, Over20ms: 80, Over100ms: 0}
	if s != want {
		t.Errorf("summarize = %+v, want %+v", s, want)
	}
	if (summarize(nil) != durSummary{}) {
		t.Error("summarize(nil) is not empty")
	}
}

// TestAdRun_Collect: a long-poll's wake counts when its job ended inside
// the window and the poll was asked before that, on the node that ended
// it or on another.
func TestAdRun_Collect(t *testing.T) {
	t.Parallel()
	ms := func(v int) int64 { return int64(v) * int64(time.Millisecond) }
	rec := newClientRecorder()
	rec.w0.Store(ms(1000))
	rec.polls = []pollRecord{
		{Job: "a", Node: 0, Sent: ms(900), Recv: ms(1105)},  // same node, 5 ms
		{Job: "a", Node: 1, Sent: ms(900), Recv: ms(1150)},  // across, 50 ms
		{Job: "b", Node: 0, Sent: ms(500), Recv: ms(960)},   // ended before the window
		{Job: "c", Node: 0, Sent: ms(1300), Recv: ms(1301)}, // asked after its end
		{Job: "d", Node: 2, Sent: ms(1000), Recv: ms(1500)}, // unknown job
		{Job: "e", Node: 0, Sent: ms(1000), Recv: ms(2100)}, // ended after the window
	}
	r := &adRun{Node: nodeResult{JobEnds: map[string]jobEnd{
		"a": {Node: 0, At: ms(1100)}, "b": {Node: 0, At: ms(950)}, "c": {Node: 0, At: ms(1200)}, "e": {Node: 0, At: ms(2050)},
	}}}
	r.collect(rec, time.Unix(0, ms(2000)))
	if !slices.Equal(r.WakeSame, []time.Duration{5 * time.Millisecond}) || !slices.Equal(r.WakeOther, []time.Duration{50 * time.Millisecond}) {
		t.Errorf("wakes = %v same, %v across", r.WakeSame, r.WakeOther)
	}
	if r.Node.JobEnds != nil {
		t.Error("the job ends are kept")
	}
}

func TestClientRecorder_Inside(t *testing.T) {
	t.Parallel()
	c := newClientRecorder()
	t0 := time.Unix(100, 0)
	if c.inside(t0) {
		t.Error("inside before the window opened")
	}
	c.w0.Store(t0.UnixNano())
	if !c.inside(t0) || !c.inside(t0.Add(time.Hour)) || c.inside(t0.Add(-1)) {
		t.Error("open window")
	}
	c.w1.Store(t0.Add(time.Second).UnixNano())
	if c.inside(t0.Add(time.Second)) || !c.inside(t0.Add(time.Second-1)) {
		t.Error("closed window")
	}
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	var r registry
	if _, ok := r.pickLive(); ok {
		t.Error("picked from an empty registry")
	}
	if _, ok := r.pickFinished(); ok {
		t.Error("picked a finished job from an empty registry")
	}
	jobs := make([]regJob, 1000)
	for i := range jobs {
		jobs[i] = regJob{ID: fmt.Sprint("job-", i)}
		r.added(jobs[i])
	}
	for i, j := range jobs {
		if i != 500 {
			r.done(j)
		}
	}
	for range 10 {
		if j, ok := r.pickLive(); !ok || j.ID != "job-500" {
			t.Fatalf("pickLive = %v, %v; want job-500", j, ok)
		}
	}
	if len(r.finished) != finishedRing || len(r.live) != 1 || len(r.at) != 1 {
		t.Errorf("%d finished kept, %d live, %d indexed", len(r.finished), len(r.live), len(r.at))
	}
	if j, ok := r.pickFinished(); !ok || j.ID == "job-500" {
		t.Errorf("pickFinished = %v, %v", j, ok)
	}
}

// TestAgentDay runs the phase's cases on the in-memory store, with the
// nodes in this process, at a tiny scale: every figure is there.
func TestAgentDay(t *testing.T) {
	t.Parallel()
	sz := adSizes{Window: time.Second, Warmup: 500 * time.Millisecond, Agents: 4, JobsEach: 2, Probes: 1, Pace: 5 * time.Millisecond}
	sc := adScale{Factor: 0.01}
	for _, c := range []adCase{adCases[0], adCases[4]} {
		t.Run(c.Key, func(t *testing.T) {
			t.Parallel()
			r, err := runAgentDay(t.Context(), sz, sc, c, raisedCaps(sz), ablation.Off{}, t.TempDir(), "", true, startNodesHere)
			if err != nil {
				t.Fatal(err)
			}
			if r.Busy.Ended == 0 || r.Node.Targets == 0 || r.Node.Readable.N == 0 || r.Node.Write.N == 0 {
				t.Errorf("upstream answers %d, targets stored %d, readable samples %d, writes %d", r.Busy.Ended, r.Node.Targets,
					r.Node.Readable.N, r.Node.Write.N)
			}
			if u := r.util(); !(u > 0 && u <= 1.01) || r.Busy.Peak > r.Slots {
				t.Errorf("utilization %v, peak %d", u, r.Busy.Peak)
			}
			if len(r.Submit) == 0 || len(r.Result) == 0 || len(r.Status) == 0 || len(r.WakeSame) == 0 {
				t.Errorf("%d submits, %d results, %d status reads, %d same-node wakes", len(r.Submit), len(r.Result), len(r.Status), len(r.WakeSame))
			}
			if c.Nodes > 1 && len(r.WakeOther) == 0 {
				t.Error("no wake across nodes")
			}
			if used := r.drainShare(r.Node.Slots.total()); used > 101 || used < 1 {
				t.Errorf("the drains' time adds up to %.1f %% of the window", used) // counted twice, or not at all
			}
			if r.Node.LiveMean <= 0 || r.Node.CPU <= 0 || r.Node.RSSMean <= 0 {
				t.Errorf("live %v, CPU %s, RSS %d", r.Node.LiveMean, r.Node.CPU, r.Node.RSSMean)
			}
		})
	}
}

func TestFetchState_End(t *testing.T) {
	t.Parallel()
	f := func(returned, ended, want int64) {
		t.Helper()
		var s fetchState
		s.returned.Store(returned)
		s.ended.Store(ended)
		if got := s.end(); got != want {
			t.Errorf("end(returned %d, ended %d) = %d, want %d", returned, ended, got, want)
		}
	}
	f(0, 0, 0)
	f(5, 0, 5) // returned, the step not ended yet
	f(5, 7, 5) // returned, then the step ended
	f(0, 7, 7) // abandoned at its deadline
	f(9, 7, 7) // returned after it was abandoned
}
