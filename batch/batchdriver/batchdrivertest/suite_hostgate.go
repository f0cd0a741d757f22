package batchdrivertest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// hostGateCases: the per-host limits a shared store keeps for every
// runner ([batchdriver.HostGate]). A store without it skips them.
var hostGateCases = map[string]func(*testing.T, batchdriver.Store){
	"HostSlotsCapped":      storeHostSlotsCapped,
	"HostKeysApart":        storeHostKeysApart,
	"HostIntervalSpaces":   storeHostInterval,
	"HostBackOffHolds":     storeHostBackOff,
	"HostLeaseEnds":        storeHostLeaseEnds,
	"HostReapFreesSlots":   storeHostReapFrees,
	"HostConcurrentCapped": storeHostConcurrent,
	"HostRenewKeeps":       storeHostRenewKeeps,
	"HostRenewYields":      storeHostRenewYields,
}

// requireHostGate returns s as a HostGate, or skips.
func requireHostGate(t *testing.T, s batchdriver.Store) batchdriver.HostGate {
	t.Helper()
	g, ok := s.(batchdriver.HostGate)
	if !ok {
		t.Skip("the store has no batchdriver.HostGate")
	}
	return g
}

// Two gate keys, as the runner makes them: hex of 16 bytes.
const (
	keyA = "0123456789abcdef0123456789abcdef"
	keyB = "fedcba9876543210fedcba9876543210"
)

func acquireAt(t *testing.T, g batchdriver.HostGate, key, runner string, limit int, interval time.Duration, at time.Time) batchdriver.HostSlot {
	t.Helper()
	got, err := g.AcquireHost(t.Context(), batchdriver.AcquireHostParams{
		Key: key, Runner: runner, Limit: limit, Interval: interval, Lease: time.Minute, Now: nowAt(at),
	})
	if err != nil {
		t.Fatalf("AcquireHost: %v", err)
	}
	return got
}

func releaseSlot(t *testing.T, g batchdriver.HostGate, key string, slot int64) {
	t.Helper()
	if err := g.ReleaseHost(t.Context(), batchdriver.ReleaseHostParams{Key: key, Slot: slot}); err != nil {
		t.Fatalf("ReleaseHost: %v", err)
	}
}

// storeHostSlotsCapped: with a limit of 2, a third slot waits (Wait 0:
// the store cannot know when) until one is released; a release of a slot
// that is gone is no error.
func storeHostSlotsCapped(t *testing.T, s batchdriver.Store) {
	g := requireHostGate(t, s)
	a := acquireAt(t, g, keyA, "r1", 2, 0, t0)
	b := acquireAt(t, g, keyA, "r2", 2, 0, t0)
	if a.Slot <= 0 || b.Slot <= 0 || a.Slot == b.Slot {
		t.Fatalf("two slots under a limit of 2: %+v, %+v", a, b)
	}
	if c := acquireAt(t, g, keyA, "r1", 2, 0, t0); c.Slot != 0 || c.Wait != 0 {
		t.Fatalf("a third slot under a limit of 2: %+v, want none and no wait", c)
	}
	releaseSlot(t, g, keyA, a.Slot)
	releaseSlot(t, g, keyA, a.Slot) // again: gone, no error
	if c := acquireAt(t, g, keyA, "r1", 2, 0, t0); c.Slot <= 0 {
		t.Fatalf("after a release: %+v, want a slot", c)
	}
	for range 5 { // no limit
		if c := acquireAt(t, g, keyA, "r1", 0, 0, t0); c.Slot <= 0 {
			t.Fatalf("limit 0 (none): %+v, want a slot", c)
		}
	}
}

// storeHostKeysApart: one key full leaves another free.
func storeHostKeysApart(t *testing.T, s batchdriver.Store) {
	g := requireHostGate(t, s)
	acquireAt(t, g, keyA, "r1", 1, 0, t0)
	if c := acquireAt(t, g, keyA, "r1", 1, 0, t0); c.Slot != 0 {
		t.Fatalf("key A past its limit: %+v", c)
	}
	if c := acquireAt(t, g, keyB, "r1", 1, 0, t0); c.Slot <= 0 {
		t.Fatalf("key B with key A full: %+v, want a slot", c)
	}
}

