package batchhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
)

// This file records every answer the tests get from a Handler (or from
// OpenAPIHandler), and every webhook delivery they receive, for the module
// batchhttp/openapitest, which holds each against openapi.json with
// kin-openapi (a library this module does not require). With
// BATCHKIT_OPENAPI_ANSWERS naming a file, serve and serveRequest record the
// answers they get, checked records the answers of a handler that an
// httptest.Server serves, and checkWebhookDelivery records a delivery; one
// JSON line each. Without it they record nothing. openapitest's
// TestAnswers runs this package's tests with it set: an answer that the
// document does not describe fails there, naming the test that got it.

// answersEnv names the file the answers are recorded to.
const answersEnv = "BATCHKIT_OPENAPI_ANSWERS"

// recorded is one answer or delivery a test got, as batchhttp/openapitest
// reads it.
type recorded struct {
	Test string `json:"test"`
	Kind string `json:"kind"` // "answer", or "webhook" (a delivery: Header and Body)
	// The request, for an answer.
	Method string      `json:"method,omitempty"`
	URL    recordedURL `json:"url"`
	Host   string      `json:"host,omitempty"`
	// The answer.
	Status  int         `json:"status,omitempty"`
	Header  http.Header `json:"header"`  // as sent, before the body
	Trailer http.Header `json:"trailer"` // a stream's
	Body    []byte      `json:"body"`
	// Partial: the client went away during the answer (a write failed,
	// or it left during a stream), so only the complete lines of a stream
	// are checked.
	Partial bool `json:"partial,omitempty"`
}

// recordedURL is a request's URL, field for field.
type recordedURL struct {
	Scheme   string `json:"scheme,omitempty"`
	Opaque   string `json:"opaque,omitempty"`
	Host     string `json:"host,omitempty"`
	Path     string `json:"path,omitempty"`
	RawPath  string `json:"raw_path,omitempty"`
	RawQuery string `json:"raw_query,omitempty"`
}

// answers is the file the answers go to, opened on the first.
var answers struct {
	sync.Mutex
	f   *os.File
	err error
}

// record appends r, got by t, to the file answersEnv names, if it names
// one.
func record(t testing.TB, r recorded) {
	t.Helper()
	path := os.Getenv(answersEnv)
	if path == "" {
		return
	}
	r.Test = t.Name()
	b, err := json.Marshal(r)
	if err != nil {
		t.Errorf("record the answer: %v", err)
		return
	}
	answers.Lock()
	defer answers.Unlock()
	if answers.f == nil && answers.err == nil {
		answers.f, answers.err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	}
	if answers.err == nil {
		_, err = answers.f.Write(append(b, '\n'))
	}
	if err := errors.Join(answers.err, err); err != nil {
		t.Errorf("record the answer: %v", err)
	}
}

// recordAnswer records the answer req got.
func recordAnswer(t testing.TB, req *http.Request, r recorded) {
	t.Helper()
	r.Kind = "answer"
	r.Method, r.Host = req.Method, req.Host
	u := req.URL
	r.URL = recordedURL{Scheme: u.Scheme, Opaque: u.Opaque, Host: u.Host, Path: u.Path, RawPath: u.RawPath, RawQuery: u.RawQuery}
	record(t, r)
}

// serveRequest serves req with h, records the answer (see record) and
// returns it.
func serveRequest(t testing.TB, h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	checkRecorded(t, req, rec)
	return rec
}

// checkRecorded records the answer rec recorded for req, unless the
// client went away before any answer.
func checkRecorded(t testing.TB, req *http.Request, rec *httptest.ResponseRecorder) {
	t.Helper()
	if req.Context().Err() != nil && rec.Header().Get("Content-Type") == "" && rec.Body.Len() == 0 {
		return // the client left before the answer
	}
	resp := rec.Result()
	body := rec.Body.Bytes()
	if req.Method == http.MethodHead {
		body = nil // a recorder keeps what a server drops
	}
	recordAnswer(t, req, recorded{Status: resp.StatusCode, Header: resp.Header, Trailer: resp.Trailer, Body: body})
}

// checked returns h with every answer recorded, for an httptest.Server.
// An answer cut short by a panic (http.ErrAbortHandler) is not recorded;
// one its client left during is recorded as partial (see recorded).
func checked(t testing.TB, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &checkWriter{ResponseWriter: w}
		h.ServeHTTP(cw, r) // a panic skips the record: the answer was cut short
		gone := r.Context().Err() != nil
		switch {
		case cw.status == 0 && gone:
			// the client left before the answer
		case cw.status == 0:
			t.Errorf("%s %s: the handler wrote no answer", r.Method, r.URL)
		default:
			ct, _, _ := mime.ParseMediaType(cw.header.Get("Content-Type"))
			recordAnswer(t, r, recorded{Status: cw.status, Header: cw.header, Trailer: trailers(w.Header(), cw.header),
				Body: cw.body.Bytes(), Partial: cw.cut || gone && ct == NDJSONType})
		}
	})
}

// checkedServer serves h, checked, on a loopback server closed at the end
// of the test.
func checkedServer(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(checked(t, h))
	t.Cleanup(srv.Close)
	return srv
}

// checkWriter records an answer as it passes to the client.
type checkWriter struct {
	http.ResponseWriter
	status int
	header http.Header // a copy, when the header was written
	body   bytes.Buffer
	cut    bool // a write failed: the client has gone
}

func (w *checkWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status, w.header = code, w.Header().Clone()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *checkWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(p)
	if err != nil {
		w.cut = true
	}
	w.body.Write(p[:n])
	return n, err
}

// Unwrap lets http.ResponseController reach the server's writer (to flush
// a stream, or set a read deadline).
func (w *checkWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// trailers returns the trailers the final header map holds: the values of
// the keys that the sent header announced in Trailer.
func trailers(final, sent http.Header) http.Header {
	out := http.Header{}
	for _, v := range sent.Values("Trailer") {
		for k := range strings.SplitSeq(v, ",") {
			k = http.CanonicalHeaderKey(strings.TrimSpace(k))
			if vv := final.Values(k); len(vv) > 0 {
				out[k] = vv
			}
		}
	}
	return out
}

// checkWebhookDelivery records a real delivery, to be held against the
// document's batchFinished webhook: its headers and its body.
func checkWebhookDelivery(t *testing.T, d delivery) {
	t.Helper()
	record(t, recorded{Kind: "webhook", Header: d.header, Body: d.body})
}
