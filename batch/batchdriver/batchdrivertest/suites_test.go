package batchdrivertest

import (
	"flag"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
)

// mustPanic runs register and fails unless it panics with a message that
// contains want.
func mustPanic(t *testing.T, what, want string, register func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		msg, _ := r.(string)
		if r == nil || !strings.Contains(msg, want) {
			t.Errorf("%s: panic %v, want one with %q", what, r, want)
		}
	}()
	register()
}

func noop(*testing.T) {}

func TestSuite_RefusesDuplicate(t *testing.T) {
	t.Parallel()
	one := map[string]func(*testing.T){"A": noop}
	mustPanic(t, "a name twice in a group", "two cases named G/A", func() {
		newSuite[func(*testing.T)]().add("G", one).add("G", one)
	})
	mustPanic(t, "an alone case over a parallel one", "two cases named G/A", func() {
		newSuite[func(*testing.T)]().add("G", one).addAlone("G", "A", noop)
	})
	mustPanic(t, "a parallel case over an alone one", "two cases named G/A", func() {
		newSuite[func(*testing.T)]().addAlone("G", "A", noop).add("G", one)
	})
	// The same case name in another group is another case.
	s := newSuite[func(*testing.T)]().add("G", one).add("H", one).add("G", map[string]func(*testing.T){"B": noop})
	if got, want := s.names(), []string{"G/A", "G/B", "H/A"}; !slices.Equal(got, want) {
		t.Errorf("names = %v, want %v", got, want)
	}
}

func TestSuite_RefusesBadNames(t *testing.T) {
	t.Parallel()
	f := func(group, name string) {
		t.Helper()
		mustPanic(t, group+"/"+name, "one CamelCase word", func() {
			newSuite[func(*testing.T)]().add(group, map[string]func(*testing.T){name: noop})
		})
	}
	f("", "A")
	f("G", "")
	f("drain", "A")
	f("G", "finishFenced")
	f("Drain/Finish", "A")
	f("G", "Finish/Fenced")
	f("G", "Finish Fenced")
	f("G", "Finish-Fenced")
	f("G", "Fénced")
}

// TestSuites_Names pins the groups of each suite and that every case has a
// two-level name; the counts catch a case lost from its group's map.
func TestSuites_Names(t *testing.T) {
	t.Parallel()
	f := func(what string, names []string, wantGroups []string, wantCases int, wantNames ...string) {
		t.Helper()
		groups := map[string]bool{}
		for _, n := range names {
			parts := strings.Split(n, "/")
			if len(parts) != 2 || !camelWord(parts[0]) || !camelWord(parts[1]) {
				t.Errorf("%s: case %q is not <Group>/<Case>", what, n)
				continue
			}
			groups[parts[0]] = true
		}
		if got := slices.Sorted(maps.Keys(groups)); !slices.Equal(got, wantGroups) {
			t.Errorf("%s: groups %v, want %v", what, got, wantGroups)
		}
		if len(names) != wantCases {
			t.Errorf("%s: %d cases, want %d", what, len(names), wantCases)
		}
		for _, n := range wantNames {
			if !slices.Contains(names, n) {
				t.Errorf("%s: no case %s", what, n)
			}
		}
	}
	f("TestStore", storeSuite.names(),
		[]string{"Cancel", "Clock", "Deadline", "Drain", "HostGate", "Inspect", "Labels", "Liveness", "Reads", "Retention", "Share", "Submit", "Webhook", "WebhookFair", "WebhookTargets"}, 104,
		"Clock/NilNowIsTheStoreClock", "Drain/FinishTargetFenced", "Share/EvictShareLargestFirst", "WebhookFair/WebhookClaimRoundRobin", "Inspect/JobAnyCaller", "Labels/LabelSearchOwnJobs",
		"Submit/SkippedFinishedAtCreate", "WebhookTargets/TargetEventsInIdxOrder")
	f("TestRunner", runnerSuite.names(),
		[]string{"Deadline", "Drain", "Host", "Liveness", "Outage", "Retry", "Submit", "Webhook", "WebhookFair", "WebhookTargets"}, 79,
		"Liveness/ClusterStaleReapedOnHeartbeat", "Drain/CloseMidDrainLeaksNothing", "WebhookFair/WebhookSlowReceiver",
		"WebhookTargets/TargetEventsDelivered")
	f("TestStoreReopen", reopenSuite.names(), []string{"Webhook"}, 2, "Webhook/WebhookSurvivesReopen", "Webhook/TargetEventsSurviveReopen")
	if c := runnerSuite.cases["Drain"]["CloseMidDrainLeaksNothing"]; !c.alone {
		t.Error("TestRunner: Drain/CloseMidDrainLeaksNothing counts the process's goroutines but is not registered alone")
	}
}

// TestSuite_Run checks the subtest names a suite runs under, and that an
// alone case runs before any other starts.
func TestSuite_Run(t *testing.T) {
	t.Parallel()
	var (
		mu  sync.Mutex
		ran []string
	)
	record := func(t *testing.T) {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, strings.TrimPrefix(t.Name(), "TestSuite_Run/Suite/"))
	}
	cases := map[string]func(*testing.T){"A": record, "B": record}
	s := newSuite[func(*testing.T)]().
		add("G", cases).
		addAlone("G", "Z", record).
		add("H", cases).
		addAlone("Only", "Alone", record)
	t.Run("Suite", func(t *testing.T) {
		s.run(t, func(t *testing.T, c func(*testing.T)) { c(t) })
	})
	if f := flag.Lookup("test.run"); f != nil && strings.Contains(f.Value.String(), "/") {
		t.Skipf("-run %q selects subtests: the suite's own cases may not all run", f.Value)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ran) < 2 || !slices.Equal(slices.Sorted(slices.Values(ran[:2])), []string{"G/Z", "Only/Alone"}) {
		t.Errorf("ran %v; want the alone cases G/Z and Only/Alone first", ran)
	}
	if got, want := slices.Sorted(slices.Values(ran)), []string{"G/A", "G/B", "G/Z", "H/A", "H/B", "Only/Alone"}; !slices.Equal(got, want) {
		t.Errorf("ran %v, want %v", got, want)
	}
}
