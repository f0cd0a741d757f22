package pgstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchdriver/batchdrivertest"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// Group commit (group.go): the drain writes of jobs that drain at once
// share a transaction. These tests make a group of two on purpose: a
// first write is held at the server by a row lock the test takes, so
// that the next two writes queue behind it and go together once the lock
// is let go.

// groupFixture is a store with jobs "blocker0", "blocker1", "a" and "b"
// of two targets each, all held by runner "r" with target 0 in flight.
type groupFixture struct {
	s      *Store
	schema string
}

func newGroupFixture(t *testing.T) *groupFixture {
	t.Helper()
	schema := newSchema(t)
	s := openOn(t, Config{Schema: schema, MaxConns: 4})
	ctx := t.Context()
	for _, id := range []string{"blocker0", "blocker1", "a", "b"} {
		ts := batchtest.Targets(id, 2)
		if _, _, err := s.Create(ctx, batchdriver.CreateParams{ID: id, Caller: batchdriver.Caller{Name: "alice"},
			IdemKey: batchdrivertest.IdemKey(id, ts), Targets: ts, Limits: testLimits}); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := s.Claim(ctx, batchdriver.ClaimParams{Runner: "r"}); err != nil || !ok {
			t.Fatalf("Claim = %v, %v", ok, err)
		}
	}
	return &groupFixture{s: s, schema: schema}
}

// hold locks job id's row from a connection of its own, until the
// returned function lets it go.
func (f *groupFixture) hold(t *testing.T, id string) (release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgURL(t))
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+pgx.Identifier{f.schema}.Sanitize()+`.job WHERE id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	done := false
	release = func() {
		if done {
			return
		}
		done = true
		tx.Rollback(ctx)
		conn.Close(ctx)
	}
	t.Cleanup(release)
	return release
}

// waitLocked waits until n statements on the fixture's schema wait for a
// lock at the server.
func (f *groupFixture) waitLocked(t *testing.T, n int) {
	t.Helper()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, pgURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for {
		var got int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND position($1 in query) > 0`, f.schema).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got >= n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// finish is one FinishTarget of target 0 of job id, by runner, run in the
// background.
type finishCall struct {
	step batchdriver.Step
	err  error
	done chan struct{}
}

func (f *groupFixture) finish(id, runner, hint string) *finishCall {
	c := &finishCall{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.step, c.err = f.s.FinishTarget(context.Background(), batchdriver.FinishParams{JobID: id, Runner: runner,
			Target: batchdriver.TargetFinish{Idx: 0, Status: batchdriver.TargetDone, Outcome: batchdriver.OutcomeOK, Hint: hint,
				Result: []byte(`{"content":"` + id + `"}`)}})
	}()
	return c
}

// grouped runs the writes of a and b (each a func that starts one) in one
// group: it holds the blockers' rows and starts their writes, which lead
// a group each (as many as may be at the server at once) and wait there,
// then a's and b's, which queue, a first; letting blocker 0 go makes a
// lead the group of a and b. It returns once blocker 0's write is
// answered; blocker 1 is let go when the test ends.
func (f *groupFixture) grouped(t *testing.T, a, b func() *finishCall) (*finishCall, *finishCall) {
	t.Helper()
	if maxFlights != 2 {
		t.Fatalf("the fixture fills 2 flights, maxFlights is %d", maxFlights)
	}
	release0, release1 := f.hold(t, "blocker0"), f.hold(t, "blocker1")
	blocker0 := f.finish("blocker0", "r", "")
	blocker1 := f.finish("blocker1", "r", "")
	t.Cleanup(func() {
		release1()
		<-blocker1.done
	})
	f.waitLocked(t, 2)
	ca := a()
	for f.s.group.queued() < 1 { // a first, so that a leads the next group
		time.Sleep(time.Millisecond)
	}
	cb := b()
	for f.s.group.queued() < 2 {
		time.Sleep(time.Millisecond)
	}
	release0()
	<-blocker0.done
	if blocker0.err != nil {
		t.Fatalf("blocker 0: %v", blocker0.err)
	}
	return ca, cb
}

// target0 is target 0 of job id as the store shows it (what committed).
func (f *groupFixture) target0(t *testing.T, id string) batchdriver.TargetStatus {
	t.Helper()
	_, ts, err := f.s.Get(t.Context(), batchdriver.GetParams{Caller: "alice", JobID: id})
	if err != nil {
		t.Fatal(err)
	}
	return ts[0].Status
}

