package batchconsole

import (
	"cmp"
	"fmt"
	"html/template"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// The views the templates render. They are built field by field from the
// store's answers, so that nothing the console must not show (a target or
// webhook URL, a result, an error's text, a restricted caller's name) can
// reach a template: it is never copied into a view.
type (
	page struct {
		Title    string
		Prefix   string
		Refresh  time.Duration
		Updated  string
		Overview *overviewView
		Job      *jobView
	}
	overviewView struct {
		Queued, Running int
		Bytes, Budget   string
		BudgetUsed      string // a percentage
		RunningJobs     []jobRow
		Recent          []jobRow
		Runners         []runnerRow
		StaleAfter      string
		Failures        []failureRow
		FailuresTotal   int
		Hooks           hooksView
		Callers         []callerRow
	}
	jobRow struct {
		ID, Href        string
		Caller          string
		Class           string
		Restricted      bool
		Status          string
		Done, Total     int
		Age, Expires    string
		Runner          string
		Retry           string // the id of the job it retries, or ""
		HandedOn        int    // the times it was handed on to another runner
		RetryHref       string
		Created, Expiry string // RFC 3339, for the title attributes
	}
	runnerRow struct {
		ID        string
		Age       string
		Heartbeat string
		Stale     bool
	}
	failureRow struct {
		Outcome string
		Count   int
	}
	hooksView struct {
		Pending, Due, Claimed int
		OldestDue             string
	}
	callerRow struct {
		Label      string
		Class      string
		Restricted bool
		Callers    int // the restricted callers the row stands for; 1 otherwise
		Bytes      string
		Share      string
	}
	jobView struct {
		Row      jobRow
		Targets  []targetRow
		Outcomes []failureRow // every target's outcome, counted
		// Labels are the job's metadata in key order: keys and values, or
		// for a restricted caller the keys alone.
		Labels []labelRow
		Back   string
	}
	labelRow struct {
		Key, Value string
		Withheld   bool // the value is not shown: a restricted caller's
	}
	targetRow struct {
		Idx      int
		Status   string
		Attempts int // fetches that may have reached the upstream
		Outcome  string
		Withheld bool // finished, its outcome not told: a restricted caller's
	}
)

var funcs = template.FuncMap{
	"ms": func(d time.Duration) int64 { return d.Milliseconds() },
	"secs": func(d time.Duration) int64 {
		return max(int64(d/time.Second), 1)
	},
}

func (h *Handler) overviewView(ov batchdriver.Overview, now time.Time) *overviewView {
	v := &overviewView{
		Queued: ov.Stats.Queued, Running: ov.Stats.Running,
		Bytes: sizeOf(ov.Stats.Bytes), Budget: sizeOf(h.opts.MaxBytes),
		BudgetUsed: percent(ov.Stats.Bytes, h.opts.MaxBytes),
		StaleAfter: ageOf(h.opts.StaleAfter),
		Hooks:      hooksView{Pending: ov.Webhooks.Pending, Due: ov.Webhooks.Due, Claimed: ov.Webhooks.Claimed},
	}
	if ov.Webhooks.Due > 0 {
		v.Hooks.OldestDue = ageOf(ov.Webhooks.OldestDue)
	}
	for _, j := range ov.Running {
		v.RunningJobs = append(v.RunningJobs, h.jobRow(j, now))
	}
	for _, j := range ov.Recent {
		v.Recent = append(v.Recent, h.jobRow(j, now))
	}
	for _, r := range ov.Runners {
		v.Runners = append(v.Runners, runnerRow{
			ID: r.ID, Age: ageOf(r.Age), Heartbeat: r.Heartbeat.UTC().Format(time.RFC3339),
			Stale: r.Age > h.opts.StaleAfter,
		})
	}
	for o, n := range ov.Failures {
		v.FailuresTotal += n
		v.Failures = appendCount(v.Failures, outcomeOf(o), n)
	}
	sortCounts(v.Failures)
	v.Callers = h.callerRows(ov.Callers)
	return v
}

// appendCount adds n to outcome's row.
func appendCount(rows []failureRow, outcome string, n int) []failureRow {
	for i := range rows {
		if rows[i].Outcome == outcome {
			rows[i].Count += n
			return rows
		}
	}
	return append(rows, failureRow{Outcome: outcome, Count: n})
}

func sortCounts(rows []failureRow) {
	slices.SortFunc(rows, func(a, b failureRow) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Outcome, b.Outcome))
	})
}

