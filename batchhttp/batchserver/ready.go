package batchserver

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/siftfetch/batchkit/batchhttp"
)

// Readier is what [ReadyHandler] asks whether the service can serve; a
// *batch.Runner is one.
type Readier interface {
	Ready(ctx context.Context) error
}

// ReadyTimeout bounds the check behind [ReadyHandler]: a store that does
// not answer within it is not ready.
const ReadyTimeout = time.Second

// ReadyHandler answers a readiness probe (the example daemon's GET
// /readyz): 200 {"ok":true} while r can serve, and 503 with Retry-After: 5
// and the error shape (code "unavailable") while it cannot — a runner not
// started or closing, or a store that is closed, locked or unreachable —
// so that a load balancer sends agents elsewhere. The check is bounded by
// [ReadyTimeout] and by the request's context. It needs no key and says
// nothing of why (the logs do).
func ReadyHandler(r Readier) http.Handler {
	return batchhttp.WithRequestID(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), ReadyTimeout)
		defer cancel()
		if err := r.Ready(ctx); err != nil {
			w.Header().Set("Retry-After", "5")
			batchhttp.WriteError(w, http.StatusServiceUnavailable, batchhttp.CodeUnavailable, "not ready", "")
			return
		}
		writeOK(w)
	}))
}

// HealthHandler answers a liveness probe (the example daemon's GET
// /healthz) with 200 {"ok":true}: the process answers. Unlike
// [ReadyHandler] it asks nothing of the runner or the store, so that a
// store outage does not get the process restarted.
func HealthHandler() http.Handler {
	return batchhttp.WithRequestID(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		writeOK(w)
	}))
}

var okBody = []byte(`{"ok":true}` + "\n")

// writeOK answers 200 {"ok":true} with the headers of the API's JSON
// answers.
func writeOK(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(okBody)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(okBody)
}
