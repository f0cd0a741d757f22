package batchhttp

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/siftfetch/batchkit/batch"
)

// List limits of GET /v1/batch.
const (
	DefaultListLimit = 20
	MaxListLimit     = 100
)

// submit serves POST /v1/batch.
func (h *Handler) submit(w http.ResponseWriter, r *http.Request, req *request) error {
	if err := h.submits.acquire(req.caller.Name); err != nil {
		return err // before the body is read: the refusal closes the connection
	}
	defer h.submits.release(req.caller.Name)
	raw := w
	if sw, ok := w.(*statusWriter); ok {
		raw = sw.ResponseWriter // so that MaxBytesReader can close the connection
	}
	body, err := readBody(raw, r, h.bodyTimeout)
	if err != nil {
		return err
	}
	// The decoder refuses a list over the cap as it reaches the target
	// after the cap, without decoding the rest.
	max := h.runner.TargetsPerJob()
	sub, err := decodeSubmit(body, h.runner.Options(), max)
	if err != nil {
		return err
	}
	targets := sub.Targets
	req.targets = len(targets)
	if len(targets) > max { // a cap of 0 or less: none refused while decoding
		return tooManyTargetsError(max)
	}
	opts := batch.SubmitOptions{Metadata: sub.Metadata}
	skip := sub.OnInvalid == batch.OnInvalidSkip
	if skip {
		opts.OnInvalid = batch.OnInvalidSkip
		opts.Refused = Refusals(r.Context(), req.caller, targets, h.precheck, h.check)
		if len(opts.Refused) == len(targets) { // nothing left to fetch: refused as the default refuses
			if err := h.rejectTargets(r, req, targets); err != nil {
				return err
			}
		}
	} else if err := h.rejectTargets(r, req, targets); err != nil {
		return err
	}
	if err := sub.deadlineOptions(&opts); err != nil {
		return err
	}
	if sub.Webhook != nil {
		if err := h.precheckWebhook(r, req, sub.Webhook.URL); err != nil {
			return err
		}
		opts.WebhookURL, opts.WebhookEvents = sub.Webhook.URL, sub.Webhook.Events
	}
	job, reused, err := h.runner.SubmitWith(r.Context(), req.caller, targets, opts)
	if skip && len(opts.Refused) > 0 && errors.Is(err, batch.ErrInvalidTarget) {
		// The runner refused the rest (or a custom id): the default's
		// answer names the first target the host refused, as it would.
		if rerr := h.rejectTargets(r, req, targets); rerr != nil {
			return rerr
		}
	}
	if err != nil {
		return err
	}
	req.jobID, req.reused, req.jobStatus, req.skipped = job.ID, &reused, job.Status, len(job.Skipped)
	writeJSON(w, http.StatusAccepted, SubmitResponse{
		Success: true, JobID: job.ID, Status: job.Status, Targets: len(targets), Reused: reused,
		Skipped: len(job.Skipped), SkippedTargets: skippedTargets(job.Skipped),
	})
	return nil
}

// rejectTargets runs the host's checks as a submit that rejects does: the
// pre-check on every URL, then the option check on every target, each
// refusing the submit at its first failure.
func (h *Handler) rejectTargets(r *http.Request, req *request, targets []batch.Target) error {
	if err := h.precheckAll(r, req, targets); err != nil {
		return err
	}
	return h.checkTargets(r, req, targets)
}

