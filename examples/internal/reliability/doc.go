// Package reliability holds the reliability suite of the example daemon
// (examples/internal/daemon): tests that attack the whole service the way
// a hostile or unlucky world would, and check what it promises. It has no
// code of its own besides its tests; RELIABILITY.md at the repository root
// says what each check promises and has the figures of the last long run.
//
// The suite runs with the other tests (go test -race ./...) in a bounded
// form. BATCHKIT_RELIABILITY=long runs the long form:
//
//	BATCHKIT_RELIABILITY=long go test -race -v -timeout 30m ./examples/internal/reliability/
//
// Tests that need the daemon in a process of its own (to kill it, or to
// read its memory use) run the test binary again as the daemon: see
// main_test.go.
package reliability
