package batch

import (
	"fmt"
	"testing"
	"time"
)

// The deadline timer keeps at most maxQueuedDeadlines, the earliest ones.
func TestQueuedDeadlines_Capped(t *testing.T) {
	q := queuedDeadlines{m: make(map[string]time.Time), wake: make(chan struct{}, 1)}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range maxQueuedDeadlines {
		q.add(fmt.Sprint(i), t0.Add(time.Duration(i+1)*time.Second))
	}
	q.add("late", t0.Add(time.Hour*24))
	if _, ok := q.m["late"]; ok || len(q.m) != maxQueuedDeadlines {
		t.Errorf("a later deadline past the cap was kept (%d kept)", len(q.m))
	}
	q.add("early", t0)
	if _, ok := q.m[fmt.Sprint(maxQueuedDeadlines-1)]; ok || len(q.m) != maxQueuedDeadlines {
		t.Errorf("an earlier deadline past the cap did not replace the latest (%d kept)", len(q.m))
	}
	if first, ok := q.earliest(); !ok || !first.Equal(t0) {
		t.Errorf("earliest = %v, %v; want %v", first, ok, t0)
	}
	if !q.due(t0.Add(time.Second)) || len(q.m) != maxQueuedDeadlines-2 {
		t.Errorf("due dropped to %d, want %d", len(q.m), maxQueuedDeadlines-2)
	}
	q.forget("2")
	if _, ok := q.m["2"]; ok {
		t.Error("forget kept the job")
	}
}
