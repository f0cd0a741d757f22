package batchdrivertest

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// The conformance suites' entry points and their one registry. Every case
// is named <Group>/<Case>, its group the file it is in (suite_drain.go
// holds the Drain store cases, runner_liveness.go the Liveness runner
// cases), so that one case runs alone:
//
//	go test -run 'TestStore/Drain/FinishTargetFenced' ./batchstore/
//
// The registries are built when the package is initialized; a registration
// that repeats a name in its group, or a name that is not one CamelCase
// word, panics then: it is a bug of this package, not of the store under
// test.

// TestStore is the conformance suite of [batch.Store]: every implementation
// must pass it. newStore returns a new, empty store for one subtest (and
// registers its cleanup with t). The groups are Submit (create, reuse,
// caps, targets skipped at create), Drain (claim, one write per target,
// the fence), Cancel, Reads, Labels (metadata and custom ids kept, read
// back, searched), Retention (sweep, evict, stats), Share (eviction shared per caller),
// Liveness (heartbeats, reaping), Webhook (the outbox), WebhookFair
// (claims fair between callers, the pending cap), WebhookTargets (a
// job's per-target events, in order, coalesced), Clock (calls without
// a Now, on the store's own clock; every other case gives each call the
// Now of a fake clock), Inspect (the operator's reads of
// [batch.Inspector], skipped by a store without it) and HostGate (the
// per-host limits of [batchdriver.HostGate], skipped likewise). Cases
// that only a Shared store must pass (see [batch.Capabilities]) are skipped for the others.
func TestStore(t *testing.T, newStore func(t *testing.T) batchdriver.Store) {
	t.Helper()
	storeSuite.run(t, func(t *testing.T, c storeCase) { c(t, newStore(t)) })
}

// TestRunner runs the runner's behaviour tests against a store: the same
// tests pass whatever [batch.Store] drains the jobs. newStore returns a new,
// empty store for one subtest. The groups are Drain (one job's drain, its
// outcomes, cancel, caps, the lease, Close and restart), Submit (a lenient
// submit's skipped targets), Liveness (the cluster cases), Retry, Outage,
// Webhook, WebhookFair and WebhookTargets. Call it from a test that is not
// parallel: Drain/CloseMidDrainLeaksNothing counts the runner goroutines
// of the whole process, so it must run while no other test's runner is
// alive (it runs before the other cases start).
func TestRunner(t *testing.T, newStore func(t *testing.T) batchdriver.Store) {
	t.Helper()
	runnerSuite.run(t, func(t *testing.T, c storeCase) { c(t, newStore(t)) })
}

// TestStoreReopen checks what must survive a store's reopening: pending
// webhook events, with their claims (Webhook/WebhookSurvivesReopen), and
// a job's per-target events (Webhook/TargetEventsSurviveReopen).
// newStore returns a new, empty store and a function that closes it and
// opens it again on the same data (a store kept in memory returns itself).
func TestStoreReopen(t *testing.T, newStore func(t *testing.T) (s batchdriver.Store, reopen func() batchdriver.Store)) {
	t.Helper()
	reopenSuite.run(t, func(t *testing.T, c reopenCase) { c(t, newStore) })
}

// A storeCase runs on a new store; a reopenCase makes its own, to reopen
// it.
type (
	storeCase  = func(t *testing.T, s batchdriver.Store)
	reopenCase = func(t *testing.T, newStore func(t *testing.T) (s batchdriver.Store, reopen func() batchdriver.Store))
)

var storeSuite = newSuite[storeCase]().
	add("Submit", submitCases).
	add("Submit", skipCases).
	add("Drain", drainCases).
	add("Cancel", cancelCases).
	add("Deadline", deadlineCases).
	add("Reads", readCases).
	add("Labels", labelCases).
	add("Retention", retentionCases).
	add("Share", shareCases).
	add("Liveness", livenessCases).
	add("Liveness", handBackCases).
	add("Webhook", webhookCases).
	add("WebhookFair", webhookFairCases).
	add("WebhookTargets", webhookTargetCases).
	add("Clock", clockCases).
	add("Inspect", inspectCases).
	add("HostGate", hostGateCases)

