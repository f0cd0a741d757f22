package openapitest_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batchhttp"
)

// This file checks every answer batchhttp's tests get from a Handler (or
// from OpenAPIHandler), and every webhook delivery they receive, against
// openapi.json, with kin-openapi's openapi3filter: TestAnswers runs those
// tests with BATCHKIT_OPENAPI_ANSWERS naming a file, to which they record
// each answer (see batchhttp's contract_test.go), and holds each against
// the document; a results stream's lines are checked against the stream's
// line schema. An answer that the document does not describe fails
// TestAnswers, which names the test that got it.

// answersEnv names the file batchhttp's tests record their answers to.
const answersEnv = "BATCHKIT_OPENAPI_ANSWERS"

// recorded is one answer or delivery a test of batchhttp got, as
// batchhttp's contract_test.go records it.
type recorded struct {
	Test   string `json:"test"`
	Kind   string `json:"kind"` // "answer" or "webhook"
	Method string `json:"method"`
	URL    struct {
		Scheme   string `json:"scheme"`
		Opaque   string `json:"opaque"`
		Host     string `json:"host"`
		Path     string `json:"path"`
		RawPath  string `json:"raw_path"`
		RawQuery string `json:"raw_query"`
	} `json:"url"`
	Host    string      `json:"host"`
	Status  int         `json:"status"`
	Header  http.Header `json:"header"`
	Trailer http.Header `json:"trailer"`
	Body    []byte      `json:"body"`
	Partial bool        `json:"partial"`
}

