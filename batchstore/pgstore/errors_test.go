package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

func TestWrapErr(t *testing.T) {
	t.Parallel()
	bg := context.Background()
	expired, cancel := context.WithTimeout(bg, 0)
	defer cancel()
	cancelled, cancel2 := context.WithCancel(bg)
	cancel2()
	pg := func(code string) error {
		return fmt.Errorf("query: %w", &pgconn.PgError{Severity: "ERROR", Message: "m", Code: code})
	}
	f := func(ctx context.Context, err error, closed bool, wantUnavailable bool, wantIs ...error) {
		t.Helper()
		got := wrapErr(ctx, "op", err, closed)
		if u := errors.Is(got, batchdriver.ErrUnavailable); u != wantUnavailable {
			t.Errorf("wrapErr(%v): unavailable %v, want %v (%v)", err, u, wantUnavailable, got)
		}
		for _, w := range append(wantIs, err) {
			if !errors.Is(got, w) {
				t.Errorf("wrapErr(%v) = %v, does not match %v", err, got, w)
			}
		}
		if got != err && !strings.HasPrefix(got.Error(), "pgstore: ") {
			t.Errorf("wrapErr(%v) = %q, want the pgstore: prefix", err, got)
		}
	}
	for _, s := range batchSentinels {
		if got := wrapErr(bg, "op", s, false); got != s {
			t.Errorf("sentinel %v came back as %v", s, got)
		}
	}
	for _, code := range []string{"08006", "08001", "53300", "53100", "53200", "58030", "40001", "40P01", "55P03",
		"57014", "57P01", "57P02", "57P03", "25006"} {
		f(bg, pg(code), false, true)
	}
	for _, code := range []string{"23505", "22021", "42P01", "28P01", "3D000", "42501"} {
		f(bg, pg(code), false, false)
	}
	f(bg, &pgconn.ConnectError{Config: &pgconn.Config{}}, false, true)
	f(bg, io.ErrUnexpectedEOF, false, true)
	f(bg, fmt.Errorf("dial: %w", syscall.ECONNREFUSED), false, true)
	f(expired, fmt.Errorf("wrapped: %w", context.DeadlineExceeded), false, true, context.DeadlineExceeded)
	f(expired, errors.New("conn closed"), false, true, context.DeadlineExceeded)
	f(cancelled, errors.New("conn closed"), false, false, context.Canceled)
	f(bg, ErrClosed, false, true, ErrClosed)
	f(bg, errors.New("closed pool"), true, true, ErrClosed)
	f(bg, errors.New("closed pool"), false, false)
	f(bg, fmt.Errorf("%w: x", ErrSchema), false, false, ErrSchema)
}