var runnerSuite = newSuite[storeCase]().
	add("Drain", runnerDrainCases).
	add("Deadline", runnerDeadlineCases).
	add("Submit", runnerSkipCases).
	add("Host", runnerHostCases).
	// Not parallel: it counts the runner goroutines of the whole process.
	addAlone("Drain", "CloseMidDrainLeaksNothing", runnerCloseMidDrain).
	add("Liveness", runnerClusterCases).
	add("Liveness", runnerResumeCases).
	add("Retry", runnerRetryCases).
	add("Outage", runnerOutageCases).
	add("Webhook", runnerWebhookCases).
	add("WebhookFair", runnerWebhookFairCases).
	add("WebhookTargets", runnerWebhookTargetCases)

var reopenSuite = newSuite[reopenCase]().
	add("Webhook", map[string]reopenCase{
		"WebhookSurvivesReopen":     storeWebhookSurvivesReopen,
		"TargetEventsSurviveReopen": storeTargetEventsSurviveReopen,
	})

// A suite is a registry of cases by group and name.
type suite[C any] struct {
	cases map[string]map[string]suiteCase[C] // by group, then name
}

type suiteCase[C any] struct {
	run   C
	alone bool // runs before the others start, with no other case beside it
}

// camelWord reports whether s is one CamelCase word, the form of a group's
// and a case's name: one element of a test name, which -run can address.
// (A function, not a regexp variable: the registries are built while the
// package's variables are initialized, in an order that need not put a
// variable the methods read first.)
func camelWord(s string) bool {
	if s == "" || s[0] < 'A' || s[0] > 'Z' {
		return false
	}
	for _, r := range s {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9') {
			return false
		}
	}
	return true
}

func newSuite[C any]() *suite[C] {
	return &suite[C]{cases: map[string]map[string]suiteCase[C]{}}
}

// add registers cases in group; it panics on a name group already has.
func (s *suite[C]) add(group string, cases map[string]C) *suite[C] {
	for _, name := range slices.Sorted(maps.Keys(cases)) {
		s.register(group, name, suiteCase[C]{run: cases[name]})
	}
	return s
}

// addAlone registers a case that must run with no other case of the suite
// beside it; it panics on a name group already has.
func (s *suite[C]) addAlone(group, name string, run C) *suite[C] {
	s.register(group, name, suiteCase[C]{run: run, alone: true})
	return s
}

func (s *suite[C]) register(group, name string, c suiteCase[C]) {
	if !camelWord(group) || !camelWord(name) {
		panic(fmt.Sprintf("batchtest: case %q/%q: a group and a case are each one CamelCase word", group, name))
	}
	if _, dup := s.cases[group][name]; dup {
		panic("batchtest: two cases named " + group + "/" + name)
	}
	if s.cases[group] == nil {
		s.cases[group] = map[string]suiteCase[C]{}
	}
	s.cases[group][name] = c
}

// names lists the suite's cases as <Group>/<Case>, sorted.
func (s *suite[C]) names() []string {
	var out []string
	for group, cases := range s.cases {
		for name := range cases {
			out = append(out, group+"/"+name)
		}
	}
	slices.Sort(out)
	return out
}

// run runs every case as the subtest <Group>/<Case> of t, calling each
// through call. The groups and their cases run in parallel, in name order;
// the alone cases run first, one at a time, while the parallel groups wait
// for run to return. An alone case's subtest is named "<Group>/<Case>" in
// one step, beside the parallel group of that name: the testing package
// splits a name at its slashes, so -run addresses both the same way.
func (s *suite[C]) run(t *testing.T, call func(*testing.T, C)) {
	t.Helper()
	groups := slices.Sorted(maps.Keys(s.cases))
	for _, group := range groups {
		for _, name := range slices.Sorted(maps.Keys(s.cases[group])) {
			if c := s.cases[group][name]; c.alone {
				t.Run(group+"/"+name, func(t *testing.T) { call(t, c.run) })
			}
		}
	}
	for _, group := range groups {
		if !slices.ContainsFunc(slices.Collect(maps.Values(s.cases[group])), func(c suiteCase[C]) bool { return !c.alone }) {
			continue // only alone cases, run above
		}
		t.Run(group, func(t *testing.T) {
			t.Parallel()
			for _, name := range slices.Sorted(maps.Keys(s.cases[group])) {
				if c := s.cases[group][name]; !c.alone {
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						call(t, c.run)
					})
				}
			}
		})
	}
}
