// Package batchdrivertest holds the conformance suites every
// batchdriver.Store passes: [TestStore] (each method alone), [TestRunner]
// (a runner draining over the store) and [TestStoreReopen] (what survives
// a close and reopen).
//
// Run them from the store's own tests:
//
//	func TestStore_Conformance(t *testing.T) {
//		batchdrivertest.TestStore(t, func(t *testing.T) batchdriver.Store { return open(t) })
//	}
//
// Cases are named <Group>/<Case>, so that one runs alone, as in
// go test -run '^TestStore_Conformance$/^Drain$/^FinishTargetFenced$'.
// A shared store (Capabilities.Shared) also runs the cluster cases.
// [Unreachable] wraps a store to test the runner through a database
// outage.
package batchdrivertest
