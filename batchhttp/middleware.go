package batchhttp

import (
	"bufio"
	"net"
	"net/http"
)

// CloseRefused wraps h so that a client cannot hold its connection with a
// body it never sends. A 401 or 403 answer, and any answer (whatever its
// status) to a request whose body was not read to its end, goes out at
// once with Connection: close, and the connection closes a quarter of a
// second later rather than at the server's read timeout.
//
// The [Handler]'s routes and [Instrument] do this for their own answers.
// A refusal written before them, by a host's auth middleware in front of
// the API say, needs CloseRefused around the whole: batchserver.Serve wraps its
// Handler in it, and a host that runs its own [http.Server] wraps its
// handler itself. Handlers behind it still reach the server's writer
// through [http.ResponseController], [http.Flusher] and [http.Hijacker].
func CloseRefused(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := newStatusWriter(w, r)
		defer sw.done()
		h.ServeHTTP(sw, r)
	})
}

// FlushError flushes the server's writer, as [http.ResponseController]
// does; a flush sends the headers, so it counts as a 200 written.
func (w *statusWriter) FlushError() error {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
		w.closeUnread(http.StatusOK)
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Flush makes a statusWriter an [http.Flusher], for handlers that assert
// one rather than use [http.ResponseController].
func (w *statusWriter) Flush() { _ = w.FlushError() }

// Hijack makes a statusWriter an [http.Hijacker]; it fails as the
// server's writer does if that cannot be hijacked.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.hijacked = true // the connection is the handler's now
	}
	return c, rw, err
}
