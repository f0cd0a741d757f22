package batchhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"mime"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// This file checks every answer the tests get from a Handler (or from
// OpenAPIHandler) against openapi.json, with kin-openapi's openapi3filter:
// serve and serveRequest check the answers they record; checked wraps a
// handler that an httptest.Server serves, and checks a results stream's
// lines against the stream's line schema as they pass, so that memory
// holds one line at a time. An answer that the document does not describe
// fails the test that got it.

// contract is openapi.json, loaded for checking answers.
type contract struct {
	doc    *openapi3.T
	router routers.Router
	// The operations an answer is checked against when the document has
	// none for its request: a path it does not list (401 or 404), or a
	// method a path does not list (401, 404 for CONNECT, or 405).
	noPath, noMethod *openapi3.Operation
}

// What the checks saw in this run, for the report TestMain prints: how
// many answers and stream lines, and which documented answers ("GET
// /v1/batch/{id} 404") came up.
var (
	checkedAnswers, checkedLines atomic.Int64
	seenAnswers                  sync.Map // of string
)

// contractReport says what the checks saw, and which documented answers
// no test produced.
func contractReport() string {
	report := fmt.Sprintf("openapi.json: %d answers and %d stream lines checked", checkedAnswers.Load(), checkedLines.Load())
	c, err := loadContract()
	if err != nil || checkedAnswers.Load() == 0 {
		return report
	}
	var unseen []string
	for _, path := range c.doc.Paths.InMatchingOrder() {
		for method, op := range c.doc.Paths.Value(path).Operations() {
			for status := range op.Responses.Map() {
				key := method + " " + path + " " + status
				if _, ok := seenAnswers.Load(key); !ok {
					unseen = append(unseen, key)
				}
			}
		}
	}
	if len(unseen) == 0 {
		return report + "; every documented answer came up"
	}
	slices.Sort(unseen)
	return report + fmt.Sprintf("; %d documented answers no test produced:\n\t%s", len(unseen), strings.Join(unseen, "\n\t"))
}

