package batchhttp

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// A summary answered from the cache is never stale: every change of the job
// (a target finished, a cancel) is answered anew, and the cache answers
// only its owner.
func TestHandler_SummaryCacheFollowsTheJob(t *testing.T) {
	t.Parallel()
	f := batchtest.NewBlockingFetcher()
	b := setup(t, setupOpts{fetch: f.Fetch})
	sub := b.submit(t, keyAlice, batchtest.Targets("cache", 3), http.StatusAccepted)
	<-f.Started
	get := func() StatusResponse {
		t.Helper()
		rec := b.do(t, http.MethodGet, "/v1/batch/"+sub.JobID, keyAlice, "")
		var st StatusResponse
		decodeJSON(t, rec.Body.Bytes(), &st)
		return st
	}
	for range 3 { // cached after the first
		if st := get(); st.TargetsDone != 0 || st.Targets[0].Status != batch.TargetRunning {
			t.Fatalf("summary = %+v", st)
		}
	}
	f.Release()
	deadline := time.Now().Add(10 * time.Second)
	st := get()
	for st.TargetsDone != 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
		st = get()
	}
	if st.TargetsDone != 1 || st.Targets[0].Status != batch.TargetDone || st.Targets[1].Status != batch.TargetRunning {
		t.Fatalf("summary after a target finished = %+v", st)
	}
	if rec := b.do(t, http.MethodDelete, "/v1/batch/"+sub.JobID, keyAlice, ""); rec.Code != http.StatusOK {
		t.Fatal(rec.Code)
	}
	if st := get(); st.Status != batch.JobCancelled {
		t.Fatalf("summary after a cancel = %s", st.Status)
	}
	if rec := b.do(t, http.MethodGet, "/v1/batch/"+sub.JobID, keyBob, ""); rec.Code != http.StatusNotFound {
		t.Fatalf("another caller's read of a cached job: %d", rec.Code)
	}
	f.Release()
}

// The cache holds at most its byte bound, least recently used out first,
// and refuses an entry larger than an eighth of it.
func TestSummaryCache_Bounded(t *testing.T) {
	t.Parallel()
	c := newSummaryCache(800)
	v := jobVersion{status: batch.JobDone}
	for i := range 10 {
		c.put(cacheKey{"a", fmt.Sprint(i)}, v, make([]byte, 100))
	}
	if c.size > 800 {
		t.Fatalf("size %d over the bound", c.size)
	}
	if _, ok := c.get(cacheKey{"a", "0"}, v); ok {
		t.Error("the oldest entry is still cached")
	}
	if _, ok := c.get(cacheKey{"a", "9"}, v); !ok {
		t.Error("the newest entry is gone")
	}
	if _, ok := c.get(cacheKey{"a", "9"}, jobVersion{status: batch.JobFailed}); ok {
		t.Error("an entry answered for another version")
	}
	c.put(cacheKey{"a", "big"}, v, make([]byte, 101))
	if _, ok := c.get(cacheKey{"a", "big"}, v); ok {
		t.Error("an entry over an eighth of the bound was cached")
	}
}
