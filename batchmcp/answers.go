package batchmcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/siftfetch/batchkit/batch"
)

// envelopeSlack is the room an answer leaves under Config.MaxAnswerBytes
// for what the SDK adds around the result (resultType, the JSON-RPC
// envelope).
const envelopeSlack = 256

// answer is a tool result with structured output out, its JSON as the
// text, and links after it.
func (h *Handler) answer(out any, links []mcp.Content) (*mcp.CallToolResult, error) {
	text, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	return &mcp.CallToolResult{
		Content:           append([]mcp.Content{&mcp.TextContent{Text: string(text)}}, links...),
		StructuredContent: json.RawMessage(text),
	}, nil
}

// fits reports whether v encodes within the answer budget, less reserve
// bytes for what the answer wraps around v.
func (h *Handler) fits(v any, reserve int) (bool, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return false, err
	}
	return len(b) <= h.cfg.MaxAnswerBytes-envelopeSlack-reserve, nil
}

// StatusOutput is batch_status's structured output, and the result a
// finished task carries.
type StatusOutput struct {
	JobID        string          `json:"job_id"`
	Status       batch.JobStatus `json:"status"`
	Error        string          `json:"error,omitempty"`
	TargetsTotal int             `json:"targets_total"`
	TargetsDone  int             `json:"targets_done"`
	// Message says the same in words: "7 of 20 targets finished".
	Message   string    `json:"message"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// Deadline is when the job ends with what it has, if it has one.
	Deadline *time.Time `json:"deadline,omitempty"`
	// HandedOn counts the times the job was handed on: queued again, under
	// its id, because the runner draining it stopped.
	HandedOn int `json:"handed_on"`
	// Metadata is the job's metadata, if it has any.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Outcomes counts the finished targets by outcome, over the whole
	// job whatever failed_only chose.
	Outcomes map[batch.Outcome]int `json:"outcomes,omitempty"`
	Targets  []TargetOutput        `json:"targets"`
	// NextIdx, when set, is the idx of the first target the answer had no
	// room for: ask again with from_idx set to it.
	NextIdx *int `json:"next_idx,omitempty"`
}

// TargetOutput is one target in a [StatusOutput].
type TargetOutput struct {
	Idx int    `json:"idx"`
	URL string `json:"url"`
	// CustomID is the caller's id of the target, if it has one.
	CustomID string             `json:"custom_id,omitempty"`
	Status   batch.TargetStatus `json:"status"`
	// Attempts counts the fetches of the target that may have reached its
	// upstream: 1, more only when the host repeats interrupted fetches; 0
	// for a target its submit skipped (on_invalid "skip").
	Attempts  int           `json:"attempts"`
	Outcome   batch.Outcome `json:"outcome,omitempty"`
	Retryable *bool         `json:"retryable,omitempty"`
	Error     string        `json:"error,omitempty"`
	Hint      string        `json:"hint,omitempty"`
	// Resource is the URI of the target's content, once it is done.
	Resource string `json:"resource,omitempty"`
}

var statusSchema = object(map[string]any{
	"job_id":        map[string]any{"type": "string"},
	"status":        map[string]any{"type": "string", "enum": []string{"queued", "running", "done", "partial", "failed", "cancelled"}},
	"error":         map[string]any{"type": "string"},
	"targets_total": map[string]any{"type": "integer"},
	"targets_done":  map[string]any{"type": "integer"},
	"message":       map[string]any{"type": "string"},
	"created_at":    map[string]any{"type": "string", "format": "date-time"},
	"expires_at":    map[string]any{"type": "string", "format": "date-time"},
	"deadline":      map[string]any{"type": "string", "format": "date-time"},
	"handed_on":     map[string]any{"type": "integer", "minimum": 0},
	"metadata":      map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}},
	"outcomes":      map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "integer"}},
	"next_idx":      map[string]any{"type": "integer"},
	"targets": map[string]any{"type": "array", "items": object(targetProps(map[string]any{
		"resource": map[string]any{"type": "string"},
	}), "idx", "url", "status", "attempts")},
}, "job_id", "status", "targets_total", "targets_done", "message", "created_at", "expires_at", "handed_on", "targets")

// targetProps are the properties of a target in an output schema, the
// ones every answer about a target has and extra.
func targetProps(extra map[string]any) map[string]any {
	props := map[string]any{
		"idx":       map[string]any{"type": "integer"},
		"url":       map[string]any{"type": "string"},
		"status":    map[string]any{"type": "string", "enum": []string{"pending", "running", "done", "failed"}},
		"attempts":  map[string]any{"type": "integer", "minimum": 0},
		"outcome":   map[string]any{"type": "string"},
		"retryable": map[string]any{"type": "boolean"},
		"error":     map[string]any{"type": "string"},
		"hint":      map[string]any{"type": "string"},
		"custom_id": map[string]any{"type": "string"},
	}
	maps.Copy(props, extra)
	return props
}

// progress is a job's progress in words, a task's status message.
func progress(info batch.JobInfo) string {
	switch info.Status {
	case batch.JobQueued:
		return fmt.Sprintf("queued: 0 of %d targets finished", info.TargetsTotal)
	case batch.JobRunning:
		return fmt.Sprintf("running: %d of %d targets finished", info.TargetsDone, info.TargetsTotal)
	}
	return fmt.Sprintf("%s: %d of %d targets finished", info.Status, info.TargetsDone, info.TargetsTotal)
}

// statusResult is the tool result of info's status from target from on:
// as many targets as the answer budget holds, with a resource link for
// each done one, and NextIdx where the answer stops short.
func (h *Handler) statusResult(info batch.JobInfo, from, reserve int) (*mcp.CallToolResult, error) {
	return h.statusResultOf(info, from, reserve, false)
}

// statusResultOf is statusResult, listing the failed targets only when
// failedOnly is set.
func (h *Handler) statusResultOf(info batch.JobInfo, from, reserve int, failedOnly bool) (*mcp.CallToolResult, error) {
	out := StatusOutput{
		JobID: info.ID, Status: info.Status, Error: info.Error,
		TargetsTotal: info.TargetsTotal, TargetsDone: info.TargetsDone, Message: progress(info),
		CreatedAt: wireTime(info.CreatedAt), ExpiresAt: wireTime(info.ExpiresAt), HandedOn: info.HandedOn,
		Metadata: info.Metadata, Targets: []TargetOutput{},
	}
	if len(info.Outcomes) > 0 {
		out.Outcomes = info.Outcomes
	}
	if !info.Deadline.IsZero() {
		d := wireTime(info.Deadline)
		out.Deadline = &d
	}
	var all []TargetOutput
	var links []mcp.Content
	for _, t := range info.Targets {
		if t.Idx < from || failedOnly && t.Status != batch.TargetFailed {
			continue
		}
		to := TargetOutput{Idx: t.Idx, URL: t.URL, CustomID: t.CustomID, Status: t.Status, Attempts: t.Attempts, Error: t.Error, Hint: t.Hint}
		to.Outcome, to.Retryable = outcome(t)
		if t.Status == batch.TargetDone {
			to.Resource = resourceURI(info.ID, t.Idx, 0)
		}
		all = append(all, to)
	}
	build := func(n int) (*mcp.CallToolResult, error) {
		o := out
		o.Targets = append(o.Targets, all[:n]...)
		if n < len(all) {
			o.NextIdx = &all[n].Idx
		}
		links = links[:0]
		for _, t := range all[:n] {
			if t.Resource != "" {
				links = append(links, &mcp.ResourceLink{
					URI: t.Resource, Name: "target " + strconv.Itoa(t.Idx), MIMEType: "text/plain",
					Description: "The content fetched for target " + strconv.Itoa(t.Idx) + ", paged with ?offset=",
				})
			}
		}
		return h.answer(o, append([]mcp.Content(nil), links...))
	}
	// The most targets that fit: fitting is monotone in n.
	var ferr error
	n := sort.Search(len(all)+1, func(n int) bool {
		if n == 0 {
			return false
		}
		res, err := build(n)
		if err != nil {
			ferr = err
			return true
		}
		ok, err := h.fits(res, reserve)
		if err != nil {
			ferr = err
			return true
		}
		return !ok
	}) - 1
	if ferr != nil {
		return nil, ferr
	}
	if n <= 0 && len(all) > 0 {
		// Not even one target fits: its URL (which only a host's
		// pre-check bounds) or its error is too long. Clipped, it does,
		// so that paging with next_idx always moves on.
		all[0].URL, all[0].Error, all[0].Hint = clip(all[0].URL), clip(all[0].Error), clip(all[0].Hint)
		n = 1
	}
	return build(max(n, 0))
}

// clipBytes is how much of a long URL or error an answer with no room
// for it keeps.
const clipBytes = 512

// clip shortens s to clipBytes, on a character boundary, marking the cut
// with "…".
func clip(s string) string {
	if len(s) <= clipBytes {
		return s
	}
	end := clipBytes
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + "…"
}

// ResultOutput is batch_result's structured output: one page of one
// target's content.
type ResultOutput struct {
	JobID string `json:"job_id"`
	Idx   int    `json:"idx"`
	URL   string `json:"url"`
	// CustomID is the caller's id of the target, if it has one.
	CustomID string             `json:"custom_id,omitempty"`
	Status   batch.TargetStatus `json:"status"`
	// Attempts counts the fetches of the target that may have reached its
	// upstream: 1, more only when the host repeats interrupted fetches; 0
	// for a target its submit skipped (on_invalid "skip").
	Attempts  int           `json:"attempts"`
	Outcome   batch.Outcome `json:"outcome,omitempty"`
	Retryable *bool         `json:"retryable,omitempty"`
	Error     string        `json:"error,omitempty"`
	Hint      string        `json:"hint,omitempty"`
	// Meta is what the fetcher returned beside the content; only on the
	// first page.
	Meta map[string]any `json:"meta,omitempty"`
	// Content is the page: the content's bytes from Offset on.
	Content    string `json:"content"`
	Offset     int    `json:"offset"`
	TotalBytes int    `json:"total_bytes"`
	// NextOffset is where the next page starts, while content remains.
	NextOffset *int `json:"next_offset,omitempty"`
}

var resultSchema = object(targetProps(map[string]any{
	"job_id":      map[string]any{"type": "string"},
	"meta":        map[string]any{"type": "object"},
	"content":     map[string]any{"type": "string"},
	"offset":      map[string]any{"type": "integer"},
	"total_bytes": map[string]any{"type": "integer"},
	"next_offset": map[string]any{"type": "integer"},
}), "job_id", "idx", "url", "status", "content", "offset", "total_bytes")

// page is one page of a target's content.
type page struct {
	tr      batch.TargetResult
	meta    map[string]any
	content string // the whole content
	offset  int
}

// newPage decodes tr's result and checks offset against it.
func newPage(tr batch.TargetResult, offset int) (page, error) {
	p := page{tr: tr, offset: offset}
	if tr.Status == batch.TargetDone && len(tr.Result) > 0 {
		res, err := batch.DecodeEnvelope(tr.Result)
		if err != nil {
			return page{}, err
		}
		p.content, p.meta = res.Content, res.Meta
	}
	if offset > len(p.content) {
		return page{}, invalidArgs("offset: %d is past the content's end (%d bytes)", offset, len(p.content))
	}
	if offset < len(p.content) && !utf8.RuneStart(p.content[offset]) {
		return page{}, invalidArgs("offset: %d is inside a character; use a next_offset", offset)
	}
	return p, nil
}

// cut returns the page's content of at most n bytes, ending on a
// character boundary, and where the next page starts (-1: none).
func (p page) cut(n int) (string, int) {
	rest := p.content[p.offset:]
	if n >= len(rest) {
		return rest, -1
	}
	end := n
	for end > 0 && !utf8.RuneStart(rest[end]) {
		end--
	}
	if end == 0 { // n is shorter than the first character: take it whole
		_, size := utf8.DecodeRuneInString(rest)
		end = size
	}
	if end >= len(rest) {
		return rest, -1
	}
	return rest[:end], p.offset + end
}

// fit returns the largest page of at most limit bytes whose encoding by
// build fits the answer budget (always at least one character).
func fit[T any](p page, limit int, h *Handler, build func(content string, next int) (T, error)) (T, error) {
	limit = max(limit, 1)
	var zero T
	lo, hi := 1, min(limit, len(p.content)-p.offset)
	if hi <= 0 { // empty content or offset at its end
		return build("", -1)
	}
	best := -1
	for lo <= hi {
		mid := lo + (hi-lo)/2
		content, next := p.cut(mid)
		v, err := build(content, next)
		if err != nil {
			return zero, err
		}
		ok, err := h.fits(v, 0)
		if err != nil {
			return zero, err
		}
		if ok {
			best = mid
			lo = mid + 1
		} else {
			hi = mid - 1
		}
	}
	content, next := p.cut(max(best, 1))
	return build(content, next)
}

// resultAnswer is the tool result of one page of tr's content from
// offset, at most limit bytes of it.
func (h *Handler) resultAnswer(tr batch.TargetResult, offset, limit int) (*mcp.CallToolResult, error) {
	p, err := newPage(tr, offset)
	if err != nil {
		return nil, err
	}
	base := ResultOutput{
		JobID: tr.JobID, Idx: tr.Idx, URL: tr.URL, CustomID: tr.CustomID, Status: tr.Status, Attempts: tr.Attempts, Error: tr.Error, Hint: tr.Hint,
		Offset: offset, TotalBytes: len(p.content),
	}
	base.Outcome, base.Retryable = outcome(tr.TargetInfo)
	if offset == 0 {
		base.Meta = p.meta
		if ok, err := h.fits(base, 0); err != nil {
			return nil, err
		} else if !ok {
			base.Meta = nil // too big to carry with any content
		}
	}
	if ok, err := h.fits(base, 0); err != nil {
		return nil, err
	} else if !ok {
		base.URL, base.Error, base.Hint = clip(base.URL), clip(base.Error), clip(base.Hint)
	}
	return fit(p, limit, h, func(content string, next int) (*mcp.CallToolResult, error) {
		o := base
		o.Content = content
		if next >= 0 {
			o.NextOffset = &next
		}
		return h.answer(o, nil)
	})
}

// outcome returns t's outcome and whether a retry may help, as the HTTP
// API answers them: none while t is pending or running, else its outcome
// folded into the fixed set (none stored reads "ok" when done).
func outcome(t batch.TargetInfo) (batch.Outcome, *bool) {
	if !t.Status.Finished() {
		return "", nil
	}
	o := t.Outcome
	if o == "" && t.Status == batch.TargetDone {
		o = batch.OutcomeOK
	}
	o = o.Fold()
	retryable := o.Retryable()
	return o, &retryable
}

// wireTime is t as the HTTP API writes it: UTC, to the second.
func wireTime(t time.Time) time.Time { return t.UTC().Truncate(time.Second) }

func isNotFound(err error) bool { return errors.Is(err, batch.ErrNotFound) }
func isFinished(err error) bool { return errors.Is(err, batch.ErrFinished) }
