package batchhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/siftfetch/batchkit/batch"
)

// NDJSONType is the Content-Type of the results stream.
const NDJSONType = "application/x-ndjson"

// StatusTrailer is the trailer that ends a results stream: the job's status
// when the stream ended. A stream that ends while the job is still queued
// or running (a follow that reached its cap of [batch.MaxWait]) is resumed
// with ?after=<the last idx received>. A cancelled job's target in flight
// at the cancel is still to come: a followed stream waits for it, and a
// stream that ends before it is stored says "running".
const StatusTrailer = "X-Batch-Status"

// results serves GET /v1/batch/{id}/results: one NDJSON line per finished
// target, in idx order, each a [TargetStatus] with its result. With
// ?follow=1 the stream stays open and writes each target as it finishes,
// until the job ends or [batch.MaxWait] has passed; ?after=N starts after
// target N; ?status=failed writes the failed targets only. The answer holds one result in memory at a time, whatever the
// job's size.
func (h *Handler) results(w http.ResponseWriter, r *http.Request, req *request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	follow, err := boolParam(q, "follow")
	if err != nil {
		return err
	}
	failedOnly, err := failedParam(q)
	if err != nil {
		return err
	}
	next := 0
	if s, ok, err := param(q, "after"); err != nil {
		return err
	} else if ok {
		n, ok := parseUint(s)
		if !ok {
			return invalidRequest("after must be a target index")
		}
		next = n + 1
	}
	id := r.PathValue("id")
	if !validID(id) {
		return notFound
	}
	req.jobID = id
	if err := h.streams.acquire(req.caller.Name); err != nil {
		return err
	}
	defer h.streams.release(req.caller.Name)
	// Targets without results: each result is read on its own, below. The
	// read bumps the lease (an owner read).
	info, err := h.runner.Status(r.Context(), req.caller, id, batch.StatusOptions{Touch: true})
	if err != nil {
		return err
	}
	req.targets, req.jobStatus = info.TargetsTotal, info.Status

	hd := w.Header()
	hd.Set("Content-Type", NDJSONType)
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Trailer", StatusTrailer)
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	deadline := time.Now().Add(batch.MaxWait)
	for {
		final := settled(info)
		for ; next < len(info.Targets); next++ {
			t := info.Targets[next]
			if !t.Status.Finished() {
				if follow && !final {
					break // wait for it
				}
				continue // it will never finish, or the caller does not wait
			}
			if failedOnly && t.Status != batch.TargetFailed {
				continue
			}
			if !h.writeLine(w, r.Context(), req.caller, id, t) {
				return nil
			}
			_ = rc.Flush()
		}
		left := time.Until(deadline)
		if !follow || final || left <= 0 {
			break
		}
		done := info.TargetsDone
		info, err = h.runner.Wait(r.Context(), req.caller, id, batch.WaitOptions{Timeout: left, Since: &done})
		if err != nil {
			if r.Context().Err() != nil {
				return nil // the client is gone
			}
			// Swept or evicted mid-stream, or a store failure: the header
			// is out, so the answer can only be cut short.
			panic(http.ErrAbortHandler)
		}
		req.jobStatus = info.Status
	}
	status := info.Status
	if !settled(info) && !status.Live() {
		status = batch.JobRunning // its last target is still in flight: resume
	}
	hd.Set(StatusTrailer, string(status))
	return nil
}

// settled reports whether nothing in the job will change any more: it is
// finished, and no target is in flight (a cancelled job's last target
// finishes and is stored after the cancel).
func settled(info batch.JobInfo) bool {
	if info.Status.Live() {
		return false
	}
	for _, t := range info.Targets {
		if t.Status == batch.TargetRunning {
			return false
		}
	}
	return true
}

// writeLine writes finished target t as one line, with its result read on
// its own. It reports false when the stream must stop (the client is gone).
func (h *Handler) writeLine(w http.ResponseWriter, ctx context.Context, caller batch.Caller, id string, t batch.TargetInfo) bool {
	if t.Status == batch.TargetDone {
		tr, err := h.runner.Result(ctx, caller, id, t.Idx)
		if err != nil {
			if ctx.Err() != nil {
				return false
			}
			panic(http.ErrAbortHandler) // as in results
		}
		t = tr.TargetInfo
	}
	// An error is the client gone; the stream then ends, without its
	// trailer, which is how a client sees a stream cut short.
	return writeTarget(w, nil, targetStatus(t), "\n") == nil
}

// writeTarget writes prefix, then ts as one JSON object, then suffix. The
// result is written as stored, straight from ts.Result, and not copied
// into an encoder's buffer: a line as large as its result would otherwise
// hold it twice, and an answer holds one result at a time, once. A stored
// result that is not compact JSON (no store of ours
// writes one) is compacted into a copy first.
func writeTarget(w io.Writer, prefix []byte, ts TargetStatus, suffix string) error {
	raw := ts.Result
	ts.Result = nil
	head, err := marshal(ts) // {…}\n, "result" being its last field
	if err != nil {
		return err
	}
	buf := append(prefix, bytes.TrimSuffix(head, []byte("}\n"))...)
	if len(raw) > 0 {
		if !json.Valid(raw) {
			return errors.New("batchhttp: stored result is not JSON")
		}
		if bytes.ContainsAny(raw, " \t\r\n") {
			var c bytes.Buffer
			if err := json.Compact(&c, raw); err != nil {
				return err
			}
			raw = c.Bytes()
		}
		if _, err := w.Write(append(buf, `,"result":`...)); err != nil {
			return err
		}
		if _, err := w.Write(raw); err != nil {
			return err
		}
		buf = buf[:0]
	}
	_, err = w.Write(append(append(buf, '}'), suffix...))
	return err
}