// callerRows are the byte shares: a row per caller, and one per class for
// the restricted callers, with their count; most bytes first.
func (h *Handler) callerRows(callers []batchdriver.CallerBytes) []callerRow {
	type entry struct {
		row   callerRow
		bytes int64
	}
	var entries []*entry
	classes := map[string]*entry{}
	for _, c := range callers {
		if !c.Caller.Restricted {
			entries = append(entries, &entry{row: callerRow{Label: c.Caller.Name, Class: c.Caller.Class, Callers: 1}, bytes: c.Bytes})
			continue
		}
		e := classes[c.Caller.Class]
		if e == nil {
			e = &entry{row: callerRow{Label: "restricted", Class: c.Caller.Class, Restricted: true}}
			classes[c.Caller.Class] = e
			entries = append(entries, e)
		}
		e.row.Callers++
		e.bytes += c.Bytes
	}
	slices.SortStableFunc(entries, func(a, b *entry) int { return cmp.Compare(b.bytes, a.bytes) })
	rows := make([]callerRow, len(entries))
	for i, e := range entries {
		rows[i] = e.row
		rows[i].Bytes, rows[i].Share = sizeOf(e.bytes), percent(e.bytes, h.opts.MaxBytes)
	}
	return rows
}

func (h *Handler) jobRow(j batchdriver.Job, now time.Time) jobRow {
	expiry := j.Lease.Add(h.opts.TTL)
	r := jobRow{
		ID: j.ID, Href: h.opts.Prefix + "/jobs/" + url.PathEscape(j.ID),
		Status: statusOf(j.Status), Done: j.TargetsDone, Total: j.TargetsTotal,
		Age: ageOf(now.Sub(j.CreatedAt)), Runner: j.Runner, HandedOn: j.HandedOn,
		Created: j.CreatedAt.UTC().Format(time.RFC3339), Expiry: expiry.UTC().Format(time.RFC3339),
	}
	if d := expiry.Sub(now); d > 0 {
		r.Expires = "in " + ageOf(d)
	} else {
		r.Expires = ageOf(-d) + " ago"
	}
	if j.Status.Live() {
		r.Expires = "live (" + r.Expires + ")"
	}
	if j.Caller.Restricted {
		r.Caller, r.Class, r.Restricted = "restricted", j.Caller.Class, true
	} else {
		r.Caller, r.Class = j.Caller.Name, j.Caller.Class
	}
	if j.RetryOf != "" {
		r.Retry, r.RetryHref = j.RetryOf, h.opts.Prefix+"/jobs/"+url.PathEscape(j.RetryOf)
	}
	return r
}

func (h *Handler) jobView(j batchdriver.Job, targets []batchdriver.TargetRecord, now time.Time) jobView {
	v := jobView{Row: h.jobRow(j, now), Back: h.opts.Prefix}
	for _, k := range slices.Sorted(maps.Keys(j.Metadata)) {
		if j.Caller.Restricted {
			v.Labels = append(v.Labels, labelRow{Key: k, Withheld: true})
		} else {
			v.Labels = append(v.Labels, labelRow{Key: k, Value: j.Metadata[k]})
		}
	}
	for _, t := range targets {
		row := targetRow{Idx: t.Idx, Status: targetStatusOf(t.Status), Attempts: max(t.Attempts, 1)}
		if slices.Contains(j.Skipped, t.Idx) {
			row.Attempts = 0 // skipped at submit: never fetched
		}
		switch {
		case t.Outcome == "":
		case j.Caller.Restricted:
			// A restricted caller's log lines say whether a target was
			// ok, never its outcome; nor does its job's page.
			row.Withheld = true
		default:
			row.Outcome = outcomeOf(t.Outcome)
			v.Outcomes = appendCount(v.Outcomes, row.Outcome, 1)
		}
		v.Targets = append(v.Targets, row)
	}
	sortCounts(v.Outcomes)
	return v
}

// outcomeOf folds an outcome outside the known set to "other", as the
// metrics do: a raw string never reaches a page.
func outcomeOf(o batch.Outcome) string {
	if !o.Known() {
		return string(batch.OutcomeOther)
	}
	return string(o)
}

func statusOf(s batch.JobStatus) string {
	switch s {
	case batch.JobQueued, batch.JobRunning, batch.JobDone, batch.JobPartial, batch.JobFailed, batch.JobCancelled:
		return string(s)
	}
	return "unknown"
}

func targetStatusOf(s batch.TargetStatus) string {
	switch s {
	case batch.TargetPending, batch.TargetRunning, batch.TargetDone, batch.TargetFailed:
		return string(s)
	}
	return "unknown"
}

// ageOf writes a duration the way a person reads one: "3s", "4m 10s",
// "2h 5m", "3d 4h".
func ageOf(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd %dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

// sizeOf writes a byte count in binary units.
func sizeOf(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

func percent(n, of int64) string {
	if of <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(of))
}
