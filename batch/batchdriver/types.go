package batchdriver

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Target is one URL to fetch and its options.
type Target struct {
	URL string
	// CustomID is the caller's id of the target, unique within its job, ""
	// for none; the wire form's "custom_id". The runner stores it with the
	// job (CreateParams.CustomIDs) and hands stores and fetchers targets
	// without it.
	CustomID string
	// Options are the target's options as a JSON object in the runner's
	// stored form (the host's fields in its declared order, no white
	// space, absent fields left out), or nil for none. A store keeps them
	// verbatim and returns them as they were given.
	Options json.RawMessage
}

// Caller is who submits a job. All three fields are stored with the job, and
// the fetcher receives the caller as stored, so any node can drain any job.
type Caller struct {
	// Name identifies the caller for ownership, caps and idempotency. It must
	// not be empty.
	Name string
	// Class lets the host partition its caches; the runner only stores it.
	Class string
	// Restricted callers get no error details in log lines.
	Restricted bool
}

// TargetStatus is where one target is in its life: pending → running →
// done | failed.
type TargetStatus string

// Target statuses.
const (
	TargetPending TargetStatus = "pending"
	TargetRunning TargetStatus = "running"
	TargetDone    TargetStatus = "done"
	TargetFailed  TargetStatus = "failed"
)

// Finished reports whether s is done or failed.
func (s TargetStatus) Finished() bool { return s == TargetDone || s == TargetFailed }

// JobStatus is where a job is in its life: queued → running → done | partial
// | failed | cancelled.
type JobStatus string

// Job statuses.
const (
	JobQueued    JobStatus = "queued"
	JobRunning   JobStatus = "running"
	JobDone      JobStatus = "done"      // every target ok
	JobPartial   JobStatus = "partial"   // some targets ok, some failed
	JobFailed    JobStatus = "failed"    // every target failed, or failed by a restart
	JobCancelled JobStatus = "cancelled" // cancelled by its owner
)

// Live reports whether s is queued or running. Live jobs count against the
// caps and are never swept or evicted.
func (s JobStatus) Live() bool { return s == JobQueued || s == JobRunning }

// Finished reports whether s is a final status.
func (s JobStatus) Finished() bool { return !s.Live() }

// AggregateStatus is the final status of a job whose targets ended with ok
// successes and failed failures: done when all succeeded, failed when all
// failed (or when there were none), partial otherwise. Stores use it when they
// finish a job.
func AggregateStatus(ok, failed int) JobStatus {
	switch {
	case failed == 0 && ok > 0:
		return JobDone
	case ok == 0:
		return JobFailed
	default:
		return JobPartial
	}
}

// MarshalJSON writes the target in its flat form: {"url": …}, then
// "custom_id" if set, then the fields of its options.
func (t Target) MarshalJSON() ([]byte, error) {
	u, err := json.Marshal(t.URL)
	if err != nil {
		return nil, err
	}
	b := append([]byte(`{"url":`), u...)
	if t.CustomID != "" {
		id, err := json.Marshal(t.CustomID)
		if err != nil {
			return nil, err
		}
		b = append(append(b, `,"custom_id":`...), id...)
	}
	if inner := bytes.TrimSpace(t.Options); len(inner) > 2 && inner[0] == '{' {
		var buf bytes.Buffer
		if err := json.Compact(&buf, inner); err != nil {
			return nil, fmt.Errorf("target options: %w", err)
		}
		if rest := buf.Bytes()[1 : buf.Len()-1]; len(rest) > 0 {
			b = append(append(b, ','), rest...)
		}
	}
	return append(b, '}'), nil
}

// UnmarshalJSON reads the flat form that MarshalJSON writes: every field
// but "url" and "custom_id" goes into Options, in the order given; null counts as absent. It checks only that the
// fields are JSON; the runner checks them against the host's options.
func (t *Target) UnmarshalJSON(data []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return err
	}
	*t = Target{}
	if u, ok := fields["url"]; ok {
		if err := json.Unmarshal(u, &t.URL); err != nil {
			return fmt.Errorf("target url: %w", err)
		}
	}
	if id, ok := fields["custom_id"]; ok && string(id) != "null" {
		if err := json.Unmarshal(id, &t.CustomID); err != nil {
			return fmt.Errorf("target custom_id: %w", err)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil { // {
		return err
	}
	var opts bytes.Buffer
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return err
		}
		k, _ := tok.(string)
		if k == "url" || k == "custom_id" || string(v) == "null" { // null counts as absent
			continue
		}
		if opts.Len() == 0 {
			opts.WriteByte('{')
		} else {
			opts.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		opts.Write(kb)
		opts.WriteByte(':')
		if err := json.Compact(&opts, v); err != nil {
			return err
		}
	}
	if opts.Len() > 0 {
		opts.WriteByte('}')
		t.Options = json.RawMessage(opts.Bytes())
	}
	return nil
}
