//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package batchstore

import "os"

// lockFile is a no-op where flock is not available: a second process on the
// same file is not detected there (see "Opening" in
// docs/design/sqlite-store.md in the repository).
func lockFile(name string) (*os.File, error) { return nil, nil }

func unlockFile(f *os.File) error { return nil }