// request is the request r answered, as the handler saw it.
func (r recorded) request() *http.Request {
	u := &url.URL{Scheme: r.URL.Scheme, Opaque: r.URL.Opaque, Host: r.URL.Host, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	req := &http.Request{Method: r.Method, URL: u, Host: r.Host, Header: http.Header{}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	return req.WithContext(context.Background())
}

// TestAnswers runs batchhttp's tests, which record every answer and
// webhook delivery they get, and holds each against openapi.json.
func TestAnswers(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "answers.jsonl")
	args := []string{"test", "-count=1"} // a cached result would record nothing
	if testing.Short() {
		args = append(args, "-short")
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Dir = ".." // batchhttp, in the root module
	cmd.Env = append(os.Environ(), answersEnv+"="+file)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go test batchhttp: %v\n%s", err, out)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatalf("batchhttp's tests recorded no answers: %v", err)
	}
	defer f.Close()
	c := mustContract(t)
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	n := 0
	for sc.Scan() {
		var r recorded
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("answer %d: %v", n+1, err)
		}
		n++
		switch r.Kind {
		case "webhook":
			checkWebhookDelivery(t, c, r)
		case "answer":
			req := r.request()
			a := answer{status: r.Status, header: r.Header, trailer: r.Trailer, body: r.Body}
			var err error
			if r.Partial {
				err = c.checkLines(req, a)
			} else {
				err = c.check(req, a)
			}
			if err != nil {
				t.Errorf("%s: %s %s: the answer does not match openapi.json: %v\nstatus %d, headers %v\nbody %.500s",
					r.Test, r.Method, req.URL, err, a.status, a.header, a.body)
			}
		default:
			t.Errorf("%s: a record of kind %q", r.Test, r.Kind)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if checkedAnswers.Load() == 0 {
		t.Fatal("batchhttp's tests recorded no answers: the check checks nothing")
	}
	for name, n := range checkedWebhooks {
		if n.Load() == 0 {
			t.Errorf("batchhttp's tests recorded no delivery of the %s webhook", name)
		}
	}
	t.Log(contractReport())
}

// contract is openapi.json, loaded for checking answers.
type contract struct {
	doc    *openapi3.T
	router routers.Router
	// The operations an answer is checked against when the document has
	// none for its request: a path it does not list (401 or 404), or a
	// method a path does not list (401, 404 for CONNECT, or 405).
	noPath, noMethod *openapi3.Operation
}

// What the checks saw in this run, for the report TestAnswers logs: how
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

// loadContract is the document of a server whose targets take sift's
// options, the ones batchhttp's tests submit.
var loadContract = sync.OnceValues(func() (*contract, error) {
	return newContract(batchhttp.OpenAPI(batchsift.Options))
})

// newContract loads data, an OpenAPI document of the API, for checking
// answers.
func newContract(data []byte) (*contract, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(data)
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
}

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
}

// check holds a, an answer a test got, against the document's operation
// for req and returns what does not match, or nil. It counts the answer for
// the report.
func (c *contract) check(req *http.Request, a answer) error {
	checkedAnswers.Add(1)
	if ct, _, _ := mime.ParseMediaType(a.header.Get("Content-Type")); ct == batchhttp.NDJSONType {
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
	stream := ct == batchhttp.NDJSONType
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
	status := a.trailer.Get(batchhttp.StatusTrailer)
	if err := c.schema("JobStatus").VisitJSON(status, openapi3.EnableJSONSchema2020()); err != nil {
		return key, fmt.Errorf("trailer %s %q is not a JobStatus: %w", batchhttp.StatusTrailer, status, err)
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

// checkLines holds the complete lines of a, a stream its client left
// during, against the stream's line schema; an answer that is no stream it
// leaves unchecked.
func (c *contract) checkLines(req *http.Request, a answer) error {
	ct, _, _ := mime.ParseMediaType(a.header.Get("Content-Type"))
	if ct != batchhttp.NDJSONType || req.Method == http.MethodHead {
		return nil
	}
	routed, route, _, err := c.find(req)
	if err != nil {
		return fmt.Errorf("stream: find the operation of %s %s: %w", routed.Method, routed.URL, err)
	}
	line, err := c.lineSchema(route, a.status, ct)
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	body := a.body
	for {
		l, rest, ok := bytes.Cut(body, []byte("\n"))
		if !ok {
			return nil // the line the client did not wait for
		}
		checkedLines.Add(1)
		if err := checkLine(line, l); err != nil {
			return err
		}
		body = rest
	}
}

// checkWebhookDelivery holds a real delivery against the document's
// webhook of its type (batchFinished, batchTargetFinished): its headers
// and its body.
func checkWebhookDelivery(t *testing.T, c *contract, d recorded) {
	t.Helper()
	var typed struct{ Type string }
	_ = json.Unmarshal(d.Body, &typed) // a body that is not JSON fails below
	name := "batchFinished"
	if typed.Type == "batch.target.finished" {
		name = "batchTargetFinished"
	}
	checkedWebhooks[name].Add(1)
	item := c.doc.Webhooks[name]
	if item == nil || item.Post == nil {
		t.Fatalf("openapi.json has no %s webhook", name)
	}
	op := item.Post
	for _, p := range op.Parameters {
		v := d.Header.Get(p.Value.Name)
		if v == "" {
			t.Errorf("%s: the delivery has no %s header", d.Test, p.Value.Name)
			continue
		}
		if err := p.Value.Schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
			t.Errorf("%s: header %s %q: %v", d.Test, p.Value.Name, v, err)
		}
	}
	var body any
	if err := json.Unmarshal(d.Body, &body); err != nil {
		t.Errorf("%s: delivery body: %v", d.Test, err)
		return
	}
	schema := op.RequestBody.Value.Content.Get("application/json").Schema.Value
	if err := schema.VisitJSON(body, openapi3.EnableJSONSchema2020()); err != nil {
		t.Errorf("%s: delivery body %s against %s: %v", d.Test, d.Body, name, err)
	}
}

// checkedWebhooks counts the deliveries checked against each webhook of
// the document, so that TestAnswers can tell one that none exercised.
var checkedWebhooks = map[string]*atomic.Int64{"batchFinished": {}, "batchTargetFinished": {}}

// TestContract_Refuses shows that the checks bite: answers that the
// document does not describe are each refused.
func TestContract_Refuses(t *testing.T) {
	t.Parallel()
	c := mustContract(t)
	const id = "6f1c2a9e-0000-4000-8000-000000000000"
	jsonHeader := func(kv ...string) http.Header {
		h := http.Header{"Content-Type": {"application/json"}, "Cache-Control": {"no-store"}, batchhttp.RequestIDHeader: {"r-1"}}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == "" {
				h.Del(kv[i])
			} else {
				h.Set(kv[i], kv[i+1])
			}
		}
		return h
	}
	summary := `{"job_id":"` + id + `","status":"done","targets_total":1,"targets_done":1,"created_at":"2026-01-02T03:04:05Z","expires_at":"2026-01-03T03:04:05Z","handed_on":0,"targets":[TARGET]}`
	target := func(t string) string { return strings.Replace(summary, "TARGET", t, 1) }
	okTarget := `{"idx":0,"url":"u","status":"done","attempts":1,"outcome":"ok","retryable":false}`
	streamHeader := func() http.Header {
		h := jsonHeader("Content-Type", batchhttp.NDJSONType)
		h.Set("Trailer", batchhttp.StatusTrailer)
		return h
	}
	line := `{"idx":0,"url":"u","status":"done","attempts":1,"outcome":"ok","retryable":false,"result":{"content":"x"}}` + "\n"
	for _, tc := range []struct {
		name, method, path string
		a                  answer
	}{
		{"MissingField", "GET", "/v1/batch/" + id, answer{status: 200, header: jsonHeader(), body: []byte(strings.Replace(target(okTarget), `"targets_done":1,`, "", 1))}},
		{"MissingAttempts", "GET", "/v1/batch/" + id, answer{status: 200, header: jsonHeader(), body: []byte(target(strings.Replace(okTarget, `"attempts":1,`, "", 1)))}},
		{"ZeroAttempts", "GET", "/v1/batch/" + id, answer{status: 200, header: jsonHeader(), body: []byte(target(strings.Replace(okTarget, `"attempts":1,`, `"attempts":0,`, 1)))}},
		{"MissingHandedOn", "GET", "/v1/batch/" + id, answer{status: 200, header: jsonHeader(), body: []byte(strings.Replace(target(okTarget), `"handed_on":0,`, "", 1))}},
		{"UnknownField", "GET", "/v1/batch/" + id, answer{status: 200, header: jsonHeader(), body: []byte(target(`{"idx":0,"url":"u","status":"done","attempts":1,"outcome":"ok","retryable":false,"colour":"red"}`))}},
		{"UnknownOutcome", "GET", "/v1/batch/" + id, answer{status: 200, header: jsonHeader(), body: []byte(target(`{"idx":0,"url":"u","status":"failed","outcome":"meh","retryable":false}`))}},
		{"FinishedWithoutOutcome", "GET", "/v1/batch/" + id, answer{status: 200, header: jsonHeader(), body: []byte(target(`{"idx":0,"url":"u","status":"failed"}`))}},
		{"PendingWithResult", "GET", "/v1/batch/" + id, answer{status: 200, header: jsonHeader(), body: []byte(target(`{"idx":0,"url":"u","status":"pending","result":{"content":""}}`))}},
		{"TimeNotUTC", "GET", "/v1/batch/" + id, answer{status: 200, header: jsonHeader(), body: []byte(strings.Replace(target(okTarget), "03:04:05Z", "03:04:05+01:00", 1))}},
		{"NoRequestID", "GET", "/v1/batch/" + id, answer{status: 200, header: jsonHeader(batchhttp.RequestIDHeader, ""), body: []byte(target(okTarget))}},
		{"UndocumentedStatus", "GET", "/v1/batch/" + id, answer{status: 418, header: jsonHeader(), body: []byte(`{"success":false,"code":"internal","error":"teapot"}`)}},
		{"WrongCodeForStatus", "GET", "/v1/batch/" + id, answer{status: 404, header: jsonHeader(), body: []byte(`{"success":false,"code":"invalid_batch","error":"not found"}`)}},
		{"UnknownCode", "DELETE", "/v1/batch/" + id, answer{status: 409, header: jsonHeader(), body: []byte(`{"success":false,"code":"finished","error":"job already finished"}`)}},
		{"NoRetryAfter", "POST", "/v1/batch", answer{status: 429, header: jsonHeader(), body: []byte(`{"success":false,"code":"jobs_busy","error":"batch jobs busy"}`)}},
		{"NoChallenge", "GET", "/v1/batch", answer{status: 401, header: jsonHeader(), body: []byte(`{"success":false,"code":"unauthorized","error":"unauthorized"}`)}},
		{"WrongAllow", "PUT", "/v1/batch", answer{status: 405, header: jsonHeader("Allow", "GET, POST"), body: []byte(`{"success":false,"code":"method_not_allowed","error":"method not allowed"}`)}},
		{"UnroutedSuccess", "GET", "/v1/elsewhere", answer{status: 200, header: jsonHeader(), body: []byte(`{}`)}},
		{"StreamLinePending", "GET", "/v1/batch/" + id + "/results", answer{status: 200, header: streamHeader(), trailer: http.Header{batchhttp.StatusTrailer: {"done"}}, body: []byte(`{"idx":0,"url":"u","status":"pending","attempts":1}` + "\n")}},
		{"StreamCutInLine", "GET", "/v1/batch/" + id + "/results", answer{status: 200, header: streamHeader(), trailer: http.Header{batchhttp.StatusTrailer: {"done"}}, body: []byte(line + `{"idx":1`)}},
		{"StreamTrailer", "GET", "/v1/batch/" + id + "/results", answer{status: 200, header: streamHeader(), trailer: http.Header{batchhttp.StatusTrailer: {"finished"}}, body: []byte(line)}},
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
		{"GET", "/v1/batch/" + id + "/results", answer{status: 200, header: streamHeader(), trailer: http.Header{batchhttp.StatusTrailer: {"done"}}, body: []byte(line)}},
	} {
		if _, err := c.verify(httptest.NewRequest(tc.method, tc.path, nil), tc.a); err != nil {
			t.Errorf("%s %s: a right answer refused: %v", tc.method, tc.path, err)
		}
	}
}
