// Package batchtest is the test kit of batchkit.
//
// A host uses it to test code that submits jobs, without a database or a
// network. It has an in-memory store ([NewStore]), fake fetchers, a fake
// clock ([NewClock]), and a logger that writes to the test log ([Logger]).
// [NewRunner] builds and starts a runner, and closes it when the test ends.
//
// # Getting started
//
//	func TestSubmit(t *testing.T) {
//		r := batchtest.NewRunner(t, batch.Config{Fetch: batchtest.StaticFetcher("hello")})
//		caller := batch.Caller{Name: "agent-1"}
//		job, _, err := r.Submit(t.Context(), caller, batchtest.Targets("page", 3))
//		if err != nil {
//			t.Fatal(err)
//		}
//		info := batchtest.WaitFinished(t, r, caller, job.ID, 10*time.Second)
//		if info.Status != batch.JobDone {
//			t.Errorf("status = %s, want done", info.Status)
//		}
//	}
//
// The fetchers answer with fixed content ([StaticFetcher]), per URL
// ([ScriptFetcher]), with an error ([FailingFetcher]), busy then ok
// ([BusyThenOK]), or hold each fetch until the test releases it
// ([NewBlockingFetcher]). The Examples of package batch use them.
//
// A store author wants package batchdrivertest instead: the conformance
// suites every store passes.
package batchtest
