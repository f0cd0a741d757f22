package pgstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// A release appends its caller's delta to caller_bytes_log rather than
// moving the caller's row (010_caller_bytes_log): the console adds the
// deltas not yet folded in, and a sweep with nothing to sweep folds them,
// so the row then holds the caller's bytes and the log is empty.
func TestStore_CallerDeltasFolded(t *testing.T) {
	t.Parallel()
	s := openTest(t, Config{})
	ctx := t.Context()
	for i, size := range []int{10, 20} {
		id := fmt.Sprint("fold-", i)
		_, _, err := s.Create(ctx, batchdriver.CreateParams{ID: id, Caller: batchdriver.Caller{Name: "folder"}, IdemKey: id,
			Targets: []batchdriver.Target{{URL: "https://example.test/" + id}}, Limits: testLimits})
		if err != nil {
			t.Fatal(err)
		}
		c, ok, err := s.Claim(ctx, batchdriver.ClaimParams{Runner: "r"})
		if err != nil || !ok {
			t.Fatalf("Claim: %v, %v", ok, err)
		}
		fin := batchdriver.TargetFinish{Idx: 0, Status: batchdriver.TargetDone, Outcome: batchdriver.OutcomeOK, Result: make([]byte, size)}
		if _, err := s.FinishTarget(ctx, batchdriver.FinishParams{JobID: c.Job.ID, Runner: "r", Target: fin}); err != nil {
			t.Fatal(err)
		}
	}
	sch := pgx.Identifier{s.opts.Schema}.Sanitize()
	counts := func() (deltas, rows int) {
		t.Helper()
		err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+sch+`.caller_bytes_log),
			(SELECT count(*) FROM `+sch+`.caller_bytes)`).Scan(&deltas, &rows)
		if err != nil {
			t.Fatal(err)
		}
		return deltas, rows
	}
	console := func(when string) {
		t.Helper()
		ov, err := s.Overview(ctx, batchdriver.OverviewParams{Callers: 5})
		if err != nil {
			t.Fatal(err)
		}
		if len(ov.Callers) != 1 || ov.Callers[0].Caller.Name != "folder" || ov.Callers[0].Bytes != 30 {
			t.Errorf("%s: console's callers %+v, want folder with 30 bytes", when, ov.Callers)
		}
	}
	if d, r := counts(); d != 2 || r != 0 {
		t.Errorf("after two releases: %d deltas and %d caller rows, want 2 and 0", d, r)
	}
	console("before the fold")
	if n, err := s.Sweep(ctx, batchdriver.SweepParams{TTL: time.Hour}); err != nil || n != 0 {
		t.Fatalf("Sweep = %d, %v; want nothing swept", n, err)
	}
	if d, r := counts(); d != 0 || r != 1 {
		t.Errorf("after a sweep with nothing to sweep: %d deltas and %d caller rows, want 0 and 1", d, r)
	}
	console("after the fold")
}
