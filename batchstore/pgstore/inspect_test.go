package pgstore

import (
	"strings"
	"testing"
	"time"
)

// TestStore_InspectPlans checks that the console's reads use the indexes
// that keep them flat as the store grows (see inspect.go), on a store
// seeded with finished jobs.
func TestStore_InspectPlans(t *testing.T) {
	t.Parallel()
	s := openTest(t, Config{})
	seed(t, s, 20000)
	now := time.Now()
	q := inspectTemplates
	plans := []struct {
		name string
		sql  string
		args []any
		want []string
	}{
		{"recent", q.recent, []any{20}, []string{"job_pkey"}},
		{"running", q.running, []any{20}, []string{"job_live"}},
		{"failures (runner clock)", q.failures, []any{now.Add(-time.Hour), nil}, []string{"job_finished", "job_held", "target_pkey"}},
		{"failures (database clock)", q.failures, []any{nil, time.Hour}, []string{"job_finished", "job_held", "target_pkey"}},
		{"callers' newest jobs", q.callerJob, []any{[]string{"c7", "c8"}}, []string{"job_list"}},
		{"callers by bytes", q.callers, []any{10}, []string{"caller_bytes_most"}},
		{"callers' counters", q.callerBytes, []any{[]string{"c7", "c8"}}, []string{"caller_bytes_pkey"}},
		{"job", q.job, []any{"j1"}, []string{"job_id_key", "target_pkey"}},
	}
	conn, err := s.pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, p := range plans {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			plan, err := explain(t.Context(), conn, mode, s.inspectSQL(p.sql), p.args)
			if err != nil {
				t.Errorf("%s (%s): %v", p.name, mode, err)
				continue
			}
			if strings.Contains(plan, "Seq Scan on job") || strings.Contains(plan, "Seq Scan on target") {
				t.Errorf("%s (%s): a full scan:\n%s", p.name, mode, plan)
			}
			for _, w := range p.want {
				if !strings.Contains(plan, w) {
					t.Errorf("%s (%s): plan does not use %s:\n%s", p.name, mode, w, plan)
				}
			}
		}
	}
}
