package pgstore

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// A node that stops mid-transaction (a frozen process, a node cut off from
// the network) keeps its locks only for txIdleTimeout. Here one stops
// while it holds the byte counter's rows, as a sweep takes them, and
// another node's release, which moves the counter, still commits; when the
// stopped node wakes, its transaction is refused as unavailable, and the
// node serves again.
func TestStore_StoppedMidTransaction(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	stopped := openOn(t, Config{Schema: schema})
	other := openOn(t, Config{Schema: schema, Timeout: 4 * txIdleTimeout})
	ctx := t.Context()
	_, _, err := other.Create(ctx, batchdriver.CreateParams{ID: "held", Caller: batchdriver.Caller{Name: "c"}, IdemKey: "held",
		Targets: []batchdriver.Target{{URL: "https://example.test/held"}}, Limits: testLimits})
	if err != nil {
		t.Fatal(err)
	}
	c, ok, err := other.Claim(ctx, batchdriver.ClaimParams{Runner: "r"})
	if err != nil || !ok {
		t.Fatalf("Claim: %v, %v", ok, err)
	}

	locked, wake := make(chan struct{}), make(chan struct{})
	woke := make(chan error, 1)
	go func() {
		woke <- stopped.inTx(ctx, func(tx pgx.Tx) error {
			if _, err := stopped.lockCounter(ctx, tx); err != nil {
				return err
			}
			close(locked)
			<-wake // stopped: the server hears nothing from it meanwhile
			_, err := tx.Exec(ctx, "SELECT 1")
			return err
		})
	}()
	select {
	case <-locked:
	case err := <-woke:
		t.Fatalf("lock the counter: %v", err)
	}
	fin := batchdriver.TargetFinish{Idx: 0, Status: batchdriver.TargetDone, Outcome: batchdriver.OutcomeOK, Result: []byte("page")}
	step, err := other.FinishTarget(ctx, batchdriver.FinishParams{JobID: c.Job.ID, Runner: "r", Target: fin})
	close(wake)
	if err != nil {
		t.Fatalf("a release while another node is stopped holding the counter: %v", err)
	}
	if step.Status != batchdriver.JobDone {
		t.Errorf("job after its last target: %s, want done", step.Status)
	}
	err = <-woke
	if err == nil {
		t.Fatal("the stopped node's transaction committed after it had kept the counter locked past txIdleTimeout")
	}
	if werr := stopped.wrap(ctx, "sweep", err); !errors.Is(werr, batchdriver.ErrUnavailable) {
		t.Errorf("the stopped node's error on waking = %v, want one matching ErrUnavailable", werr)
	}
	if _, err := stopped.Sweep(ctx, batchdriver.SweepParams{TTL: time.Hour}); err != nil {
		t.Errorf("a sweep on the woken node: %v", err)
	}
}