// storeHostInterval: starts of one key are Interval apart, whoever asks;
// the refusal says how long is left.
func storeHostInterval(t *testing.T, s batchdriver.Store) {
	g := requireHostGate(t, s)
	const iv = time.Second
	if c := acquireAt(t, g, keyA, "r1", 0, iv, t0); c.Slot <= 0 {
		t.Fatalf("first start: %+v", c)
	}
	c := acquireAt(t, g, keyA, "r2", 0, iv, t0.Add(300*time.Millisecond))
	if c.Slot != 0 || c.Wait != 700*time.Millisecond {
		t.Fatalf("300ms later: %+v, want no slot and a wait of 700ms", c)
	}
	if c := acquireAt(t, g, keyA, "r2", 0, iv, t0.Add(iv)); c.Slot <= 0 {
		t.Fatalf("an interval later: %+v, want a slot", c)
	}
	if c := acquireAt(t, g, keyB, "r2", 0, iv, t0.Add(iv)); c.Slot <= 0 {
		t.Fatalf("another key: %+v, want a slot", c)
	}
	// A release with the interval counts it from the fetch's end too.
	long := acquireAt(t, g, keyA, "r3", 0, iv, t0.Add(2*iv))
	if long.Slot <= 0 {
		t.Fatalf("two intervals in: %+v, want a slot", long)
	}
	end := t0.Add(2*iv + 1500*time.Millisecond)
	if err := g.ReleaseHost(t.Context(), batchdriver.ReleaseHostParams{Key: keyA, Slot: long.Slot, Interval: iv, Now: nowAt(end)}); err != nil {
		t.Fatalf("ReleaseHost: %v", err)
	}
	if c := acquireAt(t, g, keyA, "r1", 0, iv, end.Add(400*time.Millisecond)); c.Slot != 0 || c.Wait != 600*time.Millisecond {
		t.Fatalf("400ms after a fetch that took longer than the interval ended: %+v, want no slot and a wait of 600ms", c)
	}
	if c := acquireAt(t, g, keyA, "r1", 0, iv, end.Add(iv)); c.Slot <= 0 {
		t.Fatalf("an interval after the fetch's end: %+v, want a slot", c)
	}
}

// storeHostBackOff: a back-off holds every runner off the key until it
// ends; a shorter one does not shorten it.
func storeHostBackOff(t *testing.T, s batchdriver.Store) {
	g := requireHostGate(t, s)
	backOff := func(d time.Duration, at time.Time) {
		t.Helper()
		if err := g.BackOffHost(t.Context(), batchdriver.BackOffHostParams{Key: keyA, For: d, Now: nowAt(at)}); err != nil {
			t.Fatalf("BackOffHost: %v", err)
		}
	}
	backOff(3*time.Second, t0)
	backOff(time.Second, t0) // shorter: no change
	c := acquireAt(t, g, keyA, "r2", 2, 0, t0.Add(time.Second))
	if c.Slot != 0 || c.Wait != 2*time.Second {
		t.Fatalf("1s into a 3s back-off: %+v, want no slot and a wait of 2s", c)
	}
	if c := acquireAt(t, g, keyB, "r2", 2, 0, t0.Add(time.Second)); c.Slot <= 0 {
		t.Fatalf("another key during the back-off: %+v", c)
	}
	if c := acquireAt(t, g, keyA, "r2", 2, 0, t0.Add(3*time.Second)); c.Slot <= 0 {
		t.Fatalf("at the back-off's end: %+v, want a slot", c)
	}
}

// storeHostLeaseEnds: a slot never released frees itself at its lease's
// end.
func storeHostLeaseEnds(t *testing.T, s batchdriver.Store) {
	g := requireHostGate(t, s)
	acquireAt(t, g, keyA, "r1", 1, 0, t0) // lease: a minute
	if c := acquireAt(t, g, keyA, "r2", 1, 0, t0.Add(59*time.Second)); c.Slot != 0 {
		t.Fatalf("within the lease: %+v", c)
	}
	if c := acquireAt(t, g, keyA, "r2", 1, 0, t0.Add(time.Minute+time.Second)); c.Slot <= 0 {
		t.Fatalf("after the lease: %+v, want a slot", c)
	}
}

// storeHostReapFrees: the slots of a runner that Reap forgets (its own
// restart, or a stale one) are free at once.
func storeHostReapFrees(t *testing.T, s batchdriver.Store) {
	g := requireHostGate(t, s)
	heartbeat(t, s, "dead", t0)
	heartbeat(t, s, "live", t0)
	acquireAt(t, g, keyA, "dead", 2, 0, t0)
	acquireAt(t, g, keyA, "dead", 2, 0, t0)
	acquireAt(t, g, keyB, "restarted", 1, 0, t0)
	heartbeat(t, s, "live", t0.Add(2*time.Minute))
	if _, err := s.Reap(t.Context(), batchdriver.ReapParams{StaleAfter: time.Minute, Reason: "restart", Now: nowAt(t0.Add(2 * time.Minute))}); err != nil {
		t.Fatalf("Reap (stale): %v", err)
	}
	if c := acquireAt(t, g, keyA, "live", 2, 0, t0.Add(2*time.Minute)); c.Slot <= 0 {
		t.Fatalf("after the stale runner was reaped: %+v, want a slot", c)
	}
	heartbeat(t, s, "restarted", t0.Add(2*time.Minute))
	if _, err := s.Reap(t.Context(), batchdriver.ReapParams{Runner: "restarted", Reason: "restart", Now: nowAt(t0.Add(2 * time.Minute))}); err != nil {
		t.Fatalf("Reap (own): %v", err)
	}
	if c := acquireAt(t, g, keyB, "live", 1, 0, t0.Add(2*time.Minute)); c.Slot <= 0 {
		t.Fatalf("after the restarted runner's reap: %+v, want a slot", c)
	}
}

