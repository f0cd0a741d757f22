package main

import (
	"strings"
	"testing"
	"time"
)

// TestNodesReportWide checks that the many-nodes section shows the one
// runner over the most runners' connections, and that a missed goal says
// how much of the growth that contender accounts for.
func TestNodesReportWide(t *testing.T) {
	t.Parallel()
	run := func(cpuUS int) nodesRun {
		r := nodesRun{Runners: 1, Offered: 3000, Finished: 3000}
		r.CPU, r.Targets = time.Duration(cpuUS)*time.Microsecond*1000, 1000
		return r
	}
	w := nodesWork{Runners: []int{1, 32}, Slots: 32, Rate: 300, Median: 20 * time.Millisecond, Sigma: 0.8, Hosts: 256,
		Warm: time.Second, Window: 10 * time.Second, Rounds: 2}
	if got := w.wideConns(); got != 64 {
		t.Fatalf("wideConns = %d, want 64 (32 pools of 2)", got)
	}
	p := &nodesReport{Work: w, Runs: map[int][]nodesRun{1: {run(1000), run(1000)}, 32: {run(1900), run(1900)}},
		Wide: []nodesRun{run(1600), run(1600)}}
	r := &report{Nodes: p}
	var b md
	r.nodesSection(&b)
	text := b.String()
	for _, want := range []string{"| per target | 1 runner × 32 workers | 32 runners × 1 worker | 1 runner × 32 workers, 64 connections |",
		"| server CPU per target | 1000 µs (1000 µs–1000 µs) | 1900 µs (1900 µs–1900 µs) | 1600 µs (1600 µs–1600 µs) |"} {
		if !strings.Contains(text, want) {
			t.Errorf("section lacks %q:\n%s", want, text)
		}
	}
	g := r.nodesGoal()
	if g.State != "missed" || g.Figure != "1.90× (1.90×–1.90×)" {
		t.Errorf("goal = %q %q, want missed at 1.90×", g.State, g.Figure)
	}
	for _, want := range []string{"cost 1.60× as much spread over 64 connections", "the 32 runners cost 1.19× of that"} {
		if !strings.Contains(g.Why, want) {
			t.Errorf("goal's reason lacks %q: %s", want, g.Why)
		}
	}
}
