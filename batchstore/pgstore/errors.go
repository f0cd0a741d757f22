package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// Errors of the store itself. Conditions of the job model (no such job, a
// finished job, the caps, a runner that no longer holds its job) are the
// batch package's sentinels instead, such as [batch.ErrNotFound], returned
// as they are.
var (
	// ErrClosed: the store was closed, or the host closed the pool it was
	// built on. It also matches [batch.ErrUnavailable].
	ErrClosed = errors.New("pgstore: store closed")
	// ErrSchema: the schema holds a version newer than this build knows, a
	// migration failed, or the server is older than PostgreSQL 14.
	ErrSchema = errors.New("pgstore: unsupported database schema")
)

// batchSentinels pass through unwrapped: the runner and the HTTP adapter
// branch on them, and their text is already complete.
var batchSentinels = []error{
	batchdriver.ErrNotFound, batchdriver.ErrFinished, batchdriver.ErrNotHeld, batchdriver.ErrCallerBusy, batchdriver.ErrBusy, batchdriver.ErrNoTargets,
	batchdriver.ErrWebhooksBusy,
}

// wrapErr translates an error of operation op into the store's
// vocabulary: batch sentinels as they are; everything else as
// "pgstore: <op>: …", marked with [batch.ErrUnavailable] when the store
// cannot serve now but may later (see unavailable). The text is the
// driver's message, never a statement's parameters: no target URL can
// reach it.
func wrapErr(ctx context.Context, op string, err error, closed bool) error {
	if err == nil {
		return nil
	}
	for _, s := range batchSentinels {
		if errors.Is(err, s) {
			return err
		}
	}
	switch {
	case errors.Is(err, ErrClosed):
		return kindError{batchdriver.ErrUnavailable, fmt.Errorf("%w (%s)", ErrClosed, op)}
	case closed && isPoolClosed(err):
		// The store closed its pool under a call in flight.
		return kindError{batchdriver.ErrUnavailable, fmt.Errorf("%w (%s): %w", ErrClosed, op, err)}
	case errors.Is(err, ErrSchema):
		return err
	}
	if _, ok := errors.AsType[*pgconn.ConnectError](err); ok {
		err = connectFailed{err} // its text names the user, the database, the host and the address
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
		// The driver's error names the symptom (a cancelled query, a
		// closed connection); the context's says why.
		err = fmt.Errorf("%w: %w", cause, err)
	}
	out := fmt.Errorf("pgstore: %s: %w", op, err)
	if errors.Is(ctx.Err(), context.Canceled) {
		return out // the caller gave up: nothing to try again
	}
	if unavailable(err) {
		return kindError{batchdriver.ErrUnavailable, out}
	}
	return out
}

// connectFailed is a failed connect of the driver, with a text that leaves
// out what pgx's holds (the user, the database, the host, the address):
// "connect failed", with the server's SQLSTATE when it answered, such as
// 28P01 for a refused password. It unwraps to the driver's error, so the
// store still classifies it.
type connectFailed struct{ err error }

func (e connectFailed) Error() string {
	if pe, ok := errors.AsType[*pgconn.PgError](e.err); ok {
		return "connect failed (SQLSTATE " + pe.Code + ")"
	}
	return "connect failed"
}

func (e connectFailed) Unwrap() error { return e.err }

// kindError marks an error as matching kind without repeating kind's text.
type kindError struct{ kind, err error }

func (e kindError) Error() string   { return e.err.Error() }
func (e kindError) Unwrap() []error { return []error{e.kind, e.err} }

// unavailableCodes are the SQLSTATEs, or their classes (two characters),
// of a server that cannot serve the call now but may soon: a lost or
// refused connection, too many connections, no memory or disk, a lock or
// statement timeout, a session ended by an idle timeout, a shutdown or
// crash, a serialization failure or deadlock (the call may be retried), a
// read-only standby, an I/O error.
var unavailableCodes = map[string]bool{
	"08":    true, // connection exception
	"53":    true, // insufficient resources: 53300 too many connections, 53100 disk full, …
	"58":    true, // system error: 58030 I/O error
	"40001": true, // serialization failure
	"40P01": true, // deadlock detected
	"55P03": true, // lock not available: lock_timeout
	"57014": true, // query canceled: statement_timeout
	"57P01": true, // admin shutdown: pg_terminate_backend, a fast shutdown
	"57P02": true, // crash shutdown
	"57P03": true, // cannot connect now: the server is starting or stopping
	"57P05": true, // idle session timeout
	"25P03": true, // idle-in-transaction timeout: the session ended mid-transaction (txIdleTimeout)
	"25006": true, // read-only SQL transaction: a standby, or default_transaction_read_only
	"72000": true, // snapshot too old
}

// unavailable reports whether err means the store cannot serve now but
// may later. A connection the server refused for a reason of its
// configuration (bad password, unknown database or role) is not: waiting
// does not fix it.
func unavailable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return unavailableCodes[pe.Code] || len(pe.Code) == 5 && unavailableCodes[pe.Code[:2]]
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err):
		return true
	case errors.As(err, &ce): // dial refused, reset, timed out, TLS
		return true
	case errors.As(err, &ne):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	// A connection pgx closed after a failed write or a cancelled query:
	// the next call gets a new one.
	return strings.Contains(err.Error(), "conn closed")
}

// isPoolClosed reports whether err comes from a pgxpool that was closed.
// puddle's ErrClosedPool is not in pgx's API, so its text is matched.
func isPoolClosed(err error) bool {
	return strings.Contains(err.Error(), "closed pool")
}
