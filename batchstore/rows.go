package batchstore

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// Live and finished, spelled exactly as the partial indexes spell them: the
// planner uses a partial index only when the query repeats its WHERE term.
const (
	whereLive     = `status IN ('queued', 'running')`
	whereFinished = `status NOT IN ('queued', 'running')`
	// A held job (its target still in flight) is never swept or evicted,
	// even once cancelled.
	whereReleased = `runner = ''`
)

// jobCols are the columns scanJob reads, in order, from batch_job j. A
// held job's row does not carry its progress (see schema/002): its done
// count and bytes come from its targets, a range of the primary key that a
// summary reads anyway.
const jobCols = `j.seq, j.id, j.caller, j.caller_class, j.caller_restricted, j.idem_key,
	j.status, j.error, j.targets_total,
	iif(j.runner = '', j.targets_done, (SELECT count(*) FROM batch_target d
		WHERE d.job_seq = j.seq AND d.status IN ('done', 'failed'))),
	j.created_at, j.lease, j.finished_at,
	iif(j.runner = '', j.bytes, (SELECT coalesce(sum(d.bytes), 0) FROM batch_target d WHERE d.job_seq = j.seq)),
	j.runner, j.retry_of, j.retry_idx, coalesce(j.webhook, ''), j.trace_parent, j.trace_state,
	j.deadline, j.handed_on, j.metadata, j.custom_ids, j.skipped, coalesce(j.webhook_events, 0)`

// targetCols are the columns scanTarget reads, in order, from batch_target
// t; the results variants add the body as one more column.
const targetCols = `t.idx, t.url, t.options, t.status, t.error, t.hint, t.outcome, t.attempts`

// The reads of jobs and targets.
//
// SQLite re-prepares a cached statement whose plan looked at a bound value
// every time its bindings are cleared, and zombiezen clears them on every
// reuse: such a statement costs a full compile per call instead of a
// reuse. Plans that do this: a join with a parameter, LIMIT ?, min/max,
// and "col = ?" on a column that an ORDER BY walks the index after. So these
// reads are single-table queries, the result body is a correlated subquery,
// and an equality that feeds an ORDER BY compares with +? (a unary plus on
// the parameter keeps the index and hides the value from the planner).
// TestStore_StatementsNotReprepared guards all of it; TestStore_QueryPlans
// checks the plans still use the indexes. Only the results variants touch
// batch_body.
const (
	qJob      = `SELECT ` + jobCols + ` FROM batch_job j WHERE j.id = ? AND j.caller = ?`
	qJobBySeq = `SELECT ` + jobCols + ` FROM batch_job j WHERE j.seq = ?`
	qTargets  = `SELECT ` + targetCols + ` FROM batch_target t WHERE t.job_seq = +? ORDER BY t.idx`
	qBody     = `(SELECT b.body FROM batch_body b WHERE b.id = t.result_id)`

	qTargetsResults = `SELECT ` + targetCols + `, ` + qBody + `
		FROM batch_target t WHERE t.job_seq = +? ORDER BY t.idx`
	qTarget = `SELECT ` + targetCols + `, ` + qBody + `
		FROM batch_target t WHERE t.job_seq = ? AND t.idx = ?`
)

// scanJob reads jobCols from the start of the row.
func scanJob(stmt *sqlite.Stmt) (seq int64, j batchdriver.Job) {
	seq = stmt.ColumnInt64(0)
	j = batchdriver.Job{
		ID: stmt.ColumnText(1),
		Caller: batchdriver.Caller{
			Name:       stmt.ColumnText(2),
			Class:      stmt.ColumnText(3),
			Restricted: stmt.ColumnBool(4),
		},
		IdemKey:      stmt.ColumnText(5),
		Status:       batchdriver.JobStatus(stmt.ColumnText(6)),
		Error:        stmt.ColumnText(7),
		TargetsTotal: stmt.ColumnInt(8),
		TargetsDone:  stmt.ColumnInt(9),
		CreatedAt:    timeAt(stmt, 10),
		Lease:        timeAt(stmt, 11),
		FinishedAt:   timeAt(stmt, 12),
		Bytes:        stmt.ColumnInt64(13),
		Runner:       stmt.ColumnText(14),
		RetryOf:      stmt.ColumnText(15),
		RetryIdx:     decodeIdx(stmt.ColumnText(16)),
		WebhookURL:   stmt.ColumnText(17),
		Trace:        batchdriver.TraceContext{Parent: stmt.ColumnText(18), State: stmt.ColumnText(19)},
		Deadline:     timeAt(stmt, 20),
		HandedOn:     stmt.ColumnInt(21),
		Metadata:     decodeMetadata(stmt.ColumnText(22)),
		CustomIDs:    decodeCustomIDs(stmt.ColumnText(23)),
		Skipped:      decodeIdx(stmt.ColumnText(24)),
		// A set of 1 is the default: stored as NULL, read as 0.
		WebhookEvents: batchdriver.HookEvents(stmt.ColumnInt(25)),
	}
	return seq, j
}

// encodeMetadata is the metadata column's form of m: a JSON object, or
// NULL for none.
func encodeMetadata(m map[string]string) any {
	if len(m) == 0 {
		return nil
	}
	b, _ := json.Marshal(m) // strings only: cannot fail
	return string(b)
}

// decodeMetadata reads the metadata column; "" (NULL) is nil. The column
// is written by encodeMetadata only.
func decodeMetadata(s string) map[string]string {
	if s == "" {
		return nil
	}
	var m map[string]string
	_ = json.Unmarshal([]byte(s), &m)
	return m
}

