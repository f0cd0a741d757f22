package batchstore

import (
	"strings"
	"testing"

	"zombiezen.com/go/sqlite"
)

// The queries that must stay flat as the store grows read through indexes
// (never a full table scan), and a status summary never reads
// batch_body. This pins the plans that BenchmarkSweep, BenchmarkEvict,
// BenchmarkStatus and friends measure.
func TestStore_QueryPlans(t *testing.T) {
	t.Parallel()
	s := openTest(t, Config{})
	plans := []struct {
		name, query string
		want        []string // substrings every plan must contain
	}{
		{"job", qJob, []string{"batch_job_1 (id=?)"}},
		{"summary", qTargets, []string{"t USING PRIMARY KEY (job_seq=?)"}},
		{"claim", `SELECT seq FROM batch_job WHERE status = 'queued' ORDER BY created_at, seq LIMIT 1`,
			[]string{"batch_job_queue"}},
		{"reuse", `SELECT ` + jobCols + ` FROM batch_job j WHERE j.idem_key = ? AND j.caller = ?
			AND j.status NOT IN ('cancelled', 'failed') AND j.lease > ?`,
			[]string{"batch_job_idem (idem_key=? AND caller=?)"}},
		{"caller cap", `SELECT count(*) FROM batch_job WHERE caller = ? AND ` + whereLive,
			[]string{"COVERING INDEX batch_job_live (caller=? AND status=?)"}},
		{"live jobs", qLiveJobs, []string{"batch_job_live"}},
		{"held bytes", qHeldBytes, []string{"batch_job_held", "t USING PRIMARY KEY (job_seq=?)"}},
		{"held jobs", qHeldJobs, []string{"batch_job_held"}},
		{"held by a runner", qHeldBy, []string{"batch_job_held (runner=?)"}},
		{"held by stale runners", qHeldStale, []string{"batch_job_held", "r USING PRIMARY KEY (id=?)"}},
		{"drain write's job", qHeld,
			[]string{"batch_job_1 (id=?)"}},
		{"sweep", `SELECT seq, bytes FROM batch_job WHERE ` + whereFinished + ` AND lease < ? AND ` + whereReleased + ` ORDER BY lease, seq LIMIT ` + gcBatchSQL,
			[]string{"batch_job_expiry (lease<?)"}},
		{"evict: the largest caller", qTopCaller, []string{"batch_caller_bytes"}},
		{"evict: the callers", qCallerCount, []string{"COVERING INDEX batch_caller_bytes"}},
		{"evict: a caller's bytes", qCallerBytes, []string{"PRIMARY KEY (caller=?)"}},
		{"evict: a caller's oldest", qCallerOldest, []string{"batch_job_evict (caller=?)"}},
		{"evict: held bytes by caller", qHeldByCaller, []string{"batch_job_held", "t USING PRIMARY KEY (job_seq=?)"}},
		{"list", `SELECT ` + jobCols + ` FROM batch_job j WHERE j.caller = +? ORDER BY j.created_at DESC, j.seq DESC`,
			[]string{"batch_job_caller (caller=?)"}},
		{"results", qTargetsResults, []string{"t USING PRIMARY KEY (job_seq=?)", "b USING INTEGER PRIMARY KEY (rowid=?)"}},
		{"result", qTarget, []string{"PRIMARY KEY (job_seq=? AND idx=?)", "b USING INTEGER PRIMARY KEY (rowid=?)"}},
		{"webhook due", qHookDue, []string{"batch_webhook_due (due_at<?)"}},
		{"webhook pick", qHookPick, []string{"batch_webhook_due (due_at<?)"}},
		{"webhook busy", qHookBusy, []string{"batch_webhook_claimed"}},
		{"webhook pending", qHookPending, []string{"batch_webhook_caller (caller=?)", "batch_job_webhook_pending (caller=?)"}},
		{"webhook claim", qHookClaim, []string{"PRIMARY KEY (job_id=?)"}},
		{"webhook done", qHookDone, []string{"PRIMARY KEY (job_id=?)"}},
		{"webhook release", qHookRelease, []string{"batch_webhook_claimed (runner=?)"}},
		{"webhook events' drain write", qHookReady, []string{"PRIMARY KEY (job_id=?)"}},
		{"webhook next event", qHookNext, []string{"PRIMARY KEY (job_id=?)"}},
		{"webhook events done", qHookGone, []string{"PRIMARY KEY (job_id=?)"}},
		{"webhook event's job", qHookJob, []string{"batch_job_1 (id=?)"}},
		{"webhook event's targets", qHookTargets, []string{"PRIMARY KEY (job_seq=? AND idx>? AND idx<?)"}},
		{"webhook release all", qHookReleaseAll, []string{"batch_webhook_claimed"}},
		{"delete bodies", `DELETE FROM batch_body WHERE id IN (SELECT result_id FROM batch_target WHERE job_seq = ?)`,
			[]string{"batch_body USING INTEGER PRIMARY KEY (rowid=?)", "batch_target USING PRIMARY KEY (job_seq=?)"}},
	}
	err := s.read(t.Context(), "plans", func(conn *sqlite.Conn) error {
		for _, p := range plans {
			lines, err := queryPlan(conn, p.query)
			if err != nil {
				return err
			}
			plan := strings.Join(lines, "\n")
			for _, l := range lines {
				if strings.HasPrefix(l, "SCAN ") && !strings.Contains(l, " USING ") && l != "SCAN CONSTANT ROW" {
					t.Errorf("%s: full scan %q in plan:\n%s", p.name, l, plan)
				}
				if strings.Contains(l, "TEMP B-TREE") {
					t.Errorf("%s: sorts in a temp b-tree:\n%s", p.name, plan)
				}
			}
			for _, w := range p.want {
				if !strings.Contains(plan, w) {
					t.Errorf("%s: plan lacks %q:\n%s", p.name, w, plan)
				}
			}
			if p.name == "summary" && strings.Contains(plan, "batch_body") {
				t.Errorf("summary reads batch_body:\n%s", plan)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// queryPlan returns the detail lines of EXPLAIN QUERY PLAN, parameters
// left unbound (NULL).
func queryPlan(conn *sqlite.Conn, q string) ([]string, error) {
	stmt, _, err := conn.PrepareTransient("EXPLAIN QUERY PLAN " + q)
	if err != nil {
		return nil, err
	}
	defer stmt.Finalize()
	var lines []string
	for {
		row, err := stmt.Step()
		if err != nil || !row {
			return lines, err
		}
		lines = append(lines, stmt.ColumnText(3))
	}
}