// Refusals runs the host's checks on every target as a lenient submit
// (on_invalid "skip") does, and returns the targets they refuse, in idx
// order, for [batch.SubmitOptions].Refused: a URL that precheck refuses
// with outcome blocked and error "blocked: <reason>", and else a target
// that check refuses with outcome invalid and error "invalid option:
// <reason>", each with its error's hint (see [batch.HintError]). A target
// with an empty URL is left to the runner, which refuses it. A nil check
// refuses nothing. The reasons are those the 422 of a submit that
// rejects would give: for the caller only, never for a log line.
func Refusals(ctx context.Context, caller batch.Caller, targets []batch.Target, precheck PrecheckFunc, check CheckTargetFunc) []batch.Refusal {
	var out []batch.Refusal
	for i, t := range targets {
		if t.URL == "" {
			continue
		}
		var rf batch.Refusal
		var err error
		if precheck != nil {
			if err = precheck(ctx, caller, t.URL); err != nil {
				rf = batch.Refusal{Idx: i, Outcome: batch.OutcomeBlocked,
					Error: "blocked: " + cmp.Or(strings.TrimPrefix(err.Error(), "blocked: "), "refused")}
			}
		}
		if err == nil && check != nil {
			if err = check(ctx, caller, t); err != nil {
				rf = batch.Refusal{Idx: i, Outcome: batch.OutcomeInvalid, Error: "invalid option: " + cmp.Or(err.Error(), "refused")}
			}
		}
		if err == nil {
			continue
		}
		if he, ok := errors.AsType[batch.HintError](err); ok {
			rf.Hint = he.Hint()
		}
		out = append(out, rf)
	}
	return out
}

// precheckAll runs the host's pre-check on every target URL, in order, and
// refuses the submit at the first failure. An empty URL is left to the
// runner, which refuses it as invalid.
func (h *Handler) precheckAll(r *http.Request, req *request, targets []batch.Target) error {
	if h.precheck == nil {
		return nil
	}
	for i, t := range targets {
		if t.URL == "" {
			continue
		}
		if err := h.precheck(r.Context(), req.caller, t.URL); err != nil {
			req.blocked = i
			return blockedAnswer(fmt.Sprintf("target %d", i), err)
		}
	}
	return nil
}

// checkTargets runs the host's option check on every target, in order,
// and refuses the submit at the first failure with 422 invalid_option. An
// empty URL is left to the runner, as in precheckAll.
func (h *Handler) checkTargets(r *http.Request, req *request, targets []batch.Target) error {
	if h.check == nil {
		return nil
	}
	for i, t := range targets {
		if t.URL == "" {
			continue
		}
		if err := h.check(r.Context(), req.caller, t); err != nil {
			req.blocked = i
			ans := &httpError{
				status: http.StatusUnprocessableEntity, code: CodeInvalidOption,
				msg: fmt.Sprintf("invalid option: target %d: %s", i, cmp.Or(err.Error(), "refused")),
			}
			if he, ok := errors.AsType[batch.HintError](err); ok {
				ans.hint = he.Hint()
			}
			return ans
		}
	}
	return nil
}

// blockedAnswer is the 422 of a URL the pre-check refused with err:
// "blocked: <what>: <reason>", the reason being err's text without a
// leading "blocked: ", and the hint err carries, if any (a
// [batch.HintError], such as how to allow a local test server). It may
// name the host, so it goes to the caller only, never to a log line.
func blockedAnswer(what string, err error) *httpError {
	reason := cmp.Or(strings.TrimPrefix(err.Error(), "blocked: "), "refused")
	ans := &httpError{status: http.StatusUnprocessableEntity, code: CodeBlocked, msg: "blocked: " + what + ": " + reason}
	if he, ok := errors.AsType[batch.HintError](err); ok {
		ans.hint = he.Hint()
	}
	return ans
}

