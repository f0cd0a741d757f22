package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
)

// SPEC §12: the byte budget is shared per caller.
// Through the daemon over HTTP, caller A's finished job, whose lease is
// the oldest of the store, stays readable byte for byte while caller B
// writes three times the budget in 256 KiB pages and polls all its jobs
// after each one, with a collection pass (the sweeper's) after each of B's
// jobs. B loses its own oldest jobs instead, keeps its newest, and what is
// stored stays within the budget. On SQLite and on PostgreSQL (where the
// share is decided in the database, for every node).
func TestBudgetSharedPerCaller(t *testing.T) {
	t.Parallel()
	t.Run("SQLite", func(t *testing.T) {
		t.Parallel()
		budgetShared(t, filepath.Join(t.TempDir(), "share.db"), "")
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		t.Parallel()
		url, schema := pgSchema(t)
		budgetShared(t, url, schema)
	})
}

func budgetShared(t *testing.T, db, schema string) {
	const budget = 2 << 20
	up := newUpstream(t, 0)
	cfg := childConfig{
		DB: db, Schema: schema, Allow: []string{up.addr()}, Callers: []string{"share-a", "share-b"},
		// The background sweeper's passes are the test's own (Collect), so
		// that it can count what they evict.
		Batch: batch.Config{MaxBytes: budget, TTL: batch.Duration(time.Hour), SweepInterval: batch.Duration(time.Hour)},
	}
	d, addr, _ := serveStoppable(t, cfg, nil)
	a, b := newClient(addr, "share-a", nil), newClient(addr, "share-b", nil)
	defer a.close()
	defer b.close()
	ctx := t.Context()

	aJob, aBytes := runDone(t, a, []string{up.url("fbig-a")})
	aResult := readResult(t, a, aJob, 0)
	var bJobs []string
	var bWritten, evicted int64
	for i := 0; bWritten < 3*budget; i++ {
		id, n := runDone(t, b, []string{up.url(fmt.Sprintf("fbig-b%d-0", i)), up.url(fmt.Sprintf("fbig-b%d-1", i))})
		bJobs, bWritten = append(bJobs, id), bWritten+n
		for _, id := range bJobs { // the owner polling its jobs, as in the issue
			if _, _, err := b.status(ctx, id, ""); err != nil {
				t.Fatalf("B's poll: %v", err)
			}
		}
		c, err := d.Runner().Collect(ctx)
		if err != nil {
			t.Fatalf("Collect: %v", err)
		}
		evicted += int64(c.Evicted)
	}

	if got := readResult(t, a, aJob, 0); !bytes.Equal(got, aResult) {
		t.Fatalf("caller A's result changed: %d bytes, was %d", len(got), len(aResult))
	}
	// B's jobs still stored are its newest: a run of 404s, then 200s.
	kept, keptBytes := 0, int64(0)
	for i, id := range bJobs {
		st, ans, err := b.status(ctx, id, "?results=1")
		if err != nil {
			t.Fatalf("B's status: %v", err)
		}
		switch ans.code {
		case http.StatusOK:
			kept++
			keptBytes += resultBytes(st)
		case http.StatusNotFound:
			if kept > 0 {
				t.Errorf("B's job %d is gone while an older one is kept", i)
			}
		default:
			t.Fatalf("B's status: %d %s", ans.code, ans.errorText())
		}
	}
	if kept == 0 || kept == len(bJobs) || int64(len(bJobs)-kept) != evicted {
		t.Errorf("B kept %d of %d jobs, %d evicted: want its newest kept and the rest evicted", kept, len(bJobs), evicted)
	}
	if stored := aBytes + keptBytes; stored > budget {
		t.Errorf("%d bytes stored after the passes, over the budget of %d", stored, budget)
	}
	t.Logf("budget %d KiB; A: 1 job of %d KiB, read back intact; B: wrote %d jobs, %d KiB (%.1f× the budget), polling its jobs after each; %d of B's jobs evicted, its newest %d kept (%d KiB); stored %d KiB",
		budget>>10, aBytes>>10, len(bJobs), bWritten>>10, float64(bWritten)/budget, evicted, kept, keptBytes>>10, (aBytes+keptBytes)>>10)
}

// runDone submits urls as c, waits for the job to end done, and returns
// its id and the bytes of its results.
func runDone(t *testing.T, c *client, urls []string) (string, int64) {
	t.Helper()
	sr, a, err := c.submit(t.Context(), urls)
	if err != nil || a.code != http.StatusAccepted {
		t.Fatalf("submit: %v %d %s", err, a.code, a.errorText())
	}
	deadline := time.Now().Add(time.Minute)
	for {
		st, a, err := c.status(t.Context(), sr.JobID, "?wait=30s&results=1")
		if err != nil || a.code != http.StatusOK {
			t.Fatalf("status: %v %d %s", err, a.code, a.errorText())
		}
		if st.Status.Finished() {
			if st.Status != batch.JobDone {
				t.Fatalf("job %s ended %s: %+v", sr.JobID, st.Status, st.Targets)
			}
			return sr.JobID, resultBytes(st)
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %s after a minute", sr.JobID, st.Status)
		}
	}
}

// resultBytes sums the result envelopes of a status read with results: the
// bytes the job holds of the budget (its targets are all done).
func resultBytes(st batchhttp.StatusResponse) int64 {
	var n int64
	for _, tg := range st.Targets {
		n += int64(len(tg.Result))
	}
	return n
}

// readResult reads one target's result envelope as its owner.
func readResult(t *testing.T, c *client, id string, idx int) json.RawMessage {
	t.Helper()
	ans, err := c.do(context.Background(), http.MethodGet, fmt.Sprintf("/v1/batch/%s/%d", id, idx), nil)
	if err != nil {
		t.Fatalf("result: %v", err)
	}
	if ans.code != http.StatusOK {
		t.Fatalf("caller A's result: %d %s: its job was evicted", ans.code, ans.errorText())
	}
	var rr batchhttp.ResultResponse
	if err := json.Unmarshal(ans.body, &rr); err != nil {
		t.Fatal(err)
	}
	return rr.Result
}
