package batchdriver

import (
	"context"
	"time"
)

// HostGate is implemented by a shared [Store] that holds the runner's
// per-host limits for every runner sharing it: how many fetches to one
// host may run at once, how far apart their starts must be, and a host's
// request to be left alone for a while (an HTTP Retry-After). It is
// optional, like [ChangeFeed]: a runner checks for it with a type
// assertion, and on a store without it keeps the limits within its own
// process, which is all there is for a store that is not Shared.
//
// A key is an opaque hash of a host and port, never the host name: the
// store keeps keys, counts and times only.
//
// A store that implements it passes the HostGate group of
// batchdrivertest.TestStore.
type HostGate interface {
	// AcquireHost takes a slot of p.Key for p.Runner when fewer than
	// p.Limit slots of the key are held (a Limit of 0 or less: no limit),
	// no other runner holds the key's reservation, the key's back-off has
	// ended and p.Interval has passed since its last slot was taken. A
	// slot is held until ReleaseHost, until its lease ends (p.Lease after
	// it was taken or last renewed), or until [Store.Reap] forgets its
	// runner, whichever comes first. When it takes no slot it returns Slot
	// 0 and, in Wait, how long until the back-off or the interval ends (0
	// when the slots are full or reserved: the caller tries again later).
	// A runner refused because the slots are full, while no other runner
	// holds the reservation, takes it for p.Want: the next slot that frees
	// is its own, and RenewHost gives one up for it. Taking a slot ends a
	// runner's own reservation.
	AcquireHost(ctx context.Context, p AcquireHostParams) (HostSlot, error)

	// RenewHost keeps a slot for another p.Lease from Now, and reports
	// true, unless another runner than the slot's holds the key's
	// reservation: then it frees the slot and reports false, so that a
	// runner that keeps its slots between fetches gives one up in turn. A
	// slot that is gone, or whose lease ended, reports false.
	RenewHost(ctx context.Context, p RenewHostParams) (bool, error)

	// ReleaseHost frees a slot that AcquireHost took and, with a
	// p.Interval, keeps the key's next slot from being taken before
	// p.Interval from Now: a host's interval then counts from the end of
	// a fetch too, not only from its start. Freeing a slot that is gone
	// (its lease ended, its runner was reaped) is not an error.
	ReleaseHost(ctx context.Context, p ReleaseHostParams) error

	// BackOffHost keeps every runner from taking a slot of p.Key for
	// p.For from Now. A back-off never shortens one that ends later.
	BackOffHost(ctx context.Context, p BackOffHostParams) error
}

type (
	// AcquireHostParams is a slot request for [HostGate.AcquireHost].
	AcquireHostParams struct {
		Key      string
		Runner   string
		Limit    int
		Interval time.Duration
		Lease    time.Duration
		Want     time.Duration
		// Now is the instant of the call (see the clock note on
		// [CreateParams]).
		Now *time.Time
	}

	// RenewHostParams names a slot for [HostGate.RenewHost].
	RenewHostParams struct {
		Key   string
		Slot  int64
		Lease time.Duration
		// Now is the instant of the call (see the clock note on
		// [CreateParams]).
		Now *time.Time
	}

	// ReleaseHostParams names a slot for [HostGate.ReleaseHost].
	ReleaseHostParams struct {
		Key      string
		Slot     int64
		Interval time.Duration
		// Now is the instant of the call (see the clock note on
		// [CreateParams]).
		Now *time.Time
	}

	// BackOffHostParams is a back-off for [HostGate.BackOffHost].
	BackOffHostParams struct {
		Key string
		For time.Duration
		// Now is the instant of the call (see the clock note on
		// [CreateParams]).
		Now *time.Time
	}
)

// HostSlot is what [HostGate.AcquireHost] answers: the slot taken (a
// positive id), or 0 and how long to wait before trying again.
type HostSlot struct {
	Slot int64
	Wait time.Duration
}
