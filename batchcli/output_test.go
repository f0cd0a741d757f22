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
		body := `{"job_id":"j","idx":0,"url":"https://a.test/?a=1\u0026b=2","status":"done","attempts":1,` +
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

// Text from the server never reaches the terminal with control characters
// in it: an error's message and hint on stderr are printed with them
// escaped, and JSON on stdout carries DEL and the C1 controls (which JSON
// allows raw, and which some terminals obey) as \u escapes, decoding to the
// same value.
func TestCLI_StripsControlCharacters(t *testing.T) {
	t.Parallel()
	const evil = "a\x1b]0;pwned\x07b\x1b[2Jc\u009b31md\x7fe\u202ef"
	quoted, _ := json.Marshal(evil)
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"success":false,"error":`+string(quoted)+`,"hint":`+string(quoted)+`}`)
	}))
	t.Cleanup(refusing.Close)
	body := `{"job_id":"j","idx":0,"url":"https://a.test/","status":"done","attempts":1,"result":{"content":` + string(quoted) + `},"expires_at":"2026-01-02T03:04:05Z"}`
	answering := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, body)
	}))
	t.Cleanup(answering.Close)

	bad := func(where, out string) {
		t.Helper()
		for _, c := range "\x1b\x07\x7f\u009b\u202e" {
			if strings.ContainsRune(out, c) {
				t.Errorf("%s holds the control character %U: %q", where, c, out)
			}
		}
	}
	r := runCLI(t, t.Context(), refusing.URL, "k", nil, "", "status", "x")
	bad("stderr", r.stderr)
	if !strings.Contains(r.stderr, `a\x1b]0;pwned\ab`) {
		t.Errorf("stderr does not show the message escaped: %q", r.stderr)
	}
	r = runCLI(t, t.Context(), answering.URL, "k", nil, "", "result", "j", "0")
	r.check(t, "result", batchcli.ExitOK)
	bad("stdout", r.stdout)
	var got struct{ Result struct{ Content string } }
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got.Result.Content != evil {
		t.Errorf("stdout decodes to %q, %v; want the server's text", got.Result.Content, err)
	}
}
