package batchhttp

import (
	"log/slog"
	"net/http"
	"time"
)

// Instrument wraps one of a host's own routes (health, metrics, its own
// API) the way the [Handler] treats its routes: every answer carries an
// X-Request-Id (see [RequestIDHeader]), observe (if not nil) gets one
// observation with the fixed label route, and log (if not nil) gets one
// "request" line at debug level with the method, route, status, request
// id and duration — never the URL or its query. A 401 or 403 answer, and
// any answer to a request whose body was not read to its end, closes its
// connection at once, as the Handler's do and as
// [CloseRefused] does for a whole mux, so that a client cannot hold it
// with a body it never sends.
func Instrument(route string, h http.Handler, observe ObserveFunc, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := requestID(w, r)
		sw := newStatusWriter(w, r)
		h.ServeHTTP(sw, r)
		sw.done()
		status := sw.status
		if !sw.wrote {
			status = http.StatusOK // nothing written: net/http answers 200
			if r.Context().Err() != nil {
				status = statusClientGone
			}
		}
		d := time.Since(start)
		if observe != nil {
			observe(route, status, d)
		}
		if log != nil {
			log.LogAttrs(r.Context(), slog.LevelDebug, "request",
				slog.String("method", r.Method), slog.String("route", route), slog.Int("status", status),
				slog.String("request_id", id), slog.Duration("duration", d))
		}
	})
}
