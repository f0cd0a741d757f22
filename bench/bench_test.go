package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestSpreadOf(t *testing.T) {
	t.Parallel()
	f := func(in []float64, want spread) {
		t.Helper()
		got := spreadOf(in)
		if got != want {
			t.Errorf("spreadOf(%v) = %+v, want %+v", in, got, want)
		}
	}
	f([]float64{3, 1, 2}, spread{Median: 2, Min: 1, Max: 3, N: 3})
	f([]float64{4, 1, 2, 3}, spread{Median: 2.5, Min: 1, Max: 4, N: 4})
	f([]float64{7}, spread{Median: 7, Min: 7, Max: 7, N: 1})
	if s := spreadOf(nil); s.N != 0 || !math.IsNaN(s.Median) {
		t.Errorf("spreadOf(nil) = %+v", s)
	}
}

func TestRatios(t *testing.T) {
	t.Parallel()
	nan := math.NaN()
	got := ratios([]float64{10, 20, nan, 30}, []float64{5, 0, 1, 10, 99})
	want := []float64{2, 3} // the zero and the NaN pairs are left out; the longer slice is cut
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("ratios = %v, want %v", got, want)
	}
}

func TestQuantile(t *testing.T) {
	t.Parallel()
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i))
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50}, {0.99, 99}, {1, 100}, {0, 1}} {
		if got := quantile(d, c.q); got != c.want {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if quantile(nil, 0.5) != 0 {
		t.Error("quantile of nothing is not 0")
	}
}

func TestFormats(t *testing.T) {
	t.Parallel()
	f := func(got, want string) {
		t.Helper()
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	f(fmtRate(1234567.4), "1,234,567")
	f(fmtRate(999), "999")
	f(fmtRate(math.NaN()), "–")
	f(fmtRatio(0.8449), "0.84×")
	f(fmtSpread(spread{Median: 2, Min: 1, Max: 3, N: 3}, fmtRatio), "2.00× (1.00×–3.00×)")
	f(fmtSpread(spread{Median: 2, Min: 2, Max: 2, N: 1}, fmtRatio), "2.00×")
	f(fmtSpread(spread{}, fmtRatio), "–")
	f(fmtDur(85*time.Microsecond), "85 µs")
	f(fmtDur(1200*time.Microsecond), "1.2 ms")
	f(fmtDur(42*time.Millisecond), "42 ms")
	f(fmtDur(3400*time.Millisecond), "3.4 s")
	f(fmtBytes(812), "812 B")
	f(fmtBytes(14.5*1024), "14.5 KiB")
	f(fmtBytes(3<<20), "3.0 MiB")
	f(plural(1, "round"), "1 round")
	f(plural(5, "round"), "5 rounds")
}

func TestCheckLoopback(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"http://127.0.0.1:8080", "http://127.3.4.5:1", "http://[::1]:80"} {
		if err := checkLoopback(ok); err != nil {
			t.Errorf("checkLoopback(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"http://10.0.0.1:80", "http://example.com", "http://localhost:80", "http://192.168.1.1"} {
		if err := checkLoopback(bad); err == nil {
			t.Errorf("checkLoopback(%q) accepted it", bad)
		}
	}
}

func TestParseMemTotal(t *testing.T) {
	t.Parallel()
	if got := parseMemTotal("MemFree: 10 kB\nMemTotal:       24636372 kB\n"); got != 24636372<<10 {
		t.Errorf("parseMemTotal = %d", got)
	}
	if got := parseMemTotal("nothing"); got != 0 {
		t.Errorf("parseMemTotal = %d", got)
	}
}

func TestPageText(t *testing.T) {
	t.Parallel()
	e, err := newDrainEnv(drainWork{Jobs: 1, Items: 1, ResultBytes: 10 << 10}, t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(e.envelope) != 10<<10 {
		t.Errorf("envelope is %d bytes, want %d", len(e.envelope), 10<<10)
	}
}

// TestReport renders a report of made-up figures: every section and goal
// shows, and a missed goal says so with its figure.
func TestReport(t *testing.T) {
	t.Parallel()
	work := drainWork{Jobs: 2, Items: 2, ResultBytes: 1024}
	cs := []*contender{
		batchkitSQLite("NORMAL", sqliteNormal), rawSQLite("NORMAL", sqliteNormal),
		riverSQLite("NORMAL", sqliteNormal, modelChain, riverREADME, false),
		riverSQLite("NORMAL", sqliteNormal, modelLoop, riverSweep[0], true),
		goqiteSQLite("NORMAL", sqliteNormal, modelChain, goqiteSweep[0], true),
		batchkitPG(postgres, 2), rawPG(postgres, 2), riverPG(modelLoop, riverPGSweep[0], true),
	}
	rates := map[string][]float64{
		cs[0].Key: {900, 1000}, cs[1].Key: {1000, 1000}, cs[2].Key: {10, math.NaN()}, cs[3].Key: {800, 700},
		cs[4].Key: {300, 400}, cs[5].Key: {500, 500}, cs[6].Key: {600, 600}, cs[7].Key: {550, 600},
	}
	lat := map[string]map[int][]time.Duration{}
	for _, op := range growthOps {
		lat[op] = map[int][]time.Duration{10: {time.Millisecond}, 1000: {3 * time.Millisecond}}
	}
	r := &report{
		Machine: machine{CPU: "test CPU", Cores: 2, Date: time.Unix(0, 0).UTC(), SQLite: "3.54.1", PostgreSQL: "15"},
		Drain: &drainReport{drainResult: &drainResult{Work: work, Rounds: 2, Contenders: cs, Rates: rates},
			Sweeps: []sweepResult{{Name: "River", Settings: []string{"a", "b"}, Rates: []float64{1, 2}, Best: 1}}},
		HTTP: &httpReport{Agents: []int{1}, Phase: time.Second, MaxReqs: 10, Results: map[string]map[int]loadResult{
			"status": {1: {Requests: 10, Elapsed: time.Second, Latencies: []time.Duration{time.Millisecond}}},
			"result": {1: {Requests: 10, Elapsed: time.Second}}, "submit": {1: {Requests: 10, Elapsed: time.Second}},
		}},
		Memory: &memoryReport{Live: liveMemory{Jobs: 10, Targets: 32, HeapLive: 1000, RSSLive: 10 * 40_000},
			Peak: peakMemory{Jobs: 8, Targets: 32, ResultBytes: 256 << 10, HeapPeak: 4 << 20}},
		Growth:   &growthReport{Sizes: []int{10, 1000}, Stores: []growthStoreResult{{Name: "SQLite", Lat: lat, Seeded: map[int]time.Duration{}}}},
		AgentDay: agentDayOf(t),
	}
	text := r.markdown()
	for _, want := range []string{
		"## Machine", "## Drain throughput against peers", "### SQLite, synchronous=NORMAL", "### PostgreSQL",
		"### Tuning sweeps", "**b** | **2**", "## Submit, status and one-result latency over HTTP", "## Memory",
		"## Growth", "## Goals", "## Closing note", "0.95× (0.90×–1.00×)", // batchkit ÷ raw, per round
		"per-operation cost at 1,000 stored jobs ≤ 2× at 10 | SQLite submit 3.00×", "| **missed** |",
		"RSS 39.1 KiB per live job", "test CPU",
		"## Agent day", "### Agent day, median 200 ms", "### Agent day, median 20 ms", "| **fetch-slot utilization** | **0.995** | **0.980** |",
		"| ÷ the in-memory store's | – | 0.985× |", "Agent day: fetch-slot utilization ≥ 0.99 of the physical limit, at a median of 200 ms",
		"missed by SQLite FULL 0.980 (96 drains for 64 slots:", "Agent day: submit p99 ≤ 10 ms, at a median of 20 ms | in-memory 12 ms",
		"twin at 4 workers, ≥ 0.9× at 2 | 2 workers 0.83× (0.83×–0.83×) | retired | The twin does less per item",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(text, "NaN") {
		t.Error("report shows NaN")
	}
}

// agentDayOf is a made-up agent day: the in-memory store and SQLite FULL
// at both scales.
func agentDayOf(t *testing.T) *agentDayReport {
	t.Helper()
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	a := &agentDayReport{Sizes: adSizes{Scales: []adScale{{2.0 / 3}, {1.0 / 15}}, Window: time.Minute, Agents: 50, JobsEach: 3, Probes: 2, Pace: 20 * time.Millisecond}, Cores: 2}
	for _, sc := range a.Sizes.Scales {
		for _, c := range []adCase{adCases[0], adCases[2]} {
			util := 0.995
			if c.Ref != "" {
				util = 0.98
			}
			a.Runs = append(a.Runs, &adRun{
				Case: c, Scale: sc, Slots: adSlots, Drains: adSlots * adDrainsPct / 100, Submit: ms(1, 1, 12), Status: ms(1), Result: ms(1, 2),
				WakeSame: ms(3), Busy: busyFigures{Window: time.Minute, Busy: time.Duration(util * 64 * float64(time.Minute)), Ended: 6000, LatSum: 6000 * 300 * time.Millisecond, Peak: 64},
				Node: nodeResult{Window: time.Minute, CPU: 6 * time.Second, Targets: 6000, RSSIdle: 10 << 20, RSSMean: 20 << 20, LiveMean: 150,
					Slots: slotTimes{Fetch: time.Duration(0.99 * 64 * float64(time.Minute))}, Readable: durSummary{N: 1, P99: 3 * time.Millisecond}},
				Cost: adCost{Fsyncs: 3000, WALSyncs: -1},
			})
		}
	}
	return a
}
