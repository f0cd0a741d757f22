//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package batchstore

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// lockFile takes an exclusive, non-blocking flock on the sidecar lock file
// name, creating it if needed. The kernel releases the lock when the holder
// exits, however it exits, so a crash never leaves a stale lock. flock locks
// belong to the open file description: a second lockFile of the same name
// fails even within one process. The sidecar is never the database file
// itself, so closing it cannot drop SQLite's own POSIX locks.
func lockFile(name string) (*os.File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := readHolder(f)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, kindError{ErrLocked, fmt.Errorf("%s is held%s", name, holder)}
		}
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	// Record the holder for the error message of the next one; best effort.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// readHolder returns " by pid N" from a lock file, or "".
func readHolder(f *os.File) string {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	pid := strings.TrimSpace(string(b[:n]))
	if _, err := strconv.Atoi(pid); err != nil {
		return ""
	}
	return " by pid " + pid
}

// unlockFile releases and closes a lock taken by lockFile. The file stays,
// so that a racing opener never locks a file that is about to be removed.
// It unlocks before it closes: a process forked at that moment (any
// exec.Command of the host's) holds a copy of the descriptor until its
// exec closes it, and the flock, which belongs to the open file
// description, would outlive the Close for that long; LOCK_UN on any copy
// releases it at once.
func unlockFile(f *os.File) error {
	if f == nil {
		return nil
	}
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return errors.Join(err, f.Close())
}
