package batch

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// canonicalTarget fixes the field order and presence of a target in the
// canonical form: every field is always present, in this order, and context
// is null when absent.
type canonicalTarget struct {
	URL      string `json:"url"`
	Mode     string `json:"mode"`
	Question string `json:"question"`
	Pages    string `json:"pages"`
	Grep     string `json:"grep"`
	JQ       string `json:"jq"`
	Context  *bool  `json:"context"`
	Recover  bool   `json:"recover"`
}

// CanonicalTargets returns the canonical JSON form of a target list: a JSON
// array with one object per target, in submit order, each with exactly the
// keys url, mode, question, pages, grep, jq, context and recover in that
// order. Strings are taken verbatim (no trimming, no URL normalisation);
// context is null when absent, so absent and false differ; recover is always
// a boolean. Two requests that decode to equal target lists therefore have
// the same canonical form, however their JSON was spelled.
func CanonicalTargets(targets []Target) []byte {
	list := make([]canonicalTarget, len(targets))
	for i, t := range targets {
		list[i] = canonicalTarget{
			URL: t.URL, Mode: t.Mode, Question: t.Question, Pages: t.Pages,
			Grep: t.Grep, JQ: t.JQ, Context: t.Context, Recover: t.Recover,
		}
	}
	b, err := json.Marshal(list)
	if err != nil {
		// Strings and bools always encode.
		panic("batch: canonical targets: " + err.Error())
	}
	return b
}

// IdemKey returns the idempotency key of a submit without options: the hex
// SHA-256 of the caller name, a NUL byte, and [CanonicalTargets] of the
// list. It identifies the request, not the caller's class or restriction.
func IdemKey(callerName string, targets []Target) string {
	return IdemKeyWith(callerName, targets, SubmitOptions{})
}

// IdemKeyWith returns the idempotency key of a submit with options. Without
// a webhook it is [IdemKey]; with one, the hex SHA-256 of the caller name, a
// NUL byte, [CanonicalTargets] of the list, a NUL byte and the webhook URL,
// verbatim. The webhook is part of the request: the same list submitted
// again with the same webhook reuses the job, and with another webhook (or
// none) makes a new one, so that no submit silently loses the webhook it
// asked for.
func IdemKeyWith(callerName string, targets []Target, opts SubmitOptions) string {
	h := sha256.New()
	h.Write([]byte(callerName))
	h.Write([]byte{0})
	h.Write(CanonicalTargets(targets))
	if opts.WebhookURL != "" {
		h.Write([]byte{0})
		h.Write([]byte(opts.WebhookURL))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// retryKey is the idempotency key of a retry of job id: that of a submit of
// the same targets, set apart by the retried job, so that a retry reuses
// only an earlier retry of the same job and never an unrelated submit.
func retryKey(callerName, id string, targets []Target) string {
	h := sha256.New()
	h.Write([]byte(IdemKey(callerName, targets)))
	h.Write([]byte("\x00retry of\x00"))
	h.Write([]byte(id))
	return hex.EncodeToString(h.Sum(nil))
}
