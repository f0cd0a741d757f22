package batchhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// openapiDoc is openapi.json read as plain JSON, for the tests that hold
// its structure against the code: its paths and their operations, its
// schemas' properties and enums. The checks that need an OpenAPI library
// (that the document is valid OpenAPI 3.1, and that every answer the tests
// get matches it) are in the module batchhttp/openapitest.
type openapiDoc struct {
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]*docSchema `json:"schemas"`
	} `json:"components"`
}

// docSchema is what the tests read of a schema.
type docSchema struct {
	Enum       []string                   `json:"enum"`
	Properties map[string]json.RawMessage `json:"properties"`
}

func mustDoc(t testing.TB) openapiDoc {
	t.Helper()
	var doc openapiDoc
	if err := json.Unmarshal(OpenAPI(batchsift.Options), &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	return doc
}

// schema returns the components' schema name, failing t if there is none.
func (d openapiDoc) schema(t testing.TB, name string) *docSchema {
	t.Helper()
	s := d.Components.Schemas[name]
	if s == nil {
		t.Fatalf("openapi.json has no schema %s", name)
	}
	return s
}

// operations returns the operations of a path item: their operationIds by
// method, in upper case.
func operations(t testing.TB, item map[string]json.RawMessage) map[string]string {
	t.Helper()
	ops := map[string]string{}
	for key, raw := range item {
		switch key {
		case "get", "put", "post", "delete", "options", "head", "patch", "trace":
			var op struct {
				OperationID string `json:"operationId"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("openapi.json operation %s: %v", key, err)
			}
			ops[strings.ToUpper(key)] = op.OperationID
		}
	}
	return ops
}

// TestOpenAPI_DocumentCopy checks that OpenAPI returns the document, as
// JSON, in a copy of its own.
func TestOpenAPI_DocumentCopy(t *testing.T) {
	t.Parallel()
	var doc map[string]any
	if err := json.Unmarshal(OpenAPI(batchsift.Options), &doc); err != nil {
		t.Fatalf("openapi.json is not JSON: %v", err)
	}
	if doc["openapi"] != "3.1.0" {
		t.Errorf("openapi %q, want 3.1.0", doc["openapi"])
	}
	b := OpenAPI(batchsift.Options)
	b[0] = 'x'
	if OpenAPI(batchsift.Options)[0] != '{' {
		t.Error("OpenAPI returned the embedded document, not a copy")
	}
}

// TestOpenAPI_Routes checks that the document and the route table agree
// both ways: every operation of the document is a route of [Routes], with
// the route's Name as its operationId, and every route is an operation of
// the document. The table is what NewHandler routes by, so a new route
// cannot go undocumented.
func TestOpenAPI_Routes(t *testing.T) {
	t.Parallel()
	doc := mustDoc(t)
	var documented []string
	for path, item := range doc.Paths {
		if path == OpenAPIPath {
			continue // served by OpenAPIHandler, not Handler
		}
		for method, id := range operations(t, item) {
			documented = append(documented, method+" "+path+" "+id)
		}
	}
	slices.Sort(documented)
	var served []string
	for _, r := range Routes() {
		served = append(served, r.Method+" "+r.Path+" "+r.Name)
	}
	slices.Sort(served)
	if !slices.Equal(documented, served) {
		t.Errorf("the document's operations and the route table differ:\ndocument: %q\nroutes:   %q", documented, served)
	}

	// The route labels, which the observe hook and the log lines carry,
	// are the document's paths.
	for _, label := range []string{RouteList, RouteJob, RouteResult, RouteResults, RouteRetry, RouteWebhookSecret} {
		if doc.Paths[label] == nil {
			t.Errorf("route label %s is not a path of the document", label)
		}
	}
	if _, ok := operations(t, doc.Paths[OpenAPIPath])["GET"]; !ok {
		t.Errorf("the document does not describe GET %s", OpenAPIPath)
	}
}

// TestOpenAPI_Codes checks that the ErrorCode enum is exactly the Code
// constants of errors.go (read from its source), each of which knownCode
// knows. (That each code is the code of at least one documented answer is
// checked in batchhttp/openapitest.)
func TestOpenAPI_Codes(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var consts []string
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if strings.HasPrefix(name.Name, "Code") {
					consts = append(consts, stringLit(t, vs.Values[i]))
				}
			}
		}
	}
	enum := slices.Clone(mustDoc(t).schema(t, "ErrorCode").Enum)
	slices.Sort(consts)
	slices.Sort(enum)
	if !slices.Equal(consts, enum) {
		t.Errorf("ErrorCode enum %q, want the Code constants %q", enum, consts)
	}
	for _, code := range consts {
		if !knownCode(code) {
			t.Errorf("knownCode(%q) = false: add it to the helper", code)
		}
	}
}

// TestOpenAPI_Methods sends every method to every path of the document:
// a method the path lists is served (not 405), and any other is 405 with
// the Allow header the document implies, which batchhttp/openapitest checks
// in the answers serve records.
func TestOpenAPI_Methods(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	id := finishedJob(t, b, batchtest.Targets("m", 1))
	mux := http.NewServeMux()
	mux.Handle("/v1/batch", b.handler)
	mux.Handle("/v1/batch/", b.handler)
	mux.Handle(OpenAPIPath, OpenAPIHandler(batchsift.Options))
	for path, item := range mustDoc(t).Paths {
		target := strings.NewReplacer("{id}", id, "{idx}", "0").Replace(path)
		ops := operations(t, item)
		for _, method := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} {
			_, listed := ops[method]
			_, get := ops["GET"]
			listed = listed || method == "HEAD" && get
			rec := serve(t, mux, method, target, keyAlice, "")
			if got := rec.Code == http.StatusMethodNotAllowed; got == listed {
				t.Errorf("%s %s: status %d; the document lists the method: %v", method, target, rec.Code, listed)
			}
		}
	}
}

// TestHandler_Refusals produces, on every route, the answers that do not
// depend on the job: a host's authenticator refusing a known caller (403),
// and a runner whose store is unavailable (503) or broken (500). serve
// records each, to be checked against the document.
func TestHandler_Refusals(t *testing.T) {
	t.Parallel()
	const id = "6f1c2a9e-0000-4000-8000-000000000000"
	requests := []struct{ method, path, body string }{
		{"POST", "/v1/batch", `{"targets":[{"url":"https://a.test/"}]}`},
		{"GET", "/v1/batch", ""},
		{"GET", "/v1/batch/" + id, ""},
		{"GET", "/v1/batch/" + id + "?results=1", ""},
		{"GET", "/v1/batch/" + id + "?wait=1s&since=0", ""},
		{"DELETE", "/v1/batch/" + id, ""},
		{"GET", "/v1/batch/" + id + "/0", ""},
		{"GET", "/v1/batch/" + id + "/results", ""},
		{"POST", "/v1/batch/" + id + "/retry", ""},
	}
	forbid := func(w http.ResponseWriter, r *http.Request) (batch.Caller, bool) {
		WriteError(w, http.StatusForbidden, CodeForbidden, "forbidden", "")
		return batch.Caller{}, false
	}
	for _, tc := range []struct {
		name   string
		runner Runner
		auth   CallerFunc
		status int
		msg    string
	}{
		{"Forbidden", failingRunner{errors.New("unused")}, forbid, http.StatusForbidden, "forbidden"},
		{"Unavailable", failingRunner{batch.ErrUnavailable}, nil, http.StatusServiceUnavailable, "batch jobs unavailable"},
		{"Internal", failingRunner{errors.New("disk on fire")}, nil, http.StatusInternalServerError, "internal error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			auth := tc.auth
			if auth == nil {
				auth = testAuth
			}
			h, err := NewHandler(tc.runner, &HandlerConfig{Authenticate: auth})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range requests {
				wantError(t, serve(t, h, r.method, r.path, keyAlice, r.body), tc.status, tc.msg)
			}
		})
	}
}

// failingRunner fails every call with err.
type failingRunner struct{ err error }

func (f failingRunner) Options() batch.OptionSet { return batchsift.Options }

func (f failingRunner) SubmitWith(context.Context, batch.Caller, []batch.Target, batch.SubmitOptions) (batch.JobInfo, bool, error) {
	return batch.JobInfo{}, false, f.err
}
func (f failingRunner) Status(context.Context, batch.Caller, string, batch.StatusOptions) (batch.JobInfo, error) {
	return batch.JobInfo{}, f.err
}
func (f failingRunner) Wait(context.Context, batch.Caller, string, batch.WaitOptions) (batch.JobInfo, error) {
	return batch.JobInfo{}, f.err
}
func (f failingRunner) Result(context.Context, batch.Caller, string, int) (batch.TargetResult, error) {
	return batch.TargetResult{}, f.err
}
func (f failingRunner) Touch(context.Context, batch.Caller, string) error  { return f.err }
func (f failingRunner) Cancel(context.Context, batch.Caller, string) error { return f.err }
func (f failingRunner) Retry(context.Context, batch.Caller, string) (batch.JobInfo, bool, error) {
	return batch.JobInfo{}, false, f.err
}
func (f failingRunner) ListWith(context.Context, batch.Caller, batch.ListOptions) ([]batch.JobInfo, error) {
	return nil, f.err
}
func (f failingRunner) TargetsPerJob() int { return batch.DefaultTargetsPerJob }

func TestOpenAPIHandler(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.Handle(OpenAPIPath, OpenAPIHandler(batchsift.Options))
	get := func(method string, header ...string) *httptest.ResponseRecorder {
		t.Helper()
		req := httptest.NewRequest(method, OpenAPIPath, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Add(header[i], header[i+1])
		}
		return serveRequest(t, mux, req) // recorded, to be checked against the document it serves
	}

	rec := get(http.MethodGet, RequestIDHeader, "gen-1")
	if rec.Code != http.StatusOK || !bytes.Equal(rec.Body.Bytes(), OpenAPI(batchsift.Options)) {
		t.Fatalf("GET: %d, %d bytes; want 200 and the document", rec.Code, rec.Body.Len())
	}
	h := rec.Header()
	etag := h.Get("ETag")
	if h.Get("Content-Type") != "application/json" || h.Get("Cache-Control") != "no-cache" || h.Get(RequestIDHeader) != "gen-1" || etag == "" {
		t.Errorf("GET: headers %v", h)
	}

	if rec := get(http.MethodHead); rec.Code != http.StatusOK || rec.Header().Get("Content-Length") != strconv.Itoa(len(OpenAPI(batchsift.Options))) {
		t.Errorf("HEAD: %d, headers %v", rec.Code, rec.Header())
	}
	for _, inm := range []string{etag, "W/" + etag, `"other", ` + etag, "*"} {
		if rec := get(http.MethodGet, "If-None-Match", inm); rec.Code != http.StatusNotModified || rec.Body.Len() != 0 || rec.Header().Get("ETag") != etag {
			t.Errorf("If-None-Match %s: %d, %d bytes", inm, rec.Code, rec.Body.Len())
		}
	}
	if rec := get(http.MethodGet, "If-None-Match", `"other"`); rec.Code != http.StatusOK {
		t.Errorf("If-None-Match of another version: %d, want 200", rec.Code)
	}
	rec = get(http.MethodPost)
	wantError(t, rec, http.StatusMethodNotAllowed, "method not allowed")
	if got := rec.Header().Get("Allow"); got != "GET, HEAD" {
		t.Errorf("POST: Allow %q", got)
	}
	// No key is needed, and a handler's request id is kept.
	if got := get(http.MethodGet).Header().Get(RequestIDHeader); !ValidRequestID(got) {
		t.Errorf("GET without an id: answer id %q", got)
	}
	rec = httptest.NewRecorder()
	WithRequestID(mux).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, OpenAPIPath, nil))
	if ids := rec.Header().Values(RequestIDHeader); len(ids) != 1 || !ValidRequestID(ids[0]) {
		t.Errorf("behind WithRequestID: ids %q", ids)
	}
}

func stringLit(t *testing.T, e ast.Expr) string {
	t.Helper()
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		t.Fatalf("errors.go: a Code constant that is not a string literal; teach TestOpenAPI_Codes")
	}
	s, err := strconv.Unquote(lit.Value)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