var loadContract = sync.OnceValues(func() (*contract, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(OpenAPI(batchsift.Options))
	if err != nil {
		return nil, fmt.Errorf("load openapi.json: %w", err)
	}
	if err := doc.Validate(loader.Context, openapi3.IsOpenAPI31OrLater(), openapi3.EnableMultiError()); err != nil {
		return nil, fmt.Errorf("openapi.json is not a valid OpenAPI 3.1 document: %w", err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route openapi.json: %w", err)
	}
	c := &contract{doc: doc, router: router}
	responses := func(names map[int]string) (*openapi3.Operation, error) {
		var opts []openapi3.NewResponsesOption
		for status, name := range names {
			r := doc.Components.Responses[name]
			if r == nil {
				return nil, fmt.Errorf("openapi.json has no response %q", name)
			}
			opts = append(opts, openapi3.WithStatus(status, &openapi3.ResponseRef{Ref: "#/components/responses/" + name, Value: r.Value}))
		}
		return &openapi3.Operation{Responses: openapi3.NewResponses(opts...)}, nil
	}
	if c.noPath, err = responses(map[int]string{401: "Unauthorized", 404: "NotFound"}); err != nil {
		return nil, err
	}
	if c.noMethod, err = responses(map[int]string{401: "Unauthorized", 404: "NotFound", 405: "MethodNotAllowed"}); err != nil {
		return nil, err
	}
	return c, nil
})

func mustContract(t testing.TB) *contract {
	t.Helper()
	c, err := loadContract()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// answer is one answer as a client got it.
type answer struct {
	status  int
	header  http.Header // as sent, before the body
	trailer http.Header
	body    []byte
	// streamed: the body's lines were checked as they were written, and
	// body is nil.
	streamed bool
}

// check holds a, an answer a test got, against the document's operation
// for req and returns what does not match, or nil. It counts the answer for
// the report.
func (c *contract) check(req *http.Request, a answer) error {
	checkedAnswers.Add(1)
	if ct, _, _ := mime.ParseMediaType(a.header.Get("Content-Type")); ct == NDJSONType && !a.streamed {
		checkedLines.Add(int64(bytes.Count(a.body, []byte("\n"))))
	}
	key, err := c.verify(req, a)
	if key != "" {
		seenAnswers.Store(key, true)
	}
	return err
}

// verify holds a against the document's operation for req. It returns the
// documented answer a is ("GET /v1/batch/{id} 404"; "" when the document
// has no operation for req) and what does not match, or nil.
func (c *contract) verify(req *http.Request, a answer) (key string, err error) {
	routed, route, params, err := c.find(req)
	switch {
	case errors.Is(err, routers.ErrPathNotFound):
		route = &routers.Route{Spec: c.doc, Operation: c.noPath}
	case errors.Is(err, routers.ErrMethodNotAllowed):
		route = &routers.Route{Spec: c.doc, Operation: c.noMethod}
		if want := c.allow(routed); a.status == http.StatusMethodNotAllowed && a.header.Get("Allow") != want {
			return "", fmt.Errorf("405 with Allow %q; the document lists %q for this path", a.header.Get("Allow"), want)
		}
	case err != nil:
		return "", fmt.Errorf("find the operation: %w", err)
	default:
		key = fmt.Sprintf("%s %s %d", route.Method, route.Path, a.status)
	}
	ct, _, _ := mime.ParseMediaType(a.header.Get("Content-Type"))
	stream := ct == NDJSONType
	opts := &openapi3filter.Options{
		IncludeResponseStatus: true, // a status the operation does not list is an error
		ExcludeResponseBody:   stream || req.Method == http.MethodHead,
		MultiError:            true,
	}
	input := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: routed, PathParams: params, Route: route},
		Status:                 a.status,
		Header:                 a.header,
		Options:                opts,
	}
	input.SetBodyBytes(a.body)
	if err := openapi3filter.ValidateResponse(req.Context(), input); err != nil {
		return key, err
	}
	if !stream || req.Method == http.MethodHead {
		return key, nil
	}
	line, err := c.lineSchema(route, a.status, ct)
	if err != nil {
		return key, err
	}
	if !a.streamed {
		body := a.body
		for len(body) > 0 {
			l, rest, ok := bytes.Cut(body, []byte("\n"))
			if !ok {
				return key, fmt.Errorf("the stream ends inside a line: %.200q", l)
			}
			if err := checkLine(line, l); err != nil {
				return key, err
			}
			body = rest
		}
	}
	status := a.trailer.Get(StatusTrailer)
	if err := c.schema("JobStatus").VisitJSON(status, openapi3.EnableJSONSchema2020()); err != nil {
		return key, fmt.Errorf("trailer %s %q is not a JobStatus: %w", StatusTrailer, status, err)
	}
	return key, nil
}

// find returns the document's operation for req. A HEAD request is
// routed as the GET it stands for (kin-openapi would skip it), and its
// answer is then checked without a body.
func (c *contract) find(req *http.Request) (*http.Request, *routers.Route, map[string]string, error) {
	routed := req
	if req.Method == http.MethodHead {
		routed = req.Clone(req.Context())
		routed.Method = http.MethodGet
	}
	route, params, err := c.router.FindRoute(routed)
	return routed, route, params, err
}

// allow is the Allow header the document implies for req's path: the
// methods of its operations, and HEAD with GET, sorted.
func (c *contract) allow(req *http.Request) string {
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
		r := req.Clone(req.Context())
		r.Method = m
		route, _, err := c.router.FindRoute(r)
		if err != nil {
			continue
		}
		var methods []string
		for m := range route.PathItem.Operations() {
			methods = append(methods, m)
			if m == http.MethodGet {
				methods = append(methods, http.MethodHead)
			}
		}
		slices.Sort(methods)
		return strings.Join(methods, ", ")
	}
	return ""
}