// storeHostConcurrentCapped: 8 goroutines taking and releasing slots of
// one key with a limit of 3 never hold more than 3 at once.
func storeHostConcurrent(t *testing.T, s batchdriver.Store) {
	g := requireHostGate(t, s)
	const limit = 3
	var held, peak, took atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for range 40 {
				got, err := g.AcquireHost(t.Context(), batchdriver.AcquireHostParams{
					Key: keyA, Runner: "r" + string(rune('a'+w)), Limit: limit, Lease: time.Minute,
				})
				if err != nil {
					t.Errorf("AcquireHost: %v", err)
					return
				}
				if got.Slot == 0 {
					continue
				}
				took.Add(1)
				n := held.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				held.Add(-1) // before the release: the store may hand the slot on at once
				if err := g.ReleaseHost(t.Context(), batchdriver.ReleaseHostParams{Key: keyA, Slot: got.Slot}); err != nil {
					t.Errorf("ReleaseHost: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if peak.Load() > limit || took.Load() == 0 {
		t.Fatalf("peak %d slots held at once (limit %d), %d taken", peak.Load(), limit, took.Load())
	}
}

func renewSlot(t *testing.T, g batchdriver.HostGate, key string, slot int64, at time.Time) bool {
	t.Helper()
	kept, err := g.RenewHost(t.Context(), batchdriver.RenewHostParams{Key: key, Slot: slot, Lease: time.Minute, Now: nowAt(at)})
	if err != nil {
		t.Fatalf("RenewHost: %v", err)
	}
	return kept
}

// storeHostRenewKeeps: a renewal moves the slot's lease on from its
// time; a slot that is gone is not renewed.
func storeHostRenewKeeps(t *testing.T, s batchdriver.Store) {
	g := requireHostGate(t, s)
	a := acquireAt(t, g, keyA, "r1", 1, 0, t0)
	if !renewSlot(t, g, keyA, a.Slot, t0.Add(50*time.Second)) {
		t.Fatal("a held slot of an unwanted key was not renewed")
	}
	if c := acquireAt(t, g, keyA, "r2", 1, 0, t0.Add(90*time.Second)); c.Slot != 0 {
		t.Fatalf("after the first lease, within the renewed one: %+v, want none", c)
	}
	if c := acquireAt(t, g, keyA, "r2", 1, 0, t0.Add(111*time.Second)); c.Slot <= 0 {
		t.Fatalf("after the renewed lease: %+v, want a slot", c)
	}
	if renewSlot(t, g, keyA, a.Slot, t0.Add(112*time.Second)) {
		t.Error("a slot whose lease ended was renewed")
	}
	if renewSlot(t, g, keyB, 987654, t0) {
		t.Error("an unknown slot was renewed")
	}
}

// storeHostRenewYields: a runner refused a slot because they are full
// reserves the next for its Want; a renewal by the holder within it frees
// the slot, which the holder cannot take back while the other may.
func storeHostRenewYields(t *testing.T, s batchdriver.Store) {
	g := requireHostGate(t, s)
	a := acquireAt(t, g, keyA, "r1", 1, 0, t0)
	refused, err := g.AcquireHost(t.Context(), batchdriver.AcquireHostParams{
		Key: keyA, Runner: "r2", Limit: 1, Lease: time.Minute, Want: 2 * time.Second, Now: nowAt(t0.Add(time.Second)),
	})
	if err != nil || refused.Slot != 0 {
		t.Fatalf("a second slot under a limit of 1: %+v, %v", refused, err)
	}
	if renewSlot(t, g, keyA, a.Slot, t0.Add(2*time.Second)) {
		t.Fatal("a slot of a wanted key was renewed")
	}
	if c := acquireAt(t, g, keyA, "r1", 1, 0, t0.Add(2*time.Second)); c.Slot != 0 {
		t.Fatalf("the holder took its slot back while another runner reserved it: %+v", c)
	}
	b := acquireAt(t, g, keyA, "r2", 1, 0, t0.Add(2*time.Second))
	if b.Slot <= 0 {
		t.Fatalf("after the holder gave its slot up: %+v, want a slot", b)
	}
	if !renewSlot(t, g, keyA, b.Slot, t0.Add(4*time.Second)) {
		t.Error("a slot was not renewed once the want had passed")
	}
}
