package batchstore

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"zombiezen.com/go/sqlite"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// Errors of the store itself. Conditions of the job model (no such job, a
// finished job, the caps) are the batch package's sentinels instead, such as
// [batch.ErrNotFound]. Every error matches at most one of these with
// [errors.Is] and keeps its cause in the chain.
var (
	// ErrLocked: another Store, in this process or another one, has the
	// database file open. Two stores on one file would fail each other's jobs
	// at start, so the second is refused.
	ErrLocked = errors.New("batchstore: database is in use by another store")
	// ErrCorrupt: the file is not an SQLite database, or its integrity check
	// failed. The file is left exactly as it was; nothing is re-created.
	ErrCorrupt = errors.New("batchstore: database file is corrupt or not a database")
	// ErrReadOnly: the database (or its directory) cannot be written.
	ErrReadOnly = errors.New("batchstore: database is read-only")
	// ErrFull: the disk, or the database's max_page_count, is full.
	ErrFull = errors.New("batchstore: database or disk is full")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("batchstore: store closed")
	// ErrSchema: the file holds a batchstore schema newer than this build
	// knows, or a migration failed.
	ErrSchema = errors.New("batchstore: unsupported database schema")
)

// errStop ends a ResultFunc's walk early; it never leaves the package.
var errStop = errors.New("batchstore: stop")

// batchSentinels pass through unwrapped: the runner and the HTTP adapter
// branch on them, and their text is already complete.
var batchSentinels = []error{
	batchdriver.ErrNotFound, batchdriver.ErrFinished, batchdriver.ErrNotHeld, batchdriver.ErrCallerBusy, batchdriver.ErrBusy,
}

// wrapErr translates an error of operation op into the store's vocabulary:
// batch sentinels as they are; a context that ran out as the context's error
// (the lock wait or the pool take was cut short); SQLite's corrupt,
// read-only and full codes as ErrCorrupt, ErrReadOnly and ErrFull; anything
// else wrapped as "batchstore: <op>: …".
func wrapErr(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	for _, s := range batchSentinels {
		if errors.Is(err, s) {
			return err
		}
	}
	if kind := classify(err); kind == err {
		return markUnavailable(kind, fmt.Errorf("%w (%s)", kind, op))
	} else if kind != nil {
		return markUnavailable(kind, fmt.Errorf("%w: %s: %w", kind, op, err))
	}
	if ctxErr := context.Cause(ctx); ctxErr != nil {
		// SQLITE_INTERRUPT, or SQLITE_BUSY after a lock wait that ran until
		// the deadline: name the deadline, keep the driver error. A wait
		// that ran out is a store that cannot serve now.
		var out error
		if errors.Is(err, ctxErr) {
			out = fmt.Errorf("batchstore: %s: %w", op, err)
		} else {
			out = fmt.Errorf("batchstore: %s: %w: %w", op, ctxErr, err)
		}
		if errors.Is(ctxErr, context.DeadlineExceeded) {
			out = kindError{kind: batchdriver.ErrUnavailable, err: out}
		}
		return out
	}
	return fmt.Errorf("batchstore: %s: %w", op, err)
}

// markUnavailable makes the errors of a full, read-only or closed store
// match [batch.ErrUnavailable] as well, so that the runner's callers can
// answer "try again later" without knowing this package.
func markUnavailable(kind, err error) error {
	switch kind {
	case ErrFull, ErrReadOnly, ErrClosed:
		return kindError{kind: batchdriver.ErrUnavailable, err: err}
	}
	return err
}

// kindError marks an error as one of the store's sentinels without
// repeating the sentinel's text: wrapErr puts that text first.
type kindError struct{ kind, err error }

func (e kindError) Error() string   { return e.err.Error() }
func (e kindError) Unwrap() []error { return []error{e.kind, e.err} }

// classify returns the store sentinel an error falls under, or nil: one it
// was marked with, or the one its driver or file system code means.
func classify(err error) error {
	for _, kind := range []error{ErrLocked, ErrCorrupt, ErrReadOnly, ErrFull, ErrClosed, ErrSchema} {
		if errors.Is(err, kind) {
			return kind
		}
	}
	switch sqlite.ErrCode(err).ToPrimary() {
	case sqlite.ResultCorrupt, sqlite.ResultNotADB:
		return ErrCorrupt
	case sqlite.ResultReadOnly:
		return ErrReadOnly
	case sqlite.ResultFull:
		return ErrFull
	}
	switch {
	case errors.Is(err, syscall.EROFS), errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return ErrReadOnly
	case errors.Is(err, syscall.ENOSPC):
		return ErrFull
	}
	return nil
}
