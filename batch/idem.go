package batch

import (
	"crypto/sha256"
	"encoding/hex"
)

// canonicalTargets returns the canonical JSON form of a target list: a
// JSON array with one object per target, in submit order, each with "url"
// and then every declared option in order, absent ones as "", false or
// null (see [OptionSet]). Strings are taken verbatim (no trimming, no URL
// normalisation). Two submits whose targets decode equal therefore have
// the same canonical form, however their JSON was spelled.
func (r *Runner) canonicalTargets(targets []Target) []byte {
	b := []byte{'['}
	for i, t := range targets {
		if i > 0 {
			b = append(b, ',')
		}
		b = r.cfg.Options.canonical(b, t)
	}
	return append(b, ']')
}

// idemKey is the idempotency key of a submit: the hex SHA-256 of the
// caller name, a NUL byte and the canonical target list, and, with a
// webhook, a NUL byte and the webhook URL verbatim. It identifies the
// request, not the caller's class or restriction. The webhook is part of
// the request: the same list submitted with another webhook (or none) is
// another job, so that no submit silently loses the webhook it asked for.
// The runner computes it once and hands it to the store.
func (r *Runner) idemKey(callerName string, targets []Target, webhookURL string) string {
	h := sha256.New()
	h.Write([]byte(callerName))
	h.Write([]byte{0})
	h.Write(r.canonicalTargets(targets))
	if webhookURL != "" {
		h.Write([]byte{0})
		h.Write([]byte(webhookURL))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// retryKey is the idempotency key of a retry of job id: that of a submit of
// the same targets, set apart by the retried job, so that a retry reuses
// only an earlier retry of the same job and never an unrelated submit.
func (r *Runner) retryKey(callerName, id string, targets []Target) string {
	h := sha256.New()
	h.Write([]byte(r.idemKey(callerName, targets, "")))
	h.Write([]byte("\x00retry of\x00"))
	h.Write([]byte(id))
	return hex.EncodeToString(h.Sum(nil))
}
