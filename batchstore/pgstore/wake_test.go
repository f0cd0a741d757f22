package pgstore

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// measureWake measures how long a long-poll on node A takes to return
// after node B stored a target, over n transitions: A's runner never polls
// (PollInterval is an hour), so only the change feed can wake it. Each
// transition arms A's wait (Since = targets done so far), lets B's fetch
// of the next target return, and takes the time from B's FinishTarget
// returning (so after the commit) to A's wait returning, or zero when the
// wait returned first. It fails the test, never panics, when a store
// write or a wake does not come.
func measureWake(tb testing.TB, n int) []time.Duration {
	tb.Helper()
	schema := newSchema(tb)
	sa, sb := openOn(tb, Config{Schema: schema}), openOn(tb, Config{Schema: schema})
	f := batchtest.NewBlockingFetcher()
	tb.Cleanup(func() {
		for range n {
			f.Release()
		}
	})
	quiet := slog.New(slog.DiscardHandler)
	a := batchtest.NewRunner(tb, batch.Config{Store: acceptOnly{sa}, PollInterval: batch.Duration(time.Hour), TargetsPerJob: n, Logger: quiet})
	rec := newRecorder(sb)
	batchtest.NewRunner(tb, batch.Config{Store: rec, Fetch: f.Fetch, PollInterval: batch.Duration(time.Hour), TargetsPerJob: n, Logger: quiet})
	listening(tb, sa, 0) // neither runner polls: only the feed wakes them
	listening(tb, sb, 0)
	caller := batchdriver.Caller{Name: "alice"}
	job, _, err := a.Submit(context.Background(), caller, batchtest.Targets("wake", n))
	if err != nil {
		tb.Fatal(err)
	}
	lat := make([]time.Duration, 0, n)
	for k := range n {
		<-f.Started // B fetches target k
		waited := make(chan time.Time, 1)
		go func() {
			info, err := a.Wait(context.Background(), caller, job.ID, batch.WaitOptions{Since: &k, Timeout: 10 * time.Second})
			if err != nil || info.TargetsDone != k+1 {
				tb.Errorf("transition %d: wait answered %d done, %v", k, info.TargetsDone, err)
			}
			waited <- time.Now()
		}()
		time.Sleep(3 * time.Millisecond) // A's wait has read the job and sleeps
		f.Release()
		woke := <-waited
		stored, ok := rec.storedAt(job.ID, k, 10*time.Second)
		if !ok {
			tb.Fatalf("transition %d: B's FinishTarget of target %d did not return within 10s", k, k)
		}
		// NOTIFY may wake A before B's FinishTarget has returned: the
		// wake then took no time after the write that counts.
		lat = append(lat, max(woke.Sub(stored), 0))
	}
	return lat
}

// storedAt waits up to timeout for the time target idx of job was stored
// (its FinishTarget returned), which the recorder notes only after the
// commit, so possibly after the change feed woke a waiter.
func (r *recorder) storedAt(job string, idx int, timeout time.Duration) (time.Time, bool) {
	deadline := time.Now().Add(timeout)
	for {
		r.mu.Lock()
		ts := r.stored[job]
		r.mu.Unlock()
		if idx < len(ts) {
			return ts[idx], true
		}
		if time.Now().After(deadline) {
			return time.Time{}, false
		}
		time.Sleep(time.Millisecond)
	}
}

// wakeSummary is the distribution of lat, in milliseconds.
func wakeSummary(lat []time.Duration) string {
	within := 0
	for _, d := range lat {
		if d <= 100*time.Millisecond {
			within++
		}
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	q := func(p int) float64 { return float64(s[min(len(s)-1, len(s)*p/100)].Microseconds()) / 1000 }
	return fmt.Sprintf("%d transitions: p50 %.1f ms, p90 %.1f ms, p99 %.1f ms, max %.1f ms; %d within 100 ms",
		len(s), q(50), q(90), q(99), float64(s[len(s)-1].Microseconds())/1000, within)
}

// a long-poll on node A returns within 100 ms of
// node B storing a target. This reports the distribution; it asserts only
// that every wait woke for its transition (its timeout is 10 s, A never
// polls).
func TestCluster_LongPollWakesAcrossNodes(t *testing.T) {
	t.Parallel()
	lat := measureWake(t, 220)
	t.Logf("wake-up of a long-poll on node A after node B stored a target: %s", wakeSummary(lat))
}

// The same distribution as a benchmark: each iteration is 200 transitions.
//
//	BATCHKIT_PG_URL=… go test -run '^$' -bench BenchmarkLongPollWake ./batchstore/pgstore/
func BenchmarkLongPollWake(b *testing.B) {
	var lat []time.Duration
	for range b.N {
		lat = append(lat, measureWake(b, 200)...)
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	q := func(p int) float64 { return float64(s[min(len(s)-1, len(s)*p/100)].Microseconds()) / 1000 }
	b.ReportMetric(q(50), "p50-ms")
	b.ReportMetric(q(90), "p90-ms")
	b.ReportMetric(q(99), "p99-ms")
	b.ReportMetric(float64(s[len(s)-1].Microseconds())/1000, "max-ms")
	b.Log(wakeSummary(lat))
}
