package pgstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// seed fills s's schema with jobs straight in SQL: finished jobs of
// callers c0…c999 with four targets each, plus a few queued and held
// ones, and runs ANALYZE, so that the planner sees a store that has grown.
func seed(t testing.TB, s *Store, finished int) {
	t.Helper()
	sch := pgx.Identifier{s.opts.Schema}.Sanitize()
	for _, q := range []string{
		`INSERT INTO ` + sch + `.job (id, caller, idem_key, status, targets_total, targets_ok, created_at, lease, finished_at, bytes)
		 SELECT 'f' || i, 'c' || (i % 1000), md5(i::text), 'done', 4, 4,
		        now() - (i || ' seconds')::interval, now() - (i || ' seconds')::interval, now() - (i || ' seconds')::interval, 400
		 FROM generate_series(1, ` + fmt.Sprint(finished) + `) i`,
		`INSERT INTO ` + sch + `.job (id, caller, idem_key, status, targets_total, created_at, lease)
		 SELECT 'q' || i, 'c' || i, md5('q' || i), 'queued', 4, now(), now() FROM generate_series(1, 20) i`,
		`INSERT INTO ` + sch + `.job (id, caller, idem_key, status, targets_total, created_at, lease, runner, in_flight)
		 SELECT 'r' || i, 'c' || i, md5('r' || i), 'running', 4, now(), now(), 'runner-' || (i % 3), 0 FROM generate_series(1, 10) i`,
		`INSERT INTO ` + sch + `.target (job_seq, idx, url, status, result)
		 SELECT j.seq, x, convert_to('https://example.test/' || j.id || '/' || x, 'UTF8'),
		        CASE WHEN j.status = 'done' THEN 'done' ELSE 'pending' END,
		        CASE WHEN j.status = 'done' THEN convert_to(repeat('r', 100), 'UTF8') END
		 FROM ` + sch + `.job j, generate_series(0, 3) x`,
		`UPDATE ` + sch + `.stat SET bytes = (SELECT sum(bytes) FROM ` + sch + `.job WHERE runner = '') WHERE id = 1`,
		s.q.foldCallers, s.q.dropZeroCallers, // the insert trigger's deltas
		`INSERT INTO ` + sch + `.runner (id, heartbeat) SELECT 'runner-' || i, now() FROM generate_series(0, 2) i`,
		// A backlog of webhook events (a receiver down for a while), a few claimed.
		`INSERT INTO ` + sch + `.webhook (job_id, caller, url, status, error, targets_total, targets_ok, targets_failed,
			created_at, finished_at, lease, due_since, due_at, runner)
		 SELECT 'f' || i, 'c' || (i % 50), 'https://hooks.example/' || i, 'done', '', 4, 4, 0, now(), now(), now(),
		        now() - (i || ' seconds')::interval, now() + (i || ' seconds')::interval, CASE WHEN i % 100 = 0 THEN 'runner-1' ELSE '' END
		 FROM generate_series(1, 2000) i`,
		`ANALYZE ` + sch + `.job`, `ANALYZE ` + sch + `.target`, `ANALYZE ` + sch + `.runner`, `ANALYZE ` + sch + `.webhook`,
		`ANALYZE ` + sch + `.caller_bytes`,
	} {
		if _, err := s.pool.Exec(context.Background(), q); err != nil {
			t.Fatalf("seed: %v\n%s", err, q)
		}
	}
}