// lineSchema is the schema of one line of a stream answer: the schema of
// its media type in the operation's response.
func (c *contract) lineSchema(route *routers.Route, status int, ct string) (*openapi3.Schema, error) {
	resp := route.Operation.Responses.Status(status)
	if resp == nil || resp.Value == nil {
		return nil, fmt.Errorf("status %d is not documented", status)
	}
	mt := resp.Value.Content.Get(ct)
	if mt == nil || mt.Schema == nil {
		return nil, fmt.Errorf("the %d answer's %s has no schema in the document", status, ct)
	}
	return mt.Schema.Value, nil
}

func (c *contract) schema(name string) *openapi3.Schema { return c.doc.Components.Schemas[name].Value }

// checkLine holds one line of a stream against its schema.
func checkLine(schema *openapi3.Schema, line []byte) error {
	var v any
	if err := json.Unmarshal(line, &v); err != nil {
		return fmt.Errorf("stream line is not JSON: %w: %.200q", err, line)
	}
	if err := schema.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.VisitAsResponse()); err != nil {
		return fmt.Errorf("stream line does not match its schema: %w\nline: %.300s", err, line)
	}
	return nil
}

// serveRequest serves req with h, records the answer and checks it against
// the document.
func serveRequest(t testing.TB, h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	checkRecorded(t, req, rec)
	return rec
}

// checkRecorded checks the answer rec recorded for req, unless the client
// went away before any answer.
func checkRecorded(t testing.TB, req *http.Request, rec *httptest.ResponseRecorder) {
	t.Helper()
	if req.Context().Err() != nil && rec.Header().Get("Content-Type") == "" && rec.Body.Len() == 0 {
		return // the client left before the answer
	}
	resp := rec.Result()
	a := answer{status: resp.StatusCode, header: resp.Header, trailer: resp.Trailer, body: rec.Body.Bytes()}
	if req.Method == http.MethodHead {
		a.body = nil // a recorder keeps what a server drops
	}
	if err := mustContract(t).check(req, a); err != nil {
		t.Errorf("%s %s: the answer does not match openapi.json: %v\nstatus %d, headers %v\nbody %.500s",
			req.Method, req.URL, err, a.status, a.header, a.body)
	}
}

// checked returns h with every answer checked against the document, for
// an httptest.Server: a JSON answer is kept until it is complete, a stream
// has each line checked as it passes. An answer cut short (a panic with
// http.ErrAbortHandler) or left by its client is not checked whole.
func checked(t testing.TB, h http.Handler) http.Handler {
	c := mustContract(t)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &checkWriter{ResponseWriter: w, c: c, req: r}
		h.ServeHTTP(cw, r) // a panic skips the check: the answer was cut short
		if err := cw.finish(); err != nil {
			t.Errorf("%s %s: the answer does not match openapi.json: %v\nstatus %d, headers %v\nbody %.500s",
				r.Method, r.URL, err, cw.status, cw.header, cw.body.Bytes())
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
	c      *contract
	req    *http.Request
	status int
	header http.Header  // a copy, when the header was written
	body   bytes.Buffer // a JSON answer
	// A stream: the line schema, the unfinished line, and the first line
	// that did not match.
	line    *openapi3.Schema
	partial []byte
	lineErr error
	cut     bool // a write failed: the client has gone
}

func (w *checkWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status, w.header = code, w.Header().Clone()
		w.startStream()
	}
	w.ResponseWriter.WriteHeader(code)
}

// startStream finds the line schema of a stream answer.
func (w *checkWriter) startStream() {
	ct, _, _ := mime.ParseMediaType(w.header.Get("Content-Type"))
	if ct != NDJSONType {
		return
	}
	_, route, _, err := w.c.find(w.req)
	if err == nil {
		w.line, err = w.c.lineSchema(route, w.status, ct)
	}
	if err != nil {
		w.lineErr = fmt.Errorf("stream: %w", err)
	}
}

