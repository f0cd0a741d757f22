package batchdriver

// Outcome classifies how a target ended. It is a metrics label value, so the
// set is fixed: an outcome outside it is counted as [OutcomeOther].
type Outcome string

// Target outcomes.
const (
	OutcomeOK          Outcome = "ok"
	OutcomeBlocked     Outcome = "blocked"
	OutcomeTimeout     Outcome = "timeout"
	OutcomeBusy        Outcome = "busy"
	OutcomeUpstream4xx Outcome = "upstream_4xx"
	OutcomeUpstream5xx Outcome = "upstream_5xx"
	OutcomeUnsupported Outcome = "unsupported"
	OutcomeTooLong     Outcome = "too_long"
	OutcomeCancel      Outcome = "cancel"
	// OutcomeExpired: the job's deadline passed before the target started,
	// or while it was in flight and its grace ran out.
	OutcomeExpired Outcome = "expired"
	OutcomeOther   Outcome = "other"
	// OutcomeInterrupted: the target's runner stopped (closed, restarted or
	// went stale) while the target was in flight, and its job was handed on
	// (see ReapParams.HandBack). Whether the fetch reached the upstream is
	// not known.
	OutcomeInterrupted Outcome = "interrupted"
	// OutcomeRobots: the host's robots rules do not let the target be
	// fetched; no request was made to it.
	OutcomeRobots Outcome = "robots"
	// OutcomeInvalid: the target was refused at submit and skipped (see
	// CreateParams.Skipped): an empty or malformed URL, or options the
	// host does not take. It was never fetched.
	OutcomeInvalid Outcome = "invalid"
)

// Outcomes is the fixed set of outcomes, the label values of the
// runner's targets_total metric.
var Outcomes = []Outcome{
	OutcomeOK, OutcomeBlocked, OutcomeTimeout, OutcomeBusy, OutcomeUpstream4xx,
	OutcomeUpstream5xx, OutcomeUnsupported, OutcomeTooLong, OutcomeCancel, OutcomeExpired, OutcomeOther,
	OutcomeInterrupted, OutcomeRobots, OutcomeInvalid,
}

// Known reports whether o is one of the outcomes above.
func (o Outcome) Known() bool {
	for _, k := range Outcomes {
		if o == k {
			return true
		}
	}
	return false
}

// Retryable reports whether trying the target again may give another
// outcome: true for [OutcomeTimeout], [OutcomeBusy], [OutcomeUpstream5xx],
// [OutcomeCancel] (the fetch was cut short by a cancel or a shutdown),
// [OutcomeExpired] (the job's deadline passed first),
// [OutcomeInterrupted] (its runner stopped during the fetch) and
// [OutcomeOther] (the cause is not known, e.g. a target failed by a
// restart), false for [OutcomeOK] and the failures that a retry would
// repeat: [OutcomeBlocked], [OutcomeUpstream4xx], [OutcomeUnsupported],
// [OutcomeTooLong], [OutcomeRobots] and [OutcomeInvalid]. An unknown outcome
// is judged as [OutcomeOther].
func (o Outcome) Retryable() bool {
	switch o.Fold() {
	case OutcomeTimeout, OutcomeBusy, OutcomeUpstream5xx, OutcomeCancel, OutcomeExpired, OutcomeInterrupted, OutcomeOther:
		return true
	}
	return false
}

// Fold returns o if it is known and [OutcomeOther] otherwise.
func (o Outcome) Fold() Outcome {
	if o.Known() {
		return o
	}
	return OutcomeOther
}