// The statements that must stay flat as the store grows read the job and
// target tables through indexes, never a full scan, under both the custom
// plans of the first executions and the generic plan a cached statement
// settles on. This pins what BenchmarkStoreSize measures.
func TestStore_QueryPlans(t *testing.T) {
	t.Parallel()
	s := openTest(t, Config{})
	seed(t, s, 20000)
	now := time.Now()
	q := s.q
	reap := func(parts ...string) string {
		return strings.Replace(q.reapJobs, "{sel}", strings.Join(parts, " UNION ALL "), 1)
	}
	handBack := func(repeat string, parts ...string) string {
		return strings.Replace(strings.ReplaceAll(q.reapHandBack, "{repeat}", repeat), "{sel}", strings.Join(parts, " UNION ALL "), 1)
	}
	plans := []struct {
		name string
		sql  string
		args []any
		want []string // index names every plan must use
	}{
		{"reuse", q.reuse, []any{now, "c7", "k", time.Hour}, []string{"job_reuse"}},
		{"caller cap", q.callerLive, []any{"c7", 1}, []string{"job_live"}},
		{"insert under the total cap", q.insert, []any{8, "id", "c", "", false, "k", 1, now, [][]byte{[]byte("u")}, []string{""}, nil, "", []int32(nil), "", "", nil, nil, []string(nil), []int32(nil), [][]byte(nil), [][]byte(nil), []string(nil), int64(0), nil, 0}, []string{"job_live"}},
		{"claim", q.claim, []any{"runner-9", now}, []string{"job_queue", "target_pkey"}},
		{"any queued", q.anyQueued, nil, []string{"job_queue"}},
		{"expire", q.expire, []any{now}, []string{"job_deadline", "target_pkey"}},
		{"any expired", q.anyExpired, []any{now}, []string{"job_deadline"}},
		{"step", q.step, []any{"r1", "runner-1", 0, 1, 0, int64(10), "done", []byte{}, []byte{}, "ok", now, time.Minute, []byte("x"), false},
			[]string{"target_pkey"}},
		{"finish target", q.finish, []any{"r1", "runner-1", 0, 1, 0, int64(10), "done", []byte{}, []byte{}, "ok", now, time.Minute, []byte("x"), true},
			[]string{"target_pkey"}},
		{"finish missed", q.finishMissed, []any{"r1", 0}, []string{"job_id_key", "target_pkey"}},
		{"cancel", q.cancel, []any{"r1", "c1", now}, []string{"job_id_key"}},
		{"get job only", q.getJob, []any{"f77", "c77"}, []string{"job_id_key"}},
		{"get", q.get, []any{"f77", "c77"}, []string{"job_id_key", "target_pkey"}},
		{"get with results", q.getResults, []any{"f77", "c77"}, []string{"job_id_key", "target_pkey"}},
		{"get target", q.getTarget, []any{"f77", "c77", 2}, []string{"job_id_key", "target_pkey"}},
		{"list", q.list, []any{"c77", 20, nil}, []string{"job_list"}},
		{"list by label", q.list, []any{"c77", 20, `{"k":"v"}`}, []string{"job_list"}},
		{"touch", q.touch, []any{"f77", "c77", now, time.Minute}, []string{"job_id_key"}},
		{"reap by runner", reap(q.reapRunner), []any{now, "restart", 7, "runner-1"}, []string{"job_held"}},
		{"reap all live", reap(q.reapLive), []any{now, "restart", 7}, []string{"job_live", "job_held"}},
		{"reap at a start", reap(q.reapRunner, q.reapOrphans), []any{now, "restart", 7, "runner-1"}, []string{"job_held"}},
		{"reap stale", reap(q.reapOrphans), []any{now, "restart", 7}, []string{"job_held"}},
		{"hand back by runner", handBack("true", q.reapRunner), []any{now, "interrupted", 11, "runner-1"}, []string{"job_held"}},
		{"hand back stale", handBack("false", q.reapOrphans), []any{now, "interrupted", 11}, []string{"job_held"}},
		{"reap repeat", q.reapRepeat, []any{[]int64{1, 2}, []int{0, 3}}, []string{"target_pkey"}},
		{"reap targets", q.reapTargets, []any{[]int64{1, 2}, []int{0, 3}, []byte("restart"), "other"}, []string{"target_pkey"}},
		{"sweep", q.sweep, []any{now.Add(-time.Hour), nil, gcBatch}, []string{"job_expiry"}},
		{"sweep by age", q.sweep, []any{nil, time.Hour, gcBatch}, []string{"job_expiry"}},
		{"oldest expired", q.oldestExpired, []any{now.Add(-time.Hour), nil}, []string{"job_expiry"}},
		{"oldest expired by age", q.oldestExpired, []any{nil, time.Hour}, []string{"job_expiry"}},
		{"total bytes", q.totalBytes, nil, []string{"job_held"}},
		{"held bytes by caller", q.heldByCaller, nil, []string{"job_held"}},
		{"evict: pick callers", q.evictPick, []any{[]string{"c7", "c8"}, []int64{10, 20}, []string{"c9"}}, []string{"caller_bytes_most", "caller_bytes_pkey"}},
		{"evict: the callers holding bytes", q.evictHolders, []any{[]string{"c7", "c8"}}, []string{"caller_bytes_pkey"}},
		{"fold the callers' deltas", q.foldCallers, nil, []string{"caller_bytes_pkey"}},
		{"drop the callers at zero", q.dropZeroCallers, nil, []string{"caller_bytes_most"}},
		{"evict: a caller's oldest", q.evictOldest, []any{"c7", evictRun}, []string{"job_evict"}},
		{"evict", q.evict, []any{[]int64{1, 2}}, []string{"job_pkey"}},
		{"stats", q.stats, nil, []string{"job_live", "job_held"}},
		{"claim webhooks", q.hookClaim, []any{now, 8, "runner-2", time.Minute, 2, 100}, []string{"webhook_caller"}},
		{"pending webhooks", q.hookPending, []any{"c7"}, []string{"webhook_caller", "job_webhook_pending"}},
		{"webhook done", q.hookDone, []any{"f7", "runner-2", 1, 0}, nil}, // its key, or the few claimed
		{"webhook retry", q.hookRetry, []any{"f7", "runner-2", 1, 0, now, time.Second}, nil},
		{"webhook delivered", q.hookDelivered, []any{"f7", "runner-2", 1, 0, now}, nil},
		{"webhook event's targets", q.hookTargets, []any{[]string{"f7"}, []int32{0}, []int32{3}}, []string{"job_id_key", "target_pkey"}},
		{"webhook release", q.hookRelease, []any{now, "runner-1"}, []string{"webhook_claimed"}},
		{"webhook release all", q.hookReleaseAll, []any{now}, []string{"webhook_claimed"}},
	}
	// Every statement is planned here, or is exempt: it reads one row by
	// its primary key, the runner table (a row per live runner), the
	// counter's 16 rows or the first row of the callers' deltas, or the
	// host gate's tables (a row per host of the last sweep interval, a
	// slot per fetch in flight) or the change feed's watches (a row per
	// long-poll under way), or it is a template (reapJobs and
	// reapHandBack, their parts above).
	exempt := map[*string]bool{&q.lockXact: true, &q.lockXactShared: true, &q.heartbeat: true, &q.forgetAll: true, &q.forgetRunner: true,
		&q.forgetStale: true, &q.reapJobs: true, &q.reapHandBack: true, &q.reapLive: true, &q.reapRunner: true, &q.reapOrphans: true,
		&q.lockStat: true, &q.notify: true, &q.notifyQueued: true, &q.anyCallerDeltas: true,
		&q.hostAcquire: true, &q.hostRenew: true, &q.hostRelease: true, &q.hostFree: true, &q.hostBackOff: true, &q.hostSweep: true,
		&q.watch: true, &q.watchers: true}
	planned := map[string]bool{}
	for _, p := range plans {
		planned[p.sql] = true
	}
	for _, f := range q.fields() {
		if !exempt[f] && !planned[*f] {
			t.Errorf("statement not in the plan test:\n%s", *f)
		}
	}
	if strings.Contains(q.get, "result") {
		t.Errorf("the status summary names the result column:\n%s", q.get)
	}
	conn, err := s.pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, p := range plans {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			plan, err := explain(t.Context(), conn, mode, p.sql, p.args)
			if err != nil {
				t.Errorf("%s (%s): %v", p.name, mode, err)
				continue
			}
			for _, line := range strings.Split(plan, "\n") {
				if strings.Contains(line, "Seq Scan on job") || strings.Contains(line, "Seq Scan on target") ||
					strings.Contains(line, "Seq Scan on webhook") {
					t.Errorf("%s (%s): full scan %q in plan:\n%s", p.name, mode, strings.TrimSpace(line), plan)
				}
			}
			for _, w := range p.want {
				if !strings.Contains(plan, w) {
					t.Errorf("%s (%s): plan does not use %s:\n%s", p.name, mode, w, plan)
				}
			}
		}
	}
}

// explain returns the plan of sql with args under plan_cache_mode mode,
// through a prepared statement, as the pool's statement cache runs it.
// The arguments travel as literals (pgx's simple protocol), since EXPLAIN
// EXECUTE takes no parameters of its own.
func explain(ctx context.Context, conn *pgxpool.Conn, mode, sql string, args []any) (string, error) {
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = `+mode); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, `PREPARE bkt_plan AS `+sql); err != nil {
		return "", err
	}
	defer conn.Exec(context.Background(), `DEALLOCATE bkt_plan`)
	params := make([]string, len(args))
	for i := range args {
		params[i] = fmt.Sprintf("$%d", i+1)
	}
	ex := `EXPLAIN EXECUTE bkt_plan`
	if len(args) > 0 {
		ex += `(` + strings.Join(params, ", ") + `)`
	}
	rows, err := conn.Query(ctx, ex, append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...)
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", err
	}
	return strings.Join(lines, "\n"), nil
}
