package batchcli_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchcli"
	"github.com/siftfetch/batchkit/batchhttp"
)

// HTML in what the CLI prints reads as HTML, not \u003c…\u003e: whether
// the server wrote it plainly (batchhttp does) or escaped it, as a result
// envelope encoded by a host's encoding/json defaults comes back. A literal
// backslash before "u003c" stays, and the output decodes to the same value
// as the server's body.
func TestCLI_PrintsHTMLUnescaped(t *testing.T) {
	t.Parallel()
	t.Run("EscapedByTheServer", func(t *testing.T) {
		t.Parallel()
		body := `{"job_id":"j","idx":0,"url":"https://a.test/?a=1\u0026b=2","status":"done",` +
			`"result":{"content":"\u003cp class=\"x\"\u003eFish \u0026 chips\u003C/p\u003E","note":"a \\u003c stays, \\\u0026 too"},` +
			`"expires_at":"2026-01-02T03:04:05Z"}`
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, body)
		}))
		t.Cleanup(srv.Close)
		r := runCLI(t, t.Context(), srv.URL, "k", nil, "", "result", "j", "0")
		r.check(t, "result", batchcli.ExitOK)
		for _, want := range []string{
			`"url": "https://a.test/?a=1&b=2"`,
			`"content": "<p class=\"x\">Fish & chips</p>"`,
			`"note": "a \\u003c stays, \\& too"`,
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("stdout lacks %s:\n%s", want, r.stdout)
			}
		}
		var got, want any
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("stdout is not JSON: %v\n%s", err, r.stdout)
		}
		if err := json.Unmarshal([]byte(body), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("stdout decodes to %v, the server's body to %v", got, want)
		}
	})
	t.Run("RealServer", func(t *testing.T) {
		t.Parallel()
		_, url := serve(t, func(_ context.Context, _ batch.Caller, tg batch.Target) (batch.Result, error) {
			return batch.Result{Content: "<h1>Tom & Jerry</h1>", Meta: map[string]any{"title": "<Tom>"}}, nil
		})
		id := submit(t, url, `[{"url":"https://a.test/<x>&y"}]`)
		r := runCLI(t, t.Context(), url, "alice-key", nil, "", "status", id, "--wait", "--results")
		r.check(t, "status --wait --results", batchcli.ExitOK)
		for _, want := range []string{`"url": "https://a.test/<x>&y"`, `"content": "<h1>Tom & Jerry</h1>"`, `"title": "<Tom>"`} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("stdout lacks %s:\n%s", want, r.stdout)
			}
		}
		if strings.Contains(r.stdout, `\u00`) {
			t.Errorf("stdout has an escape:\n%s", r.stdout)
		}
		if st := decode[batchhttp.StatusResponse](t, []byte(r.stdout)); st.Status != batch.JobDone {
			t.Errorf("status %s", st.Status)
		}
	})
}
