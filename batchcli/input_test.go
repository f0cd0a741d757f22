package batchcli_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchcli"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/batchhttp/batchserver"
	"github.com/siftfetch/batchkit/internal/apitest"
)

func TestParseTargets(t *testing.T) {
	t.Parallel()
	ok := func(in string, want ...batch.Target) {
		t.Helper()
		got, err := batchcli.ParseTargets(strings.NewReader(in), batchsift.Options)
		if err != nil {
			t.Fatalf("ParseTargets(%q, batchsift.Options): %v", in, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("ParseTargets(%q, batchsift.Options) = %s, want %s", in, asJSON(t, got), asJSON(t, want))
		}
	}
	url := func(u string) batch.Target { return batch.Target{URL: u} }
	no, yes := false, true
	ok(`{"targets":[{"url":"https://a.test/","mode":"clean"},{"url":"https://b.test/"}]}`,
		batch.Target{URL: "https://a.test/", Options: batchsift.Fields{Mode: "clean"}.JSON()}, url("https://b.test/"))
	ok(` [{"url":"https://a.test/"}] `, url("https://a.test/"))
	ok("https://a.test/\n\n# a comment\n  https://b.test/x  \n", url("https://a.test/"), url("https://b.test/x"))
	ok(`[{"url":"u","mode":"raw","question":"q","pages":"1-2","grep":"g","jq":".x","context":false,"recover":true}]`,
		batch.Target{URL: "u", Options: batchsift.Fields{Mode: "raw", Question: "q", Pages: "1-2", Grep: "g", JQ: ".x", Context: &no, Recover: true}.JSON()})
	ok(`[{"url":"u","context":true}]`, batch.Target{URL: "u", Options: batchsift.Fields{Context: &yes}.JSON()})
	// null is absent, for context too (absent is not false).
	ok(`[{"url":"u","context":null,"mode":null,"recover":null}]`, url("u"))
	ok(`{"targets":[{"url":"<b>&amp;</b>"}]}`, url("<b>&amp;</b>"))

	bad := func(in, wantInErr string) {
		t.Helper()
		_, err := batchcli.ParseTargets(strings.NewReader(in), batchsift.Options)
		if err == nil || !strings.Contains(err.Error(), wantInErr) {
			t.Errorf("ParseTargets(%q, batchsift.Options) error = %v, want one containing %q", in, err, wantInErr)
		}
	}
	bad("", "no targets")
	bad("  \n# only a comment\n", "no targets")
	bad(`{"targets":[]}`, "no targets")
	bad(`[]`, "no targets")
	bad(`{}`, `missing field "targets"`)
	bad(`{"targets":null}`, `"targets" must be a list, not null`)
	bad(`{"targets":{"url":"u"}}`, `"targets" must be a list`)
	bad(`{"targets":[{"url":"u","bogus":1}]}`, `target 0: unknown field "bogus"`)
	bad(`{"Targets":[{"url":"u"}]}`, `unknown field "Targets" (field names are case-sensitive: did you mean "targets"?)`)
	bad(`[{"url":"u"},{"URL":"v"}]`, `target 1: unknown field "URL" (field names are case-sensitive: did you mean "url"?)`)
	bad(`[{"url":"u","Mode":"raw"}]`, `did you mean "mode"?`)
	bad(`[{"url":"u","url":"v"}]`, `target 0: duplicate field "url"`)
	bad(`{"targets":[{"url":"u"}],"targets":[{"url":"v"}]}`, `duplicate field "targets"`)
	bad(`[{"url":"u"}] [1]`, "data after the JSON value")
	bad(`{"targets":[{"url":"u"}]} x`, "data after the JSON value")
	bad(`{"targets":[{"url":5}]}`, `target 0: "url" must be a string`)
	bad(`[{"url":"u","context":"yes"}]`, `target 0: "context" must be a boolean`)
	bad(`[{"url":"u","recover":1}]`, `target 0: "recover" must be a boolean`)
	bad(`[{"url":"u","grep":true}]`, `target 0: "grep" must be a string`)
	bad(`[{"url":"u","jq":{}}]`, `target 0: "jq" must be a string`)
	bad(`["https://a.test/"]`, "target 0 must be an object")
	bad(`[null]`, "target 0 must be an object")
	bad("{\n  \"targets\": [\n    {\"url\" \"u\"}\n  ]\n}", "malformed JSON at line 3, column 12")
	bad(`[{"url":"u"}`, "unexpected end of input")
	bad("https://a.test/\xff\n", "not valid UTF-8")
	bad(`[{"url":"`+"\xff"+`"}]`, "not valid UTF-8")
	bad("https://a.test/ https://b.test/", "not a single URL")
	bad(strings.Repeat("x", 2<<20), "over")
}

func asJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The CLI refuses a targets object exactly when the server's submit decoder
// does, so that a file never means one thing to the CLI and another to the
// server.
func TestParseTargets_AsStrictAsServer(t *testing.T) {
	t.Parallel()
	r := batchtest.NewRunner(t, batch.Config{JobsPerCaller: 64, JobsTotal: 64, Options: batchsift.Options})
	srvURL := apitest.Serve(t, r, batchserver.Key{Name: "alice", Secret: "alice-key"})
	serverRefuses := func(body string) (bool, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srvURL+"/v1/batch", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer alice-key")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e batchhttp.ErrorResponse
		_ = json.NewDecoder(resp.Body).Decode(&e)
		switch resp.StatusCode {
		case http.StatusAccepted:
			return false, ""
		case http.StatusBadRequest:
			return true, e.Error
		}
		t.Fatalf("POST %s: HTTP %d %s", body, resp.StatusCode, e.Error)
		return false, ""
	}
	for i, body := range []string{
		// Accepted by both.
		`{"targets":[{"url":"https://a.test/0"}]}`,
		`{"targets":[{"url":"https://a.test/1","mode":"clean","question":"q","pages":"1","grep":"g","jq":".","context":false,"recover":true}]}`,
		`{"targets":[{"url":"https://a.test/2","context":null,"mode":null}]}`,
		` {"targets":[{"url":"https://a.test/3"}]}` + "\n\t ",
		// Refused by both.
		`{"targets":[{"URL":"https://a.test/"}]}`,
		`{"targets":[{"Url":"https://a.test/"}]}`,
		`{"TARGETS":[{"url":"https://a.test/"}]}`,
		`{"targets":[{"url":"https://a.test/","mOde":"raw"}]}`,
		`{"targets":[{"url":"https://a.test/","bogus":1}]}`,
		`{"targets":[{"url":"https://a.test/"}],"extra":1}`,
		`{"targets":[{"url":"https://a.test/","url":"https://b.test/"}]}`,
		`{"targets":[{"url":"https://a.test/"}],"targets":[{"url":"https://b.test/"}]}`,
		`{"targets":[{"url":"https://a.test/","context":"false"}]}`,
		`{"targets":[{"url":"https://a.test/","recover":0}]}`,
		`{"targets":[{"url":"https://a.test/","mode":1}]}`,
		`{"targets":[{"url":["https://a.test/"]}]}`,
		`{"targets":["https://a.test/"]}`,
		`{"targets":[null]}`,
		`{"targets":null}`,
		`{"targets":{}}`,
		`{"targets":[]}`,
		`{}`,
		`{"targets":[{"url":"https://a.test/"}]}{}`,
		`{"targets":[{"url":"https://a.test/"}]`,
		`{"targets":[{"url":"https://a.test/` + "\xff" + `"}]}`,
	} {
		refused, msg := serverRefuses(body)
		_, err := batchcli.ParseTargets(strings.NewReader(body), batchsift.Options)
		if (err != nil) != refused {
			t.Errorf("case %d %q: CLI error %v, server refuses: %v %q", i, body, err, refused, msg)
		}
	}
}