// encodeCustomIDs is the custom_ids column's form of ids: a JSON array,
// or NULL for none.
func encodeCustomIDs(ids []string) any {
	if ids == nil {
		return nil
	}
	b, _ := json.Marshal(ids)
	return string(b)
}

// decodeCustomIDs reads the custom_ids column; "" (NULL) is nil.
func decodeCustomIDs(s string) []string {
	if s == "" {
		return nil
	}
	var ids []string
	_ = json.Unmarshal([]byte(s), &ids)
	return ids
}

// encodeIdx is the retry_idx form of idx: decimal numbers joined by commas.
func encodeIdx(idx []int) string {
	var b strings.Builder
	for i, n := range idx {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(n))
	}
	return b.String()
}

// encodeSkipped is the skipped column's form of idx: encodeIdx's, or NULL
// for none.
func encodeSkipped(idx []int) any {
	if len(idx) == 0 {
		return nil
	}
	return encodeIdx(idx)
}

// decodeIdx reads the retry_idx (and skipped) form; "" (no retry) is nil. The column is
// written by encodeIdx only, so a number that does not parse cannot occur;
// it would read as -1.
func decodeIdx(s string) []int {
	if s == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	idx := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			n = -1
		}
		idx[i] = n
	}
	return idx
}

// scanTarget reads targetCols, then the body if withBody.
func scanTarget(stmt *sqlite.Stmt, withBody bool) (batchdriver.TargetRecord, error) {
	t := batchdriver.TargetRecord{
		Idx:      stmt.ColumnInt(0),
		Target:   batchdriver.Target{URL: stmt.ColumnText(1)},
		Status:   batchdriver.TargetStatus(stmt.ColumnText(3)),
		Error:    stmt.ColumnText(4),
		Hint:     stmt.ColumnText(5),
		Outcome:  batchdriver.Outcome(stmt.ColumnText(6)),
		Attempts: stmt.ColumnInt(7),
	}
	if opts := stmt.ColumnText(2); opts != "" {
		t.Target.Options = json.RawMessage(opts)
	}
	if withBody && !stmt.ColumnIsNull(8) {
		t.Result = make([]byte, stmt.ColumnLen(8))
		stmt.ColumnBytes(8, t.Result)
	}
	return t, nil
}

// loadJob runs qJob or qJobBySeq. found is false when no row matched.
func loadJob(conn *sqlite.Conn, q string, args ...any) (seq int64, job batchdriver.Job, found bool, err error) {
	err = sqlitex.Execute(conn, q, &sqlitex.ExecOptions{
		Args: args,
		ResultFunc: func(stmt *sqlite.Stmt) error {
			seq, job = scanJob(stmt)
			found = true
			return nil
		},
	})
	return seq, job, found, err
}

// loadTargets runs qTargets, qTargetsResults or qTarget.
func loadTargets(conn *sqlite.Conn, q string, withBody bool, args ...any) ([]batchdriver.TargetRecord, error) {
	var targets []batchdriver.TargetRecord
	err := sqlitex.Execute(conn, q, &sqlitex.ExecOptions{
		Args: args,
		ResultFunc: func(stmt *sqlite.Stmt) error {
			t, err := scanTarget(stmt, withBody)
			targets = append(targets, t)
			return err
		},
	})
	return targets, err
}

// snapshot runs fn in a read transaction, so that its statements see one
// snapshot of the database. It never writes, so a deferred BEGIN is right
// here (and never meets SQLITE_BUSY). Its end runs even when the context is
// done, so the connection goes back to the pool outside any transaction.
func snapshot(conn *sqlite.Conn, fn func() error) (err error) {
	if err := sqlitex.Execute(conn, "BEGIN DEFERRED", nil); err != nil {
		return err
	}
	defer func() {
		if conn.AutocommitEnabled() { // an interrupt already ended it
			return
		}
		old := conn.SetInterrupt(nil)
		defer conn.SetInterrupt(old)
		if end := sqlitex.Execute(conn, "ROLLBACK", nil); err == nil {
			err = end
		}
	}()
	return fn()
}

// jobState reads a job's key and status by id (and caller, unless it is
// empty), or returns batch.ErrNotFound.
func jobState(conn *sqlite.Conn, id, caller string) (seq int64, status batchdriver.JobStatus, err error) {
	found := false
	q, args := `SELECT seq, status FROM batch_job WHERE id = ?`, []any{id}
	if caller != "" {
		q, args = `SELECT seq, status FROM batch_job WHERE id = ? AND caller = ?`, []any{id, caller}
	}
	err = sqlitex.Execute(conn, q, &sqlitex.ExecOptions{
		Args: args,
		ResultFunc: func(stmt *sqlite.Stmt) error {
			seq, status, found = stmt.ColumnInt64(0), batchdriver.JobStatus(stmt.ColumnText(1)), true
			return nil
		},
	})
	if err == nil && !found {
		err = batchdriver.ErrNotFound
	}
	return seq, status, err
}

// timeAt reads a time stored as Unix nanoseconds; NULL is the zero time.
func timeAt(stmt *sqlite.Stmt, col int) time.Time {
	if stmt.ColumnIsNull(col) {
		return time.Time{}
	}
	return time.Unix(0, stmt.ColumnInt64(col)).UTC()
}

// utcOrZero is t in UTC, or the zero time.
func utcOrZero(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}

// nanosOrNull is t in Unix nanoseconds, or NULL for the zero time.
func nanosOrNull(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

// minus returns ns-d, saturating instead of wrapping.
func minus(ns int64, d time.Duration) int64 {
	if d > 0 && ns < math.MinInt64+int64(d) {
		return math.MinInt64
	}
	return ns - int64(d)
}
