package pgstore

import (
	"encoding/json"
	"time"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// scanner is a pgx.Row or pgx.Rows.
type scanner interface{ Scan(dest ...any) error }

// jobRow receives jobCols.
type jobRow struct {
	id, caller, class, idem, status, errText, runner string
	webhook                                          string
	traceParent, traceState                          string
	restricted                                       bool
	total, done                                      int
	created, lease                                   time.Time
	finished                                         *time.Time
	bytes                                            int64
	retryOf                                          string
	retryIdx                                         []int32
	deadline                                         *time.Time
	handedOn                                         int
	metadata                                         *string
	customIDs                                        []string
	skipped                                          []int32
	webhookEvents                                    int16
}

func (r *jobRow) dest() []any {
	return []any{&r.id, &r.caller, &r.class, &r.restricted, &r.idem, &r.status, &r.errText,
		&r.total, &r.done, &r.created, &r.lease, &r.finished, &r.bytes, &r.runner, &r.retryOf, &r.retryIdx, &r.webhook,
		&r.traceParent, &r.traceState, &r.deadline, &r.handedOn, &r.metadata, &r.customIDs, &r.skipped, &r.webhookEvents}
}

func (r *jobRow) job() batchdriver.Job {
	j := batchdriver.Job{
		ID:            r.id,
		Caller:        batchdriver.Caller{Name: r.caller, Class: r.class, Restricted: r.restricted},
		IdemKey:       r.idem,
		Status:        batchdriver.JobStatus(r.status),
		Error:         r.errText,
		TargetsTotal:  r.total,
		TargetsDone:   r.done,
		CreatedAt:     r.created.UTC(),
		Lease:         r.lease.UTC(),
		Bytes:         r.bytes,
		Runner:        r.runner,
		RetryOf:       r.retryOf,
		WebhookURL:    r.webhook,
		WebhookEvents: batchdriver.HookEvents(r.webhookEvents),
		Trace:         batchdriver.TraceContext{Parent: r.traceParent, State: r.traceState},
		HandedOn:      r.handedOn,
		Metadata:      decodeMetadata(r.metadata),
		CustomIDs:     r.customIDs,
	}
	j.RetryIdx, j.Skipped = ints(r.retryIdx), ints(r.skipped)
	if r.finished != nil {
		j.FinishedAt = r.finished.UTC()
	}
	if r.deadline != nil {
		j.Deadline = r.deadline.UTC()
	}
	return j
}

// ints converts an integer[] column; NULL is nil.
func ints(a []int32) []int {
	if a == nil {
		return nil
	}
	out := make([]int, len(a))
	for i, n := range a {
		out[i] = int(n)
	}
	return out
}

// encodeMetadata is the metadata parameter of m: its JSON text, or NULL
// for none.
func encodeMetadata(m map[string]string) *string {
	if len(m) == 0 {
		return nil
	}
	b, _ := json.Marshal(m) // strings only: cannot fail
	s := string(b)
	return &s
}

// decodeMetadata reads a metadata column as text; NULL is nil. The column
// is written from encodeMetadata only.
func decodeMetadata(s *string) map[string]string {
	if s == nil {
		return nil
	}
	var m map[string]string
	_ = json.Unmarshal([]byte(*s), &m)
	return m
}

// timeOrNull is t, or NULL for the zero time.
func timeOrNull(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// utcOrZero is t in UTC, or the zero time.
func utcOrZero(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}

// scanJob reads a row of jobCols alone.
func scanJob(row scanner) (batchdriver.Job, error) {
	var r jobRow
	err := row.Scan(r.dest()...)
	return r.job(), err
}

// targetRow receives targetCols (and the result), NULL for the missing
// side of a LEFT JOIN.
type targetRow struct {
	idx                    *int
	url, errText, hint     []byte
	options, status, outco *string
	attempts               *int
	result                 []byte
}

func (r *targetRow) dest(withResult bool) []any {
	d := []any{&r.idx, &r.url, &r.options, &r.status, &r.errText, &r.hint, &r.outco, &r.attempts}
	if withResult {
		d = append(d, &r.result)
	}
	return d
}

// record returns the target, or ok false for a row without one.
func (r *targetRow) record() (t batchdriver.TargetRecord, ok bool, err error) {
	if r.idx == nil {
		return t, false, nil
	}
	t = batchdriver.TargetRecord{
		Idx:     *r.idx,
		Target:  batchdriver.Target{URL: string(r.url)},
		Status:  batchdriver.TargetStatus(deref(r.status)),
		Error:   string(r.errText),
		Hint:    string(r.hint),
		Outcome: batchdriver.Outcome(deref(r.outco)),
		Result:  r.result,
	}
	if r.attempts != nil {
		t.Attempts = *r.attempts
	}
	if opts := deref(r.options); opts != "" {
		t.Target.Options = json.RawMessage(opts)
	}
	return t, true, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
