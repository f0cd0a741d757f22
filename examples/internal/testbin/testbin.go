// Package testbin builds the example programs for their end-to-end tests,
// which run the real binaries.
package testbin

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// Build builds the main package in the test's working directory (its own
// package) into a binary named name in a temporary directory, and returns
// the binary's path. race builds it with -race: pass whether the test
// binary itself was, so that both share the build cache and the program
// runs under the same checks.
func Build(t testing.TB, name string, race bool) string {
	t.Helper()
	return BuildPackage(t, name, ".", race)
}

// BuildPackage is [Build] for the main package pkg (a directory relative
// to the test's, or an import path): for a test that runs a program from
// another package, as the reliability suite runs batchd.
func BuildPackage(t testing.TB, name, pkg string, race bool) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, pkg)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
