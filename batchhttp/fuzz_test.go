package batchhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// submitSeeds are bodies for both fuzz targets: the decoder table's vectors
// and a few realistic submits.
var submitSeeds = []string{
	`{"targets":[{"url":"https://a.test/"}]}`,
	`{"targets":[{"url":"u","mode":"clean","question":"q","pages":"1-2","grep":"g","jq":".a","context":true,"recover":true}]}`,
	`{"targets":[{"url":"u","context":false},{"url":"v","context":null},{"url":"w"}]}`,
	`{"targets":[{"url":"u","mode":null,"recover":null}]}`,
	`{"targets":[{"url":"\u0068ttps://a.test/\ud800"}]}`,
	`{"targets":[{}]}`,
	``, `null`, `{}`, `[]`, `{"targets":null}`, `{"targets":[]}`, `{"targets":[null]}`,
	`{"targets":[{"url":"u"}]}{}`, `{"targets":[{"url":"u"},]}`, "{\"targets\":[{\"url\":\"\xff\"}]}",
	`{"TARGETS":[{"url":"u"}]}`, `{"targets":[{"URL":"u"}]}`, `{"targets":[{"url":"u","url":"v"}]}`,
	`{"targets":[{"url":"u"}],"targets":[]}`, `{"targets":[{"url":1}]}`, `{"targets":[{"url":"u","recover":"no"}]}`,
	`{"targets":[{"url":"http://127.0.0.1:8080/"}]}`, `{"targets":[{"url":"https://example.test/","mode":"fast"}]}`,
	`{"targets":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
	`{"targets":[{"url":"u"}],"webhook":{"url":"https://hooks.test/in"}}`, `{"webhook":null,"targets":[{"url":"u"}]}`,
	`{"targets":[{"url":"u"}],"webhook":{}}`, `{"targets":[{"url":"u"}],"webhook":{"url":"a","url":"b"}}`,
	`{"targets":[{"url":"u"}],"webhook":{"URL":"a"}}`, `{"targets":[{"url":"u"}],"webhook":"https://a/"}`,
	`{"targets":[{"url":"u"}],"webhook":{"url":"http://127.0.0.1/"},"webhook":null}`,
}

// FuzzDecodeSubmit checks the submit decoder: it never panics, refuses with
// a 400 "invalid batch: …", and whatever it accepts encoding/json decodes
// strictly to the same targets, which re-encode and decode to themselves.
func FuzzDecodeSubmit(f *testing.F) {
	for _, s := range submitSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := decodeSubmit(body, batchsift.Options, 0)
		if err != nil {
			he, ok := errors.AsType[*httpError](err)
			if !ok || he.status != http.StatusBadRequest || !strings.HasPrefix(he.msg, "invalid batch: ") {
				t.Fatalf("decodeSubmit(%q, batchsift.Options) = %v, want a 400 invalid batch", body, err)
			}
			return
		}
		if len(got.Targets) == 0 {
			t.Fatalf("decodeSubmit(%q, batchsift.Options) accepted no targets", body)
		}
		if got.Webhook != nil && got.Webhook.URL == "" {
			t.Fatalf("decodeSubmit(%q, batchsift.Options) accepted a webhook without a url", body)
		}
		var strict SubmitRequest
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&strict); err != nil {
			t.Fatalf("decodeSubmit accepted %q, encoding/json refuses it: %v", body, err)
		}
		if err := dec.Decode(new(any)); err != io.EOF {
			t.Fatalf("decodeSubmit accepted %q with trailing data", body)
		}
		if !reflect.DeepEqual(got, strict) {
			t.Fatalf("decodeSubmit(%q, batchsift.Options) = %+v, encoding/json says %+v", body, got, strict)
		}
		again, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		round, err := decodeSubmit(again, batchsift.Options, 0)
		if err != nil || !reflect.DeepEqual(round, got) {
			t.Fatalf("re-encoded %s decodes to %+v, %v; want %+v", again, round, err, got)
		}
	})
}

// FuzzHandler sends arbitrary requests through the whole handler: it never
// panics, never answers 5xx, and every answer is JSON in one of the success
// shapes or the error shape.
func FuzzHandler(f *testing.F) {
	for _, s := range submitSeeds {
		f.Add("POST", "/v1/batch", s, true)
	}
	for _, seed := range []struct {
		method, path string
		auth         bool
	}{
		{"GET", "/v1/batch", true}, {"GET", "/v1/batch?limit=5", true}, {"GET", "/v1/batch?limit=0", true},
		{"GET", "/v1/batch/6f1c2a9e-0000-4000-8000-000000000000?wait=1s&since=0", true},
		{"GET", "/v1/batch/6f1c2a9e-0000-4000-8000-000000000000?results=1", true},
		{"GET", "/v1/batch/abc/3", true}, {"DELETE", "/v1/batch/abc", true}, {"PUT", "/v1/batch", true},
		{"HEAD", "/v1/batch/abc", true}, {"GET", "/v1/batch/../x", true}, {"GET", "/v1/batch/a%2Fb", true},
		{"OPTIONS", "*", true}, {"GET", "/", true}, {"GET", "/v1/batch/abc?wait=%zz", true},
		{"POST", "/v1/batch", false}, {"GET", "/v1/batch/x", false},
	} {
		f.Add(seed.method, seed.path, "", seed.auth)
	}

	clock := batchtest.NewClock()
	r := batchtest.NewRunner(f, batch.Config{
		Now: clock.Now, TTL: batch.Duration(time.Minute), SweepInterval: batch.Duration(50 * time.Millisecond),
		JobsPerCaller: 4, JobsTotal: 8, Logger: slog.New(slog.DiscardHandler),
	})
	auth := CallerFunc(testAuth)
	h, err := NewHandler(r, &HandlerConfig{Authenticate: auth, Precheck: PrecheckURL})
	if err != nil {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, method, path, body string, authed bool) {
		clock.Advance(2 * time.Minute) // lets the sweeper drop old jobs
		req, err := http.NewRequest(method, "http://batch.test"+path, strings.NewReader(body))
		if err != nil {
			return // not a request a server could receive
		}
		if authed {
			req.Header.Set("Authorization", "Bearer "+keyAlice)
		}
		rec := serveRequest(t, h, req) // which records it, to be checked against openapi.json
		checkAnswer(t, rec)
	})
}

// checkAnswer checks that an answer is below 500 and JSON in a known shape.
func checkAnswer(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 || rec.Code < 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	strict := func(v any) error {
		dec := json.NewDecoder(bytes.NewReader(rec.Body.Bytes()))
		dec.DisallowUnknownFields()
		return dec.Decode(v)
	}
	if rec.Code >= 400 {
		var e ErrorResponse
		if err := strict(&e); err != nil || e.Success || e.Error == "" {
			t.Fatalf("status %d, body %s is not the error shape (%v)", rec.Code, rec.Body, err)
		}
		return
	}
	for _, v := range []any{&SubmitResponse{}, &StatusResponse{}, &ResultResponse{}, &CancelResponse{}, &ListResponse{}} {
		if strict(v) == nil {
			return
		}
	}
	t.Fatalf("status %d, body %s is no success shape", rec.Code, rec.Body)
}
