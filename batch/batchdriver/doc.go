// Package batchdriver is the store contract of batchkit: the [Store]
// interface, its parameters and rows, the [ChangeFeed] a shared store may
// offer, and the [Inspector] the operator console reads.
//
// Most code should use package batch instead. A host hands a Store to
// batch.Config and never calls it; this package is for those who write
// one. The SQLite store (batchstore) and the PostgreSQL store (pgstore)
// are the two in the repository.
//
// The shared vocabulary lives here too, because a store reads and writes
// it: [Caller], [Target], the job and target statuses, the outcomes, the
// trace context and the errors a store decides. Package batch names them
// again, as aliases, for hosts.
//
// # Writing a store
//
// Every method is atomic, and owner scoped where it takes a caller: a job
// of another caller is [ErrNotFound], like an unknown id. A job is
// drained with one write per target, each fenced by the runner that holds
// it ([ErrNotHeld]). The interface's documentation says what each method
// must do; docs/design/store-contract.md in the repository says why.
//
// A store proves itself with the suites of package batchdrivertest:
//
//	func TestStore_Conformance(t *testing.T) {
//		batchdrivertest.TestStore(t, func(t *testing.T) batchdriver.Store { return open(t) })
//	}
//
// Their cases are named <Group>/<Case>, so that one runs alone with
// go test -run.
package batchdriver