// status serves GET /v1/batch/{id}, with ?results, ?wait and ?since.
func (h *Handler) status(w http.ResponseWriter, r *http.Request, req *request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	results, err := boolParam(q, "results")
	if err != nil {
		return err
	}
	wait, err := waitParam(q)
	if err != nil {
		return err
	}
	since, err := sinceParam(q)
	if err != nil {
		return err
	}
	failedOnly, err := failedParam(q)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	if !validID(id) {
		return notFound
	}
	req.jobID = id
	// The summary first, never with results: those are read one at a time
	// below, so that an answer holds one result in memory at a time. The
	// read bumps the lease (an owner read), writing at most once a minute.
	opts := batch.StatusOptions{Touch: true}
	if wait == 0 && !results && !failedOnly {
		return h.summary(w, r, req, id)
	}
	var info batch.JobInfo
	if wait > 0 {
		if err := h.waits.acquire(req.caller.Name); err != nil {
			return err
		}
		defer h.waits.release(req.caller.Name)
		info, err = h.runner.Wait(r.Context(), req.caller, id, batch.WaitOptions{StatusOptions: opts, Timeout: wait, Since: since})
	} else {
		info, err = h.runner.Status(r.Context(), req.caller, id, opts)
	}
	if err != nil {
		return err
	}
	req.targets, req.jobStatus = info.TargetsTotal, info.Status
	if failedOnly {
		info.Targets = failedTargets(info.Targets)
	}
	if !results {
		writeJSON(w, http.StatusOK, statusResponse(info))
		return nil
	}
	return h.writeResults(w, r, req.caller, info)
}

// failedParam reads ?status: absent for every target, "failed" for the
// failed ones only.
func failedParam(q url.Values) (bool, error) {
	s, ok, err := param(q, "status")
	if err != nil || !ok {
		return false, err
	}
	if s != string(batch.TargetFailed) {
		return false, invalidRequest("status must be failed (absent: every target)")
	}
	return true, nil
}

// failedTargets returns the failed targets of ts, in their order.
func failedTargets(ts []batch.TargetInfo) []batch.TargetInfo {
	out := []batch.TargetInfo{}
	for _, t := range ts {
		if t.Status == batch.TargetFailed {
			out = append(out, t)
		}
	}
	return out
}

// summary writes a job's status summary, from the summary cache when the
// job has not changed since it was last encoded: a poll then reads the
// job's row only.
func (h *Handler) summary(w http.ResponseWriter, r *http.Request, req *request, id string) error {
	key := cacheKey{req.caller.Name, id}
	head, err := h.runner.Status(r.Context(), req.caller, id, batch.StatusOptions{Touch: true, JobOnly: true})
	if err != nil {
		return err
	}
	req.targets, req.jobStatus = head.TargetsTotal, head.Status
	if body, ok := h.summaries.get(key, versionOf(head)); ok {
		writeBody(w, http.StatusOK, body)
		return nil
	}
	info, err := h.runner.Status(r.Context(), req.caller, id, batch.StatusOptions{})
	if err != nil {
		return err
	}
	body, err := marshal(statusResponse(info))
	if err != nil {
		return err
	}
	h.summaries.put(key, versionOf(info), body)
	req.targets, req.jobStatus = info.TargetsTotal, info.Status
	writeBody(w, http.StatusOK, body)
	return nil
}

// writeResults writes the summary of info with every done target's result,
// streamed: each result is read and written on its own. The answer is
// bounded in bytes (MaxResultsBytes) and in how many are written at once,
// in all (MaxResultsInFlight) and for one caller (MaxResultsPerCaller).
func (h *Handler) writeResults(w http.ResponseWriter, r *http.Request, caller batch.Caller, info batch.JobInfo) error {
	if info.Bytes > h.maxResultsBytes && hasDone(info.Targets) {
		return &httpError{
			status: http.StatusUnprocessableEntity, code: CodeResultsTooLarge,
			msg:  fmt.Sprintf("results too large for one answer (%d bytes, max %d)", info.Bytes, h.maxResultsBytes),
			hint: "read the results one at a time: GET /v1/batch/{id}/{idx}", routes: true,
		}
	}
	// The caller's own turn first, refused at once when it has them all:
	// its slow readers leave the other turns to other callers.
	if err := h.resultsHeld.acquire(caller.Name); err != nil {
		return err
	}
	defer h.resultsHeld.release(caller.Name)
	wait := time.NewTimer(time.Second)
	defer wait.Stop()
	select {
	case h.resultsSlots <- struct{}{}:
		defer func() { <-h.resultsSlots }()
	case <-wait.C:
		return &httpError{status: http.StatusTooManyRequests, msg: "too many result answers in flight", code: CodeResultsBusy, retryAfter: 1}
	case <-r.Context().Done():
		return context.Cause(r.Context())
	}
	resp := statusResponse(info)
	targets := resp.Targets
	resp.Targets = []TargetStatus{}
	head, err := marshal(resp) // …,"targets":[]}
	if err != nil {
		return err
	}
	setJSONHeaders(w.Header())
	w.WriteHeader(http.StatusOK)
	buf := bytes.TrimSuffix(head, []byte("]}\n")) // …,"targets":[
	for i, t := range targets {
		if t.Status == batch.TargetDone {
			tr, err := h.runner.Result(r.Context(), caller, info.ID, t.Idx)
			if err != nil {
				// Swept or evicted mid-answer, or the client left: the
				// header is out, so the answer can only be cut short.
				panic(http.ErrAbortHandler)
			}
			t.Result = envelope(tr.TargetInfo)
		}
		if i > 0 {
			buf = append(buf, ',')
		}
		if err := writeTarget(w, buf, t, ""); err != nil {
			return nil // the client is gone (or a result that is not JSON: cut short)
		}
		buf = buf[:0]
	}
	_, _ = w.Write(append(buf, "]}\n"...))
	return nil
}

