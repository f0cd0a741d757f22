package batchtest

import (
	"context"
	"time"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

var _ batchdriver.HostGate = (*Store)(nil)

// memHost is one gate key: its slots, by id, with their runner and the end
// of their lease, and the times before which no slot is taken.
type memHost struct {
	slots  map[int64]memSlot
	next   time.Time // the interval's end
	until  time.Time // the back-off's end
	wanted time.Time // the reservation's end
	wanter string    // the runner that holds the reservation
}

type memSlot struct {
	runner string
	lease  time.Time
}

// AcquireHost implements [batchdriver.HostGate.AcquireHost]: a slot is
// held until its release, its lease's end, or until Reap forgets its
// runner.
func (s *Store) AcquireHost(ctx context.Context, p batchdriver.AcquireHostParams) (got batchdriver.HostSlot, err error) {
	now := memNow(p.Now)
	err = s.locked(ctx, func() error {
		h := s.hosts[p.Key]
		if h == nil {
			h = &memHost{slots: make(map[int64]memSlot)}
			s.hosts[p.Key] = h
		}
		for id, sl := range h.slots {
			if !sl.lease.After(now) {
				delete(h.slots, id)
			}
		}
		reserved := now.Before(h.wanted) && h.wanter != p.Runner
		switch {
		case now.Before(h.until):
			got.Wait = h.until.Sub(now)
		case p.Limit > 0 && (len(h.slots) >= p.Limit || reserved):
			if !reserved && len(h.slots) >= p.Limit {
				h.wanted, h.wanter = now.Add(p.Want), p.Runner
			}
		case now.Before(h.next):
			got.Wait = h.next.Sub(now)
		default:
			s.slotSeq++
			got.Slot = s.slotSeq
			h.slots[got.Slot] = memSlot{runner: p.Runner, lease: now.Add(p.Lease)}
			h.next = now.Add(p.Interval)
			if h.wanter == p.Runner {
				h.wanted, h.wanter = time.Time{}, ""
			}
		}
		return nil
	})
	return got, err
}

// RenewHost implements [batchdriver.HostGate.RenewHost].
func (s *Store) RenewHost(ctx context.Context, p batchdriver.RenewHostParams) (kept bool, err error) {
	now := memNow(p.Now)
	err = s.locked(ctx, func() error {
		h := s.hosts[p.Key]
		if h == nil {
			return nil
		}
		sl, ok := h.slots[p.Slot]
		switch {
		case !ok || !sl.lease.After(now):
			delete(h.slots, p.Slot)
		case now.Before(h.wanted) && h.wanter != sl.runner:
			delete(h.slots, p.Slot)
		default:
			sl.lease = now.Add(p.Lease)
			h.slots[p.Slot] = sl
			kept = true
		}
		return nil
	})
	return kept, err
}

// ReleaseHost implements [batchdriver.HostGate.ReleaseHost].
func (s *Store) ReleaseHost(ctx context.Context, p batchdriver.ReleaseHostParams) error {
	now := memNow(p.Now)
	return s.locked(ctx, func() error {
		h := s.hosts[p.Key]
		if h == nil {
			return nil
		}
		delete(h.slots, p.Slot)
		if next := now.Add(p.Interval); p.Interval > 0 && next.After(h.next) {
			h.next = next
		}
		return nil
	})
}

// BackOffHost implements [batchdriver.HostGate.BackOffHost].
func (s *Store) BackOffHost(ctx context.Context, p batchdriver.BackOffHostParams) error {
	now := memNow(p.Now)
	return s.locked(ctx, func() error {
		h := s.hosts[p.Key]
		if h == nil {
			h = &memHost{slots: make(map[int64]memSlot)}
			s.hosts[p.Key] = h
		}
		if until := now.Add(p.For); until.After(h.until) {
			h.until = until
		}
		return nil
	})
}

// forgetSlots drops the slots of the runners Reap forgot. Called with
// s.mu held.
func (s *Store) forgetSlots(forgot func(runner string) bool) {
	for _, h := range s.hosts {
		for id, sl := range h.slots {
			if forgot(sl.runner) {
				delete(h.slots, id)
			}
		}
	}
}
