package batchstore

import (
	"strings"
	"testing"

	"zombiezen.com/go/sqlite"
)

// TestStore_InspectPlans checks that the console's reads use the indexes
// that keep them flat as the store grows (see inspect.go).
func TestStore_InspectPlans(t *testing.T) {
	t.Parallel()
	s := openTest(t, Config{})
	plans := []struct {
		name, query string
		want        []string
	}{
		{"recent", qInspectRecent, []string{"SCAN j"}},
		{"running", qInspectRunning, []string{"batch_job_live"}},
		{"failures", qInspectFailures, []string{"batch_job_finished (finished_at>?)", "batch_job_held", "t USING PRIMARY KEY (job_seq=?)"}},
		{"runners", qInspectRunners, []string{"SCAN batch_runner"}},
		{"hooks", qInspectHooks, []string{"batch_webhook_due (due_at<?)", "batch_webhook_due (due_at>?)"}},
		{"callers", qInspectCallers, []string{"batch_caller_bytes"}},
		{"caller's newest job", qInspectCallerJob, []string{"batch_job_caller (caller=?)"}},
		{"job", qInspectJob, []string{"batch_job_1 (id=?)"}},
	}
	err := s.read(t.Context(), "plans", func(conn *sqlite.Conn) error {
		for _, p := range plans {
			lines, err := queryPlan(conn, p.query)
			if err != nil {
				t.Errorf("%s: %v", p.name, err)
				continue
			}
			plan := strings.Join(lines, "\n")
			for _, w := range p.want {
				if !strings.Contains(plan, w) {
					t.Errorf("%s: plan lacks %q:\n%s", p.name, w, plan)
				}
			}
			if strings.Contains(plan, "SCAN batch_job") && !strings.Contains(plan, "USING") {
				t.Errorf("%s: a full scan of batch_job:\n%s", p.name, plan)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