// hasDone reports whether a target of ts is done: whether an answer with
// results carries any.
func hasDone(ts []batch.TargetInfo) bool {
	for _, t := range ts {
		if t.Status == batch.TargetDone {
			return true
		}
	}
	return false
}

// result serves GET /v1/batch/{id}/{idx}.
func (h *Handler) result(w http.ResponseWriter, r *http.Request, req *request) error {
	id := r.PathValue("id")
	idx, ok := parseIdx(r.PathValue("idx"))
	if !validID(id) || !ok {
		return notFound
	}
	req.jobID = id
	if err := h.touch(r, req.caller, id); err != nil {
		return err
	}
	tr, err := h.runner.Result(r.Context(), req.caller, id, idx)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, resultResponse(tr))
	return nil
}

// retry serves POST /v1/batch/{id}/retry: a new job of the finished job's
// targets that did not finish done (see [batch.Runner.Retry]), answered as
// a submit is. The request body is not read. The targets passed the
// pre-check when they were submitted, and the fetcher's connect-time guard
// holds for them again.
func (h *Handler) retry(w http.ResponseWriter, r *http.Request, req *request) error {
	id := r.PathValue("id")
	if !validID(id) {
		return notFound
	}
	req.jobID = id
	job, reused, err := h.runner.Retry(r.Context(), req.caller, id)
	if err != nil {
		return err
	}
	req.targets, req.reused, req.jobStatus = job.TargetsTotal, &reused, job.Status
	writeJSON(w, http.StatusAccepted, SubmitResponse{
		Success: true, JobID: job.ID, Status: job.Status, Targets: job.TargetsTotal, Reused: reused, RetryOf: job.RetryOf,
	})
	return nil
}

// cancel serves DELETE /v1/batch/{id}.
func (h *Handler) cancel(w http.ResponseWriter, r *http.Request, req *request) error {
	id := r.PathValue("id")
	if !validID(id) {
		return notFound
	}
	req.jobID = id
	if err := h.runner.Cancel(r.Context(), req.caller, id); err != nil {
		return err
	}
	req.jobStatus = batch.JobCancelled
	writeJSON(w, http.StatusOK, CancelResponse{Success: true, Status: batch.JobCancelled})
	return nil
}

// list serves GET /v1/batch.
func (h *Handler) list(w http.ResponseWriter, r *http.Request, req *request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	limit := DefaultListLimit
	if s, ok, err := param(q, "limit"); err != nil {
		return err
	} else if ok {
		n, ok := parseUint(s)
		if !ok || n < 1 {
			return invalidRequest("limit must be a positive integer (at most %d jobs are listed)", MaxListLimit)
		}
		limit = min(n, MaxListLimit)
	}
	meta, err := metadataParams(q)
	if err != nil {
		return err
	}
	jobs, err := h.runner.ListWith(r.Context(), req.caller, batch.ListOptions{Limit: limit, Metadata: meta})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, listResponse(jobs))
	return nil
}

