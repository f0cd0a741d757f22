package batch

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// OnInvalid says what a submit does with a target it refuses: an empty
// URL, one that is not valid UTF-8, options the [OptionSet] refuses, or a
// refusal of the host's own checks ([SubmitOptions].Refused).
type OnInvalid string

// The values of [SubmitOptions].OnInvalid.
const (
	// OnInvalidReject refuses the whole submit with the first refused
	// target's *[TargetError]. It is the default.
	OnInvalidReject OnInvalid = "reject"
	// OnInvalidSkip creates the job with the refused targets finished at
	// once, at their idx: failed, with outcome [OutcomeInvalid] (or the
	// host's refusal's, such as [OutcomeBlocked]), never fetched. A submit
	// whose every target is refused is refused as with OnInvalidReject.
	OnInvalidSkip OnInvalid = "skip"
)

// Refusal is a target refused at submit: by the host's own checks, which
// pass it in [SubmitOptions].Refused, or by the runner. With
// [OnInvalidSkip] it is stored as the target's failure.
type Refusal struct {
	// Idx is the target's position in the submitted list.
	Idx int
	// Outcome is why: [OutcomeInvalid] for a malformed target,
	// [OutcomeBlocked] for one the host's policy refuses.
	Outcome Outcome
	// Error is the target's stored error, such as "blocked: port 8080" or
	// "invalid target: empty url". It goes to the caller only, never to a
	// log line, so it may name the host.
	Error string
	// Hint is the target's stored hint; "" for none.
	Hint string
}

// checkRefused checks the host's refusals and returns them by idx.
func checkRefused(refused []Refusal, n int) (map[int]Refusal, error) {
	if len(refused) == 0 {
		return nil, nil
	}
	byIdx := make(map[int]Refusal, len(refused))
	for _, rf := range refused {
		switch _, dup := byIdx[rf.Idx]; {
		case rf.Idx < 0 || rf.Idx >= n:
			return nil, fmt.Errorf("batch: refusal of target %d: no such target", rf.Idx)
		case dup:
			return nil, fmt.Errorf("batch: refusal of target %d: given twice", rf.Idx)
		case !rf.Outcome.Known() || rf.Outcome == OutcomeOK:
			return nil, fmt.Errorf("batch: refusal of target %d: outcome %q is not a failure", rf.Idx, rf.Outcome)
		}
		rf.Error = truncate(cmp.Or(rf.Error, "refused"), maxErrorBytes)
		rf.Hint = truncate(rf.Hint, maxHintBytes)
		byIdx[rf.Idx] = rf
	}
	return byIdx, nil
}

// judgeTargets checks each target, in idx order, and returns them with
// their options in the stored form, in a new slice. A target the host
// refused (refused) or that the runner refuses (an empty URL, one that is
// not valid UTF-8, options the OptionSet refuses) is, with [OnInvalidSkip],
// kept without its options and returned among the skipped; otherwise the
// first of them, by idx, refuses the submit with its *[TargetError]. So
// does a submit whose every target is refused.
func (r *Runner) judgeTargets(targets []Target, on OnInvalid, refused []Refusal) (out []Target, skipped []Refusal, err error) {
	switch on {
	case "", OnInvalidReject, OnInvalidSkip:
	default:
		return nil, nil, fmt.Errorf("batch: OnInvalid %q: want %q or %q", on, OnInvalidReject, OnInvalidSkip)
	}
	byIdx, err := checkRefused(refused, len(targets))
	if err != nil {
		return nil, nil, err
	}
	var first *TargetError
	out = make([]Target, len(targets))
	for i, t := range targets {
		rf, ok := byIdx[i]
		reason := rf.Error
		if !ok {
			opts, why := r.checkTarget(t)
			if why == "" {
				out[i] = Target{URL: t.URL, Options: opts}
				continue
			}
			reason = why
			rf = Refusal{Idx: i, Outcome: OutcomeInvalid, Error: truncate("invalid target: "+why, maxErrorBytes)}
		}
		if first == nil {
			first = &TargetError{Index: i, Reason: reason}
		}
		if on != OnInvalidSkip {
			return nil, nil, first
		}
		out[i] = Target{URL: t.URL}
		skipped = append(skipped, rf)
	}
	if len(skipped) == len(targets) {
		return nil, nil, first
	}
	return out, skipped, nil
}

// checkTarget returns t's options in the stored form, or why t is
// refused.
func (r *Runner) checkTarget(t Target) (stored []byte, reason string) {
	switch {
	case t.URL == "":
		return nil, "empty url"
	case !utf8.ValidString(t.URL):
		return nil, "invalid UTF-8"
	}
	opts, err := r.cfg.Options.Normalize(t.Options)
	if err != nil {
		return nil, err.Error()
	}
	return opts, ""
}

// skippedFinishes are the store's form of the skipped targets.
func skippedFinishes(skipped []Refusal) []batchdriver.TargetFinish {
	if len(skipped) == 0 {
		return nil
	}
	out := make([]batchdriver.TargetFinish, len(skipped))
	for i, rf := range skipped {
		out[i] = batchdriver.TargetFinish{Idx: rf.Idx, Status: TargetFailed, Error: rf.Error, Hint: rf.Hint, Outcome: rf.Outcome}
	}
	return out
}

// withSkipped is the idempotency key of a submit whose key without its
// skipped targets is key: key itself when none was skipped, so that a
// submit that skips nothing is the same request whatever its OnInvalid;
// else the hex SHA-256 of key, a NUL byte and each skipped target's idx,
// outcome, error and hint, each string length-prefixed. A resubmit reuses
// the job only when its targets are refused alike, so that the refusals a
// submit answers with are always the job's.
func withSkipped(key string, skipped []Refusal) string {
	if len(skipped) == 0 {
		return key
	}
	var b strings.Builder
	b.WriteString(key)
	b.WriteString("\x00skipped\x00")
	put := func(s string) { fmt.Fprintf(&b, "%d:%s", len(s), s) }
	for _, rf := range skipped {
		fmt.Fprintf(&b, "%d,", rf.Idx)
		put(string(rf.Outcome))
		put(rf.Error)
		put(rf.Hint)
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])
}

// skippedOf returns the refusals of j's skipped targets, from targets (the
// job's, in idx order); nil when it has none.
func skippedOf(j batchdriver.Job, targets []batchdriver.TargetRecord) []Refusal {
	var out []Refusal
	for _, idx := range j.Skipped {
		if idx >= 0 && idx < len(targets) && targets[idx].Idx == idx {
			t := targets[idx]
			out = append(out, Refusal{Idx: idx, Outcome: t.Outcome, Error: t.Error, Hint: t.Hint})
		}
	}
	return out
}

// isSkipped reports whether target idx of j was skipped at submit.
func isSkipped(j batchdriver.Job, idx int) bool {
	_, ok := slices.BinarySearch(j.Skipped, idx)
	return ok
}

// pendingAfter counts j's targets after idx that its submit did not skip:
// the targets a drain at idx has yet to start.
func pendingAfter(j batchdriver.Job, idx int) int {
	n := j.TargetsTotal - idx - 1
	for _, s := range j.Skipped {
		if s > idx {
			n--
		}
	}
	return n
}