func (w *checkWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(p)
	if err != nil {
		w.cut = true
	}
	if w.line == nil {
		if w.lineErr == nil {
			w.body.Write(p)
		}
		return n, err
	}
	for len(p) > 0 && w.lineErr == nil {
		l, rest, ok := bytes.Cut(p, []byte("\n"))
		if !ok {
			w.partial = append(w.partial, p...)
			break
		}
		if len(w.partial) > 0 {
			l = append(w.partial, l...)
			w.partial = nil
		}
		checkedLines.Add(1)
		w.lineErr = checkLine(w.line, l)
		p = rest
	}
	return n, err
}

// Unwrap lets http.ResponseController reach the server's writer (to flush
// a stream, or set a read deadline).
func (w *checkWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish checks the whole answer once the handler has returned.
func (w *checkWriter) finish() error {
	r := w.req
	gone := r.Context().Err() != nil
	switch {
	case w.status == 0 && gone:
		return nil // the client left before the answer
	case w.status == 0:
		return errors.New("the handler wrote no answer")
	case w.lineErr != nil:
		return w.lineErr
	case w.cut || (gone && w.line != nil):
		return nil // the client left during the answer; the lines it got were checked
	case len(w.partial) > 0:
		return fmt.Errorf("the stream ends inside a line: %.200q", w.partial)
	}
	a := answer{status: w.status, header: w.header, trailer: trailers(w.Header(), w.header), body: w.body.Bytes(), streamed: w.line != nil}
	return w.c.check(r, a)
}

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

// TestContract_Refuses shows that the checks bite: answers that the
// document does not describe are each refused.
func TestContract_Refuses(t *testing.T) {
	t.Parallel()
	c := mustContract(t)
	const id = "6f1c2a9e-0000-4000-8000-000000000000"
	jsonHeader := func(kv ...string) http.Header {
		h := http.Header{"Content-Type": {"application/json"}, "Cache-Control": {"no-store"}, RequestIDHeader: {"r-1"}}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == "" {
				h.Del(kv[i])
			} else {
				h.Set(kv[i], kv[i+1])
			}
		}
		return h
	}
	summary := `{"job_id":"` + id + `","status":"done","targets_total":1,"targets_done":1,"created_at":"2026-01-02T03:04:05Z","expires_at":"2026-01-03T03:04:05Z","targets":[TARGET]}`
	target := func(t string) string { return strings.Replace(summary, "TARGET", t, 1) }
	okTarget := `{"idx":0,"url":"u","status":"done","outcome":"ok","retryable":false}`
	streamHeader := func() http.Header {
		h := jsonHeader("Content-Type", NDJSONType)
		h.Set("Trailer", StatusTrailer)
		return h
	}
	line := `{"idx":0,"url":"u","status":"done","outcome":"ok","retryable":false,"result":{"content":"x"}}` + "\n"
	for _, tc := range []struct {
		name, method, path string
		a                  answer
	}{
		{"MissingField", "GET", "/v1/batch/" + id, answer{status: 200, header: jsonHeader(), body: []byte(strings.Replace(target(okTarget), `"targets_done":1,`, "", 1))}},
		{"UnknownField", "GET", "/v1/batch/" + id, answer{status: 200, header: jsonHeader(), body: []byte(target(`{"idx":0,"url":"u","status":"done","outcome":"ok","retryable":false,"colour":"red"}`))}},
		{"UnknownOutcome", "GET", "/v1/batch/" + id, answer{status: 200, header: jsonHeader(), body: []byte(target(`{"idx":0,"url":"u","status":"failed","outcome":"meh","retryable":false}`))}},
		{"FinishedWithoutOutcome", "GET", "/v1/batch/" + id, answer{status: 200, header: jsonHeader(), body: []byte(target(`{"idx":0,"url":"u","status":"failed"}`))}},
		{"PendingWithResult", "GET", "/v1/batch/" + id, answer{status: 200, header: jsonHeader(), body: []byte(target(`{"idx":0,"url":"u","status":"pending","result":{"content":""}}`))}},
		{"TimeNotUTC", "GET", "/v1/batch/" + id, answer{status: 200, header: jsonHeader(), body: []byte(strings.Replace(target(okTarget), "03:04:05Z", "03:04:05+01:00", 1))}},
		{"NoRequestID", "GET", "/v1/batch/" + id, answer{status: 200, header: jsonHeader(RequestIDHeader, ""), body: []byte(target(okTarget))}},
		{"UndocumentedStatus", "GET", "/v1/batch/" + id, answer{status: 418, header: jsonHeader(), body: []byte(`{"success":false,"code":"internal","error":"teapot"}`)}},
		{"WrongCodeForStatus", "GET", "/v1/batch/" + id, answer{status: 404, header: jsonHeader(), body: []byte(`{"success":false,"code":"invalid_batch","error":"not found"}`)}},
		{"UnknownCode", "DELETE", "/v1/batch/" + id, answer{status: 409, header: jsonHeader(), body: []byte(`{"success":false,"code":"finished","error":"job already finished"}`)}},
		{"NoRetryAfter", "POST", "/v1/batch", answer{status: 429, header: jsonHeader(), body: []byte(`{"success":false,"code":"jobs_busy","error":"batch jobs busy"}`)}},
		{"NoChallenge", "GET", "/v1/batch", answer{status: 401, header: jsonHeader(), body: []byte(`{"success":false,"code":"unauthorized","error":"unauthorized"}`)}},
		{"WrongAllow", "PUT", "/v1/batch", answer{status: 405, header: jsonHeader("Allow", "GET, POST"), body: []byte(`{"success":false,"code":"method_not_allowed","error":"method not allowed"}`)}},
		{"UnroutedSuccess", "GET", "/v1/elsewhere", answer{status: 200, header: jsonHeader(), body: []byte(`{}`)}},
		{"StreamLinePending", "GET", "/v1/batch/" + id + "/results", answer{status: 200, header: streamHeader(), trailer: http.Header{StatusTrailer: {"done"}}, body: []byte(`{"idx":0,"url":"u","status":"pending"}` + "\n")}},
		{"StreamCutInLine", "GET", "/v1/batch/" + id + "/results", answer{status: 200, header: streamHeader(), trailer: http.Header{StatusTrailer: {"done"}}, body: []byte(line + `{"idx":1`)}},
		{"StreamTrailer", "GET", "/v1/batch/" + id + "/results", answer{status: 200, header: streamHeader(), trailer: http.Header{StatusTrailer: {"finished"}}, body: []byte(line)}},
		{"StreamAsJSON", "GET", "/v1/batch/" + id + "/results", answer{status: 200, header: jsonHeader(), body: []byte(line)}},
	} {
		req := httptest.NewRequest(tc.method, tc.path, nil)
		if _, err := c.verify(req, tc.a); err == nil {
			t.Errorf("%s: %s %s answered %d %s: accepted, want refused", tc.name, tc.method, tc.path, tc.a.status, tc.a.body)
		} else if testing.Verbose() {
			t.Logf("%s: refused: %.200s", tc.name, strings.ReplaceAll(err.Error(), "\n", " "))
		}
	}
	// The same answers, made right, pass: the cases above fail for the
	// reason they name.
	for _, tc := range []struct {
		method, path string
		a            answer
	}{
		{"GET", "/v1/batch/" + id, answer{status: 200, header: jsonHeader(), body: []byte(target(okTarget))}},
		{"PUT", "/v1/batch", answer{status: 405, header: jsonHeader("Allow", "GET, HEAD, POST"), body: []byte(`{"success":false,"code":"method_not_allowed","error":"method not allowed"}`)}},
		{"GET", "/v1/batch/" + id + "/results", answer{status: 200, header: streamHeader(), trailer: http.Header{StatusTrailer: {"done"}}, body: []byte(line)}},
	} {
		if _, err := c.verify(httptest.NewRequest(tc.method, tc.path, nil), tc.a); err != nil {
			t.Errorf("%s %s: a right answer refused: %v", tc.method, tc.path, err)
		}
	}
}
