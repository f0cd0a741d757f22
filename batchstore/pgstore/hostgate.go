package pgstore

import (
	"context"
	"time"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

var _ batchdriver.HostGate = (*Store)(nil)

// AcquireHost implements [batchdriver.HostGate.AcquireHost] in one round
// trip, the function host_acquire of migrations/013: the key's row lock
// orders the acquires of one host across every node. Without a p.Now it
// reads the database's clock.
func (s *Store) AcquireHost(ctx context.Context, p batchdriver.AcquireHostParams) (batchdriver.HostSlot, error) {
	ctx, cancel, err := s.begin(ctx)
	defer cancel()
	if err != nil {
		return batchdriver.HostSlot{}, s.wrap(ctx, "acquire host", err)
	}
	var slot, waitUS int64
	if err := s.pool.QueryRow(ctx, s.q.hostAcquire, p.Key, p.Runner, p.Limit, p.Interval, p.Lease, p.Want, s.now(p.Now)).Scan(&slot, &waitUS); err != nil {
		return batchdriver.HostSlot{}, s.wrap(ctx, "acquire host", err)
	}
	return batchdriver.HostSlot{Slot: slot, Wait: time.Duration(waitUS) * time.Microsecond}, nil
}

// RenewHost implements [batchdriver.HostGate.RenewHost] in one round
// trip, the function host_renew of migrations/013.
func (s *Store) RenewHost(ctx context.Context, p batchdriver.RenewHostParams) (bool, error) {
	ctx, cancel, err := s.begin(ctx)
	defer cancel()
	if err != nil {
		return false, s.wrap(ctx, "renew host", err)
	}
	var kept bool
	if err := s.pool.QueryRow(ctx, s.q.hostRenew, p.Key, p.Slot, p.Lease, s.now(p.Now)).Scan(&kept); err != nil {
		return false, s.wrap(ctx, "renew host", err)
	}
	return kept, nil
}

// ReleaseHost implements [batchdriver.HostGate.ReleaseHost].
func (s *Store) ReleaseHost(ctx context.Context, p batchdriver.ReleaseHostParams) error {
	ctx, cancel, err := s.begin(ctx)
	defer cancel()
	if err != nil {
		return s.wrap(ctx, "release host", err)
	}
	if p.Interval > 0 {
		_, err = s.pool.Exec(ctx, s.q.hostRelease, p.Slot, p.Key, p.Interval, s.now(p.Now))
	} else {
		_, err = s.pool.Exec(ctx, s.q.hostFree, p.Slot)
	}
	if err != nil {
		return s.wrap(ctx, "release host", err)
	}
	return nil
}

// BackOffHost implements [batchdriver.HostGate.BackOffHost].
func (s *Store) BackOffHost(ctx context.Context, p batchdriver.BackOffHostParams) error {
	ctx, cancel, err := s.begin(ctx)
	defer cancel()
	if err != nil {
		return s.wrap(ctx, "back off host", err)
	}
	if _, err := s.pool.Exec(ctx, s.q.hostBackOff, p.Key, s.now(p.Now), p.For); err != nil {
		return s.wrap(ctx, "back off host", err)
	}
	return nil
}
