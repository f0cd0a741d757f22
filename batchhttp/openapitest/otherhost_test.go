package openapitest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/batchhttp/batchserver"
)

// renderOptions is the option set of a host that is not sift: a page
// renderer's.
var renderOptions = batch.OptionSet{Fields: []batch.OptionField{
	{Name: "wait_for", Type: batch.OptionString, Description: "A CSS selector to wait for before the page is read."},
	{Name: "selector", Type: batch.OptionString, Description: "A CSS selector: only the matching elements are returned."},
	{Name: "format", Type: batch.OptionString, Enum: []string{"", "text", "html"}},
	{Name: "full_page", Type: batch.OptionBool},
}}

// renderFields are renderOptions, decoded by the host's fetcher.
type renderFields struct {
	WaitFor  string `json:"wait_for"`
	Selector string `json:"selector"`
	Format   string `json:"format"`
	FullPage bool   `json:"full_page"`
}

// TestOtherHost runs a host whose targets take other options than sift's
// end to end over HTTP: its OpenAPI document describes them, a submit
// with them is accepted and its resubmit reused, the fetcher gets them as
// submitted, and every answer (and the submit request itself) matches the
// document the server serves. A sift field is refused like any unknown
// one.
func TestOtherHost(t *testing.T) {
	t.Parallel()
	fetch := func(_ context.Context, _ batch.Caller, tg batch.Target) (batch.Result, error) {
		var f renderFields
		if err := json.Unmarshal(append([]byte(nil), orEmpty(tg.Options)...), &f); err != nil {
			return batch.Result{}, err
		}
		return batch.Result{Content: fmt.Sprintf("wait_for=%s selector=%s format=%s full_page=%t", f.WaitFor, f.Selector, f.Format, f.FullPage)}, nil
	}
	r := batchtest.NewRunner(t, batch.Config{Fetch: fetch, Options: renderOptions})
	auth, err := batchserver.NewKeyAuth([]batchserver.Key{{Name: "alice", Secret: "alice-key-0123456789"}})
	if err != nil {
		t.Fatal(err)
	}
	api, err := batchhttp.NewHandler(r, &batchhttp.HandlerConfig{Authenticate: auth})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	api.Mount(mux)
	mux.Handle(batchhttp.OpenAPIPath, batchhttp.OpenAPIHandler(r.Options()))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	// The document the server serves, which every answer is held against.
	_, _, docBody := call(t, srv, http.MethodGet, batchhttp.OpenAPIPath, "")
	c, err := newContract(docBody)
	if err != nil {
		t.Fatalf("the served document: %v", err)
	}
	for _, name := range []string{"url", "wait_for", "selector", "format", "full_page"} {
		if c.schema("Target").Properties[name] == nil {
			t.Errorf("the document's Target has no %q", name)
		}
	}
	if c.schema("Target").Properties["mode"] != nil {
		t.Error("the document's Target still has sift's mode")
	}
	checked := func(method, path, body string) (int, []byte) {
		t.Helper()
		status, header, got := call(t, srv, method, path, body)
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer alice-key-0123456789")
			if err := c.checkRequest(req, body); err != nil && status < 400 {
				t.Errorf("%s %s: an accepted request that the document refuses: %v", method, path, err)
			}
		}
		if err := c.check(req, answer{status: status, header: header, body: got}); err != nil {
			t.Errorf("%s %s: the answer does not match the served document: %v\n%s", method, path, err, got)
		}
		return status, got
	}

	submit := `{"targets":[{"url":"https://a.test/","wait_for":"#main","full_page":true,"format":"text"},{"url":"https://b.test/","selector":"h1"}]}`
	status, body := checked(http.MethodPost, "/v1/batch", submit)
	var sub batchhttp.SubmitResponse
	if err := json.Unmarshal(body, &sub); status != http.StatusAccepted || err != nil || sub.Reused {
		t.Fatalf("submit = %d %s", status, body)
	}
	// The same targets, spelled another way: the same job.
	again := `{"targets":[{"full_page":true,"format":"text","wait_for":"#main","url":"https://a.test/"},{"selector":"h1","url":"https://b.test/","full_page":false}]}`
	status, body = checked(http.MethodPost, "/v1/batch", again)
	var re batchhttp.SubmitResponse
	if err := json.Unmarshal(body, &re); status != http.StatusAccepted || err != nil || !re.Reused || re.JobID != sub.JobID {
		t.Errorf("resubmit = %d %s, want job %s reused", status, body, sub.JobID)
	}

	status, body = checked(http.MethodGet, "/v1/batch/"+sub.JobID+"?wait=10s", "")
	var st batchhttp.StatusResponse
	if err := json.Unmarshal(body, &st); status != http.StatusOK || err != nil || st.Status != batch.JobDone {
		t.Fatalf("status = %d %s, want done", status, body)
	}
	for idx, want := range []string{"wait_for=#main selector= format=text full_page=true", "wait_for= selector=h1 format= full_page=false"} {
		status, body = checked(http.MethodGet, fmt.Sprintf("/v1/batch/%s/%d", sub.JobID, idx), "")
		if status != http.StatusOK || !bytes.Contains(body, []byte(want)) {
			t.Errorf("result %d = %d %s, want content %q", idx, status, body, want)
		}
	}

	// Refused as the wire API refuses any bad field.
	for in, want := range map[string]string{
		`{"targets":[{"url":"https://a.test/","mode":"clean"}]}`:    `invalid batch: target 0: unknown field \"mode\"`,
		`{"targets":[{"url":"https://a.test/","Selector":"h1"}]}`:   `did you mean \"selector\"?`,
		`{"targets":[{"url":"https://a.test/","full_page":"yes"}]}`: `invalid batch: target 0: \"full_page\" must be a boolean`,
		`{"targets":[{"url":"https://a.test/","format":"pdf"}]}`:    `invalid batch: target 0: unknown format \"pdf\"`,
	} {
		status, body := checked(http.MethodPost, "/v1/batch", in)
		if status != http.StatusBadRequest || !strings.Contains(string(body), want) {
			t.Errorf("submit %s = %d %s, want 400 with %s", in, status, body, want)
		}
		req := httptest.NewRequest(http.MethodPost, "/v1/batch", strings.NewReader(in))
		req.Header.Set("Content-Type", "application/json")
		if c.checkRequest(req, in) == nil {
			t.Errorf("the served document takes %s, which the server refuses", in)
		}
	}
}

func orEmpty(b []byte) []byte {
	if len(b) == 0 {
		return []byte("{}")
	}
	return b
}

// call makes one request of alice's to srv.
func call(t *testing.T, srv *httptest.Server, method, path, body string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer alice-key-0123456789")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, got
}

// checkRequest holds a request and its body against the document.
func (c *contract) checkRequest(req *http.Request, body string) error {
	routed, route, params, err := c.find(req)
	if err != nil {
		return err
	}
	routed.Body = io.NopCloser(strings.NewReader(body))
	return openapi3filter.ValidateRequest(req.Context(), &openapi3filter.RequestValidationInput{
		Request: routed, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
	})
}
