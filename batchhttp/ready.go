package batchhttp

import (
	"context"
	"net/http"
	"time"
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
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		requestID(w, req)
		ctx, cancel := context.WithTimeout(req.Context(), ReadyTimeout)
		defer cancel()
		if err := r.Ready(ctx); err != nil {
			w.Header().Set("Retry-After", "5")
			WriteError(w, http.StatusServiceUnavailable, CodeUnavailable, "not ready", "")
			return
		}
		writeBody(w, http.StatusOK, okBody)
	})
}

// HealthHandler answers a liveness probe (the example daemon's GET
// /healthz) with 200 {"ok":true}: the process answers. Unlike
// [ReadyHandler] it asks nothing of the runner or the store, so that a
// store outage does not get the process restarted.
func HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		requestID(w, req)
		writeBody(w, http.StatusOK, okBody)
	})
}

var okBody = []byte(`{"ok":true}` + "\n")