// metadataParams reads a label search: every metadata.KEY=VALUE parameter,
// each key once. A job is listed when its metadata holds every pair.
func metadataParams(q url.Values) (map[string]string, error) {
	var m map[string]string
	for name, vs := range q {
		k, ok := strings.CutPrefix(name, "metadata.")
		if !ok {
			continue
		}
		switch {
		case k == "":
			return nil, invalidRequest("metadata.KEY needs a key")
		case len(vs) > 1:
			return nil, invalidRequest("a metadata key given more than once")
		}
		if m == nil {
			m = map[string]string{}
		}
		m[k] = vs[0]
	}
	if len(m) > batch.MaxMetadataPairs {
		return nil, invalidRequest("more than %d metadata pairs", batch.MaxMetadataPairs)
	}
	return m, nil
}

// touch bumps the lease of the owner's job before a read. Only "not found"
// stops the read: a lease bump that failed (a full disk, a lock wait) must
// not make results unreadable exactly when the store is in trouble.
func (h *Handler) touch(r *http.Request, caller batch.Caller, id string) error {
	err := h.runner.Touch(r.Context(), caller, id)
	if errors.Is(err, batch.ErrNotFound) {
		return err
	}
	return nil
}

// validID reports whether id could be a job id: 1 to 64 letters, digits,
// '-' or '_'. Anything else is answered with the same 404 as an unknown id,
// without asking the store.
func validID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for _, c := range []byte(id) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// parseIdx parses a target index: decimal digits only, without leading
// zeros, so that each target has one path.
func parseIdx(s string) (int, bool) {
	if len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	return parseUint(s)
}

// parseUint parses 1 to 9 decimal digits, with no sign.
func parseUint(s string) (int, bool) {
	if len(s) == 0 || len(s) > 9 {
		return 0, false
	}
	n := 0
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

func parseQuery(r *http.Request) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, invalidRequest("malformed query")
	}
	return q, nil
}

// param returns the one value of a query parameter; a repeated parameter is
// an error.
func param(q url.Values, name string) (string, bool, error) {
	v, ok := q[name]
	switch {
	case !ok:
		return "", false, nil
	case len(v) > 1:
		return "", false, invalidRequest("%s given more than once", name)
	}
	return v[0], true, nil
}

// boolParam reads a flag: absent, "0" or "false" is false; present and
// empty, "1" or "true" is true.
func boolParam(q url.Values, name string) (bool, error) {
	s, ok, err := param(q, name)
	if err != nil || !ok {
		return false, err
	}
	switch s {
	case "", "1", "true":
		return true, nil
	case "0", "false":
		return false, nil
	}
	return false, invalidRequest("%s must be 1, true, 0 or false", name)
}

// waitParam reads ?wait: a Go duration ("30s", "1m") or a number of
// seconds ("30"), capped at [batch.MaxWait]. Absent means no wait.
func waitParam(q url.Values) (time.Duration, error) {
	s, ok, err := param(q, "wait")
	if err != nil || !ok {
		return 0, err
	}
	if n, ok := parseUint(s); ok {
		return min(time.Duration(n)*time.Second, batch.MaxWait), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, invalidRequest("wait must be a duration such as 30s, or seconds (max %s)", batch.MaxWait)
	}
	return min(d, batch.MaxWait), nil
}

// sinceParam reads ?since: a non-negative count of finished targets.
func sinceParam(q url.Values) (*int, error) {
	s, ok, err := param(q, "since")
	if err != nil || !ok {
		return nil, err
	}
	n, ok := parseUint(s)
	if !ok {
		return nil, invalidRequest("since must be a non-negative integer")
	}
	return &n, nil
}