// A worker is not told "stored" before the commit that holds its target:
// a and b share a transaction whose commit waits (a deferred trigger on
// b's target waits for a lock the test holds) after both statements have
// run and sent their rows; neither gets an answer, and b's target is not
// stored, until the commit is done.
func TestGroup_AckAfterCommit(t *testing.T) {
	t.Parallel()
	f := newGroupFixture(t)
	sch := pgx.Identifier{f.schema}.Sanitize()
	key := lockKey(f.schema, "test-commit")
	if err := pgExecTest(t, fmt.Sprintf(`CREATE FUNCTION %[1]s.wait_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.hint = 'wait'::bytea THEN PERFORM pg_advisory_xact_lock(%[2]d); END IF;
			RETURN NULL;
		END $$;
		CREATE CONSTRAINT TRIGGER wait_commit AFTER UPDATE ON %[1]s.target DEFERRABLE INITIALLY DEFERRED
			FOR EACH ROW EXECUTE FUNCTION %[1]s.wait_commit()`, sch, key)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, key); err != nil {
		t.Fatal(err)
	}
	a, b := f.grouped(t, func() *finishCall { return f.finish("a", "r", "") }, func() *finishCall { return f.finish("b", "r", "wait") })
	f.waitLocked(t, 2) // the group's commit waits for the test's lock, blocker 1 for its row
	select {
	case <-a.done:
		t.Fatalf("a answered (%v, %v) while the transaction that holds its target is not committed", a.step, a.err)
	case <-b.done:
		t.Fatalf("b answered (%v, %v) while the transaction that holds its target is not committed", b.step, b.err)
	case <-time.After(200 * time.Millisecond):
	}
	if got := f.target0(t, "b"); got != batchdriver.TargetRunning {
		t.Fatalf("b's target 0 reads %s before the commit; want running", got)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, key); err != nil {
		t.Fatal(err)
	}
	<-a.done
	<-b.done
	for _, c := range []*finishCall{a, b} {
		if c.err != nil || c.step != (batchdriver.Step{Status: batchdriver.JobRunning, Next: 1}) {
			t.Fatalf("FinishTarget = %+v, %v; want running, next 1", c.step, c.err)
		}
	}
	if got := f.target0(t, "b"); got != batchdriver.TargetDone {
		t.Fatalf("b's target 0 reads %s after the commit; want done", got)
	}
}

// A job this runner no longer holds gets ErrNotHeld and is not changed;
// the job it shares a group with is stored.
func TestGroup_FencedWriteAlone(t *testing.T) {
	t.Parallel()
	f := newGroupFixture(t)
	a, b := f.grouped(t, func() *finishCall { return f.finish("a", "other", "") }, func() *finishCall { return f.finish("b", "r", "") })
	<-a.done
	<-b.done
	if !errors.Is(a.err, batchdriver.ErrNotHeld) {
		t.Fatalf("a (runner other) = %+v, %v; want ErrNotHeld", a.step, a.err)
	}
	if b.err != nil || b.step.Next != 1 {
		t.Fatalf("b = %+v, %v; want next 1", b.step, b.err)
	}
	if got := f.target0(t, "a"); got != batchdriver.TargetRunning {
		t.Fatalf("a's target 0 reads %s; want running (unchanged)", got)
	}
	if got := f.target0(t, "b"); got != batchdriver.TargetDone {
		t.Fatalf("b's target 0 reads %s; want done", got)
	}
}

// A write that fails at the server fails alone: the group's transaction
// rolls back, the other write runs again on its own and is stored once,
// and the failing one gets its error, its job unchanged.
func TestGroup_FailingWriteAlone(t *testing.T) {
	t.Parallel()
	f := newGroupFixture(t)
	sch := pgx.Identifier{f.schema}.Sanitize()
	if err := pgExecTest(t, `CREATE FUNCTION `+sch+`.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.hint = 'refuse'::bytea THEN RAISE EXCEPTION 'refused by the test'; END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER refuse BEFORE UPDATE ON `+sch+`.target FOR EACH ROW EXECUTE FUNCTION `+sch+`.refuse()`); err != nil {
		t.Fatal(err)
	}
	a, b := f.grouped(t, func() *finishCall { return f.finish("a", "r", "refuse") }, func() *finishCall { return f.finish("b", "r", "") })
	<-a.done
	<-b.done
	if a.err == nil || errors.Is(a.err, batchdriver.ErrNotHeld) || errors.Is(a.err, batchdriver.ErrNotFound) {
		t.Fatalf("a (refused) = %+v, %v; want the server's error", a.step, a.err)
	}
	if b.err != nil || b.step.Next != 1 {
		t.Fatalf("b = %+v, %v; want next 1", b.step, b.err)
	}
	if got := f.target0(t, "a"); got != batchdriver.TargetRunning {
		t.Fatalf("a's target 0 reads %s; want running (unchanged)", got)
	}
	job, ts, err := f.s.Get(t.Context(), batchdriver.GetParams{Caller: "alice", JobID: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if ts[0].Status != batchdriver.TargetDone || job.TargetsDone != 1 {
		t.Fatalf("b: target 0 %s, %d targets done; want done, 1 (stored once)", ts[0].Status, job.TargetsDone)
	}
	// a's runner goes on: the same write without the refused hint is
	// stored.
	if step, err := f.s.FinishTarget(t.Context(), batchdriver.FinishParams{JobID: "a", Runner: "r",
		Target: batchdriver.TargetFinish{Idx: 0, Status: batchdriver.TargetDone, Outcome: batchdriver.OutcomeOK, Result: []byte(`{"content":"a"}`)}}); err != nil || step.Next != 1 {
		t.Fatalf("a again = %+v, %v; want next 1", step, err)
	}
}

func pgExecTest(t *testing.T, sql string) error {
	t.Helper()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, pgURL(t))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}