// A failed connect's text names no user, database, host or address
// (pgx's does), whether the server refused the login or nothing answered;
// it stays classified.
func TestWrapErr_ConnectTextClean(t *testing.T) {
	t.Parallel()
	cfg, err := pgconn.ParseConfig("postgres://batchuser@127.0.0.1:1/batchdb?sslmode=disable&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	_, dialErr := pgconn.ConnectConfig(t.Context(), cfg)
	if dialErr == nil {
		t.Fatal("a connect to port 1 succeeded")
	}
	for _, raw := range []error{dialErr, fmt.Errorf("claim: %w", dialErr)} {
		got := wrapErr(context.Background(), "claim", raw, false)
		for _, secret := range []string{"batchuser", "batchdb", "127.0.0.1", ":1"} {
			if strings.Contains(got.Error(), secret) {
				t.Errorf("wrapErr(%q) = %q: it names %q", raw, got, secret)
			}
		}
		if !errors.Is(got, batchdriver.ErrUnavailable) {
			t.Errorf("wrapErr(%q) = %q: not unavailable", raw, got)
		}
	}
	refused := connectFailed{fmt.Errorf("x: %w", &pgconn.PgError{Code: "28P01", Message: `password authentication failed for user "batchuser"`})}
	if got := refused.Error(); got != "connect failed (SQLSTATE 28P01)" {
		t.Errorf("a refused login reads %q", got)
	}
}

// Nothing listens on port 1: the store cannot serve now.
func TestOpen_Unreachable(t *testing.T) {
	t.Parallel()
	_, err := Open(t.Context(), "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=5", Config{})
	if !errors.Is(err, batchdriver.ErrUnavailable) {
		t.Fatalf("Open on a closed port = %v, want batch.ErrUnavailable", err)
	}
}

// withParams returns the test URL with more query parameters.
func withParams(t *testing.T, params map[string]string) string {
	t.Helper()
	u, err := url.Parse(pgURL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	for k, v := range params {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// A role over its connection limit gets 53300 at connect: unavailable,
// as a server over max_connections is.
func TestErrors_TooManyConnections(t *testing.T) {
	t.Parallel()
	var b [4]byte
	rand.Read(b[:])
	role := "bkt_role_" + hex.EncodeToString(b[:])
	admin := hostPool(t)
	if _, err := admin.Exec(t.Context(), `CREATE ROLE `+pgx.Identifier{role}.Sanitize()+` LOGIN CONNECTION LIMIT 0`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec(context.Background(), `DROP ROLE IF EXISTS `+pgx.Identifier{role}.Sanitize()) })
	u, err := url.Parse(pgURL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	_, err = Open(t.Context(), u.String(), Config{Schema: "unused"})
	var pe *pgconn.PgError
	if !errors.Is(err, batchdriver.ErrUnavailable) || !errors.As(err, &pe) || pe.Code != "53300" {
		t.Fatalf("Open as a role at its connection limit = %v, want 53300 and batch.ErrUnavailable", err)
	}
}

// A lock wait that runs out (lock_timeout, set here through the URL) is
// unavailable, and names no target.
func TestErrors_LockTimeout(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	s, err := Open(t.Context(), withParams(t, map[string]string{"lock_timeout": "100ms"}), Config{Schema: schema, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	create(t, s, "locked")
	tx, err := hostPool(t).Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(t.Context(), `SELECT 1 FROM `+pgx.Identifier{schema}.Sanitize()+`.job WHERE id = 'locked' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	err = s.Cancel(t.Context(), batchdriver.CancelParams{Caller: "alice", JobID: "locked"})
	var pe *pgconn.PgError
	if !errors.Is(err, batchdriver.ErrUnavailable) || !errors.As(err, &pe) || pe.Code != "55P03" {
		t.Fatalf("Cancel of a locked job = %v, want 55P03 and batch.ErrUnavailable", err)
	}
	if strings.Contains(err.Error(), "example.test") {
		t.Errorf("error names a target: %v", err)
	}
}

// A backend terminated under a call (pg_terminate_backend, a fast
// shutdown) is unavailable, and the pool recovers.
func TestErrors_AdminShutdown(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	app := "bkt_" + schema
	s, err := Open(t.Context(), withParams(t, map[string]string{"application_name": app}), Config{Schema: schema, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	// Hold the caller's lock, so that Create waits in the database.
	admin := hostPool(t)
	tx, err := admin.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(t.Context(), `SELECT pg_advisory_xact_lock($1)`, s.callerKey("alice")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		ts := batchtest.Targets("shutdown", 1)
		_, _, err := s.Create(context.Background(), batchdriver.CreateParams{ID: "j", Caller: batchdriver.Caller{Name: "alice"},
			IdemKey: "k", Targets: ts, Limits: testLimits})
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		err := admin.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Create never waited for the lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	err = <-done
	var pe *pgconn.PgError
	if !errors.Is(err, batchdriver.ErrUnavailable) || !errors.As(err, &pe) || pe.Code != "57P01" {
		t.Fatalf("Create on a terminated backend = %v, want 57P01 and batch.ErrUnavailable", err)
	}
	tx.Rollback(t.Context())
	if _, err := s.Stats(t.Context()); err != nil {
		t.Fatalf("Stats after the termination: %v", err)
	}
}

// A closed store says so, as unavailable, and Close is idempotent.
func TestStore_Closed(t *testing.T) {
	t.Parallel()
	s := openTest(t, Config{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	_, _, err := s.Claim(t.Context(), batchdriver.ClaimParams{Runner: "r"})
	if !errors.Is(err, ErrClosed) || !errors.Is(err, batchdriver.ErrUnavailable) {
		t.Fatalf("Claim after Close = %v, want ErrClosed and batch.ErrUnavailable", err)
	}
	if _, err := s.Stats(t.Context()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Stats after Close = %v", err)
	}
}

// Strings from outside are stored byte for byte (NUL, invalid UTF-8),
// where text columns would refuse them; a caller name PostgreSQL cannot
// store is an error that names no target.
func TestStore_BytesExact(t *testing.T) {
	t.Parallel()
	s := openTest(t, Config{})
	ctx := t.Context()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	url := "https://example.test/nul\x00and\xffbad"
	ts := []batchdriver.Target{{URL: url, Options: json.RawMessage(`{"question":"q\u0000?","context":true}`)}, {URL: "https://example.test/2"}}
	if _, _, err := s.Create(ctx, batchdriver.CreateParams{ID: "j", Caller: batchdriver.Caller{Name: "alice"}, IdemKey: "k",
		Targets: ts, Limits: testLimits, Now: nowAt(now)}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Claim(ctx, batchdriver.ClaimParams{Runner: "r", Now: nowAt(now)}); err != nil || !ok {
		t.Fatalf("Claim = %v, %v", ok, err)
	}
	fins := []batchdriver.TargetFinish{
		{Idx: 0, Status: batchdriver.TargetFailed, Outcome: batchdriver.OutcomeOther, Error: "up\x00stream \xfe\xff", Hint: "h\x00\xff"},
		{Idx: 1, Status: batchdriver.TargetDone, Outcome: batchdriver.OutcomeOK, Result: []byte("{\"content\":\"\\u0000\"}\x00\xff")},
	}
	for _, fin := range fins {
		if _, err := s.FinishTarget(ctx, batchdriver.FinishParams{JobID: "j", Runner: "r", Target: fin, Now: nowAt(now)}); err != nil {
			t.Fatal(err)
		}
	}
	j, got, err := s.Get(ctx, batchdriver.GetParams{Caller: "alice", JobID: "j", Results: true})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Target.URL != url || string(got[0].Target.Options) != `{"question":"q\u0000?","context":true}` {
		t.Errorf("target 0 = %+v", got[0].Target)
	}
	if got[0].Error != fins[0].Error || got[0].Hint != fins[0].Hint || string(got[1].Result) != string(fins[1].Result) {
		t.Errorf("targets = %q %q %q", got[0].Error, got[0].Hint, got[1].Result)
	}
	if want := int64(len(fins[0].Error) + len(fins[1].Result)); j.Bytes != want {
		t.Errorf("job bytes = %d, want %d", j.Bytes, want)
	}
	_, _, err = s.Create(ctx, batchdriver.CreateParams{ID: "bad-caller", Caller: batchdriver.Caller{Name: "nul\x00caller"}, IdemKey: "k2",
		Targets: ts, Limits: testLimits, Now: nowAt(now)})
	if err == nil || strings.Contains(err.Error(), "example.test") || !strings.HasPrefix(err.Error(), "pgstore: create job: ") {
		t.Fatalf("Create with a NUL in the caller = %v, want an error that names no target", err)
	}
	_, _, err = s.Create(ctx, batchdriver.CreateParams{ID: "empty", Caller: batchdriver.Caller{Name: "alice"}, IdemKey: "k3", Limits: testLimits, Now: nowAt(now)})
	if !errors.Is(err, batch.ErrNoTargets) {
		t.Fatalf("Create without targets = %v, want batch.ErrNoTargets", err)
	}
}
