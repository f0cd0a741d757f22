//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package batchstore

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"
)

// TestUnlockFile_ForkedCopy: a copy of the lock's descriptor, as a process
// forked by the host holds until its exec closes it, does not keep the
// lock after unlockFile: a store closed while the host forks can be
// opened again at once.
func TestUnlockFile_ForkedCopy(t *testing.T) {
	t.Parallel()
	name := filepath.Join(t.TempDir(), "batch.db.lock")
	f, err := lockFile(name)
	if err != nil {
		t.Fatal(err)
	}
	dup, err := syscall.Dup(int(f.Fd())) // the forked child's copy
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(dup)
	if _, err := lockFile(name); !errors.Is(err, ErrLocked) {
		t.Fatalf("second lockFile while held = %v, want ErrLocked", err)
	}
	if err := unlockFile(f); err != nil {
		t.Fatal(err)
	}
	g, err := lockFile(name)
	if err != nil {
		t.Fatalf("lockFile after unlockFile, a copy of the descriptor still open: %v", err)
	}
	if err := unlockFile(g); err != nil {
		t.Fatal(err)
	}
}
