package batchhttp

import (
	"crypto/rand"
	"net/http"
)

// RequestIDHeader is the header that names a request: the [Handler] takes
// it from the request when it is well formed (see [ValidRequestID]) and
// makes one up otherwise, sets it on the answer, logs it as "request_id"
// and puts it in every error body.
const RequestIDHeader = "X-Request-Id"

// maxRequestID bounds the length of a request id taken from a request.
const maxRequestID = 64

// ValidRequestID reports whether id may be taken from a request as its
// request id: 1 to 64 characters from A-Z, a-z, 0-9, '.', '_' and '-'. The
// set leaves no room for a URL, a space or a control character in a log
// line.
func ValidRequestID(id string) bool {
	if id == "" || len(id) > maxRequestID {
		return false
	}
	for i := range len(id) {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// requestID returns the request id of r: the one already set on w (by
// [WithRequestID] in front of the handler), the request's own when it is
// valid, or a new random one. It sets it on w.
func requestID(w http.ResponseWriter, r *http.Request) string {
	if id := w.Header().Get(RequestIDHeader); id != "" {
		return id
	}
	id := r.Header.Get(RequestIDHeader)
	if len(r.Header.Values(RequestIDHeader)) != 1 || !ValidRequestID(id) {
		id = rand.Text()
	}
	w.Header().Set(RequestIDHeader, id)
	return id
}

// WithRequestID returns next with the request id of [Handler] set on every
// answer, so that a host's other routes (health, metrics) carry one too.
// next can read it from the answer's headers:
// w.Header().Get(RequestIDHeader). A [Handler] behind it uses the same id.
func WithRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requestID(w, r)
		next.ServeHTTP(w, r)
	})
}
