package main

import (
	"os/exec"
	"strings"
	"testing"
)

func TestAbCompareFigure(t *testing.T) {
	t.Parallel()
	f := func(name string, c abCompare, want bool) {
		t.Helper()
		if _, got := c.figure(); got != want {
			t.Errorf("%s: figure() = %v, want %v (worse %v, noise %v)", name, got, want, c.worse(), c.noise)
		}
	}
	// Lower is better: a write that takes 10 % longer in both passes.
	f("worse in both passes", abCompare{on: []float64{1, 1}, off: []float64{1.1, 1.1}, lower: true}, true)
	f("worse in one pass only", abCompare{on: []float64{1, 1}, off: []float64{1.2, 1.01}, lower: true}, false)
	f("better", abCompare{on: []float64{1, 1}, off: []float64{0.8, 0.9}, lower: true}, false)
	f("within the noise", abCompare{on: []float64{1, 1}, off: []float64{1.1, 1.1}, lower: true, noise: 0.2}, false)
	// Higher is better: a utilization 10 % lower in both passes.
	f("utilization lower", abCompare{on: []float64{0.99, 0.98}, off: []float64{0.9, 0.89}}, true)
	f("utilization higher", abCompare{on: []float64{0.9, 0.89}, off: []float64{0.99, 0.98}}, false)
	f("not measured", abCompare{on: nil, off: []float64{1}, lower: true}, false)
}

// A store whose runs agree judges a mechanism by its own noise, not by
// another store's.
func TestAbNoiseIsPerStore(t *testing.T) {
	t.Parallel()
	a := &ablationReport{Drain: map[abDrainKey][]float64{
		{sqliteFull, 1, ""}:          {1.00, 1.01, 1.00},
		{sqliteFull, 1, "group"}:     {0.85, 0.86, 0.84},
		{postgres4, 4, ""}:           {0.40, 0.60, 0.50},
		{postgres4, 4, "group"}:      {0.38, 0.57, 0.47},
		{sqliteNormal, 1, ""}:        {1.00, 1.30, 1.10},
		{sqliteNormal, 1, "unknown"}: {0.90, 1.10, 1.00},
	}}
	if c := a.compareDrain(abDrainKey{sqliteFull, 1, "group"}); c.noise > 0.011 {
		t.Errorf("SQLite FULL's noise = %v, want its own runs' 1 %%", c.noise)
	} else if _, ok := c.figure(); !ok {
		t.Errorf("SQLite FULL 15 %% worse in every pass, noise %v: no figure", c.noise)
	}
	if _, ok := a.compareDrain(abDrainKey{postgres4, 4, "group"}).figure(); ok {
		t.Errorf("PostgreSQL 5 %% worse within its 50 %% noise: a figure")
	}
	if _, ok := a.compareDrain(abDrainKey{sqliteNormal, 1, "unknown"}).figure(); ok {
		t.Errorf("SQLite NORMAL 10 %% worse within its 30 %% noise: a figure")
	}
}

func TestSpliceAblation(t *testing.T) {
	t.Parallel()
	section := abBegin + "\n## What each mechanism buys\n\nnew\n" + abEnd
	fresh := "# Benchmarks\n\n## Agent day\n\nx\n\n## Machine\n\ny\n"
	splice := func(text, section string) string {
		t.Helper()
		got, err := spliceAblation(text, section)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	got := splice(fresh, section)
	if want := "# Benchmarks\n\n## Agent day\n\nx\n\n" + section + "\n\n## Machine\n\ny\n"; got != want {
		t.Fatalf("into a report without it:\n%s\nwant:\n%s", got, want)
	}
	if c, err := carriedAblation(got); c != section || err != nil {
		t.Fatalf("carriedAblation = %q, %v, want the section", c, err)
	}
	again := splice(got, strings.Replace(section, "new", "newer", 1))
	if strings.Contains(again, "\nnew\n") || !strings.Contains(again, "\nnewer\n") || strings.Count(again, abBegin) != 1 {
		t.Fatalf("replacing the section:\n%s", again)
	}
	if c, err := carriedAblation("no section here"); c != "" || err != nil {
		t.Fatalf("carriedAblation of a report without it = %q, %v", c, err)
	}
	// Damaged markers: the report is neither spliced into nor dropped.
	for _, bad := range []string{
		fresh + abBegin + "\nno end\n",
		fresh + abEnd + "\nno begin\n",
		fresh + abEnd + "\n" + abBegin + "\n",
		got + "\n" + section + "\n",
	} {
		if _, err := carriedAblation(bad); err == nil {
			t.Errorf("carriedAblation(%q): no error", bad)
		}
		if _, err := spliceAblation(bad, section); err == nil {
			t.Errorf("spliceAblation(%q): no error", bad)
		}
	}
}

// Every deletion names a commit of this repository that removed non-test
// Go.
func TestAbDeletedCommits(t *testing.T) {
	t.Parallel()
	if err := exec.Command("git", "rev-parse", "--git-dir").Run(); err != nil {
		t.Skip("not in a git checkout")
	}
	for _, d := range abDeleted {
		added, removed, err := goLines(d.Commit)
		if err != nil {
			t.Errorf("%s: %v", d.Name, err)
			continue
		}
		if removed <= added {
			t.Errorf("%s: commit %s removed %d lines of non-test Go and added %d", d.Name, d.Commit, removed, added)
		}
		for _, m := range abMechanisms {
			if m.Name == d.Name {
				t.Errorf("%s is deleted and still measured", d.Name)
			}
		}
	}
}
