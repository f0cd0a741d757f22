package batchdriver

// Modes are the values [Options.Mode] accepts. The runner does not interpret
// them; it only refuses a mode outside this set at submit.
const (
	ModeDefault = ""
	ModeClean   = "clean"
	ModeRaw     = "raw"
	ModeDigest  = "digest"
)

// ValidMode reports whether m is one of the known modes.
func ValidMode(m string) bool {
	switch m {
	case ModeDefault, ModeClean, ModeRaw, ModeDigest:
		return true
	}
	return false
}

// Options are the per-target fetch options: sift's /v1/fetch field set. The
// runner stores them and hands them to the [FetchFunc] unchanged.
type Options struct {
	// Mode is "", "clean", "raw" or "digest".
	Mode     string `json:"mode,omitempty"`
	Question string `json:"question,omitempty"`
	Pages    string `json:"pages,omitempty"`
	Grep     string `json:"grep,omitempty"`
	JQ       string `json:"jq,omitempty"`
	// Context is optional: nil (absent) is not the same as false.
	Context *bool `json:"context,omitempty"`
	Recover bool  `json:"recover,omitempty"`
}

// Target is one URL to fetch and its options. Its JSON form is flat:
// {"url": "…", "mode": "…", …}.
type Target struct {
	URL string `json:"url"`
	Options
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
