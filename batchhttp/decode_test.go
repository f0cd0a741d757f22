package batchhttp

import (
	"errors"
	"net/http"
	"reflect"
	"testing"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchsift"
)

func TestDecodeSubmit(t *testing.T) {
	t.Parallel()

	yes, no := true, false

	ok := func(body string, want ...batch.Target) {
		t.Helper()
		got, err := decodeSubmit([]byte(body), batchsift.Options, 0)
		if err != nil {
			t.Errorf("decodeSubmit(%s, batchsift.Options): %v", body, err)
			return
		}
		if !reflect.DeepEqual(got.Targets, want) || got.Webhook != nil {
			t.Errorf("decodeSubmit(%s, batchsift.Options) = %+v, want %+v", body, got, want)
		}
	}
	hook := func(body, wantURL string, wantEvents ...string) {
		t.Helper()
		got, err := decodeSubmit([]byte(body), batchsift.Options, 0)
		if err != nil || got.Webhook == nil || got.Webhook.URL != wantURL || len(got.Targets) != 1 ||
			!reflect.DeepEqual(got.Webhook.Events, wantEvents) {
			t.Errorf("decodeSubmit(%s, batchsift.Options) = %+v, %v; want one target and webhook %q with events %q", body, got, err, wantURL, wantEvents)
		}
	}
	bad := func(body, wantMsg string) {
		t.Helper()
		_, err := decodeSubmit([]byte(body), batchsift.Options, 0)
		he, isHTTP := err.(*httpError)
		if !isHTTP || he.status != 400 || he.msg != wantMsg {
			t.Errorf("decodeSubmit(%q, batchsift.Options) = %v, want 400 %q", body, err, wantMsg)
		}
	}

	ok(`{"targets":[{"url":"https://a.test/"}]}`, batch.Target{URL: "https://a.test/"})
	ok(" \n{ \"targets\" : [ {\"url\":\"u\"} ] } \n\t", batch.Target{URL: "u"})
	ok(`{"targets":[{"url":"u","mode":"clean","question":"q","pages":"1-2","grep":"g","jq":".a","context":true,"recover":true}]}`,
		batch.Target{URL: "u", Options: batchsift.Fields{Mode: "clean", Question: "q", Pages: "1-2", Grep: "g", JQ: ".a", Context: &yes, Recover: true}.JSON()})
	ok(`{"targets":[{"url":"u","context":false},{"url":"v","context":null},{"url":"w"}]}`,
		batch.Target{URL: "u", Options: batchsift.Fields{Context: &no}.JSON()}, batch.Target{URL: "v"}, batch.Target{URL: "w"})
	ok(`{"targets":[{"url":"u","mode":null,"recover":null}]}`, batch.Target{URL: "u"})
	ok(`{"targets":[{"url":"\u0068ttps://a.test/\u00e9"}]}`, batch.Target{URL: "https://a.test/é"})
	ok(`{"targets":[{}]}`, batch.Target{}) // the runner refuses the empty url

	// Webhooks.
	hook(`{"targets":[{"url":"u"}],"webhook":{"url":"https://hooks.test/in?t=1"}}`, "https://hooks.test/in?t=1")
	hook(`{"webhook":{"url":"w"},"targets":[{"url":"u"}]}`, "w")
	ok(`{"targets":[{"url":"u"}],"webhook":null}`, batch.Target{URL: "u"})
	bad(`{"targets":[{"url":"u"}],"webhook":"https://a/"}`, `invalid batch: "webhook" must be an object`)
	bad(`{"targets":[{"url":"u"}],"webhook":[]}`, `invalid batch: "webhook" must be an object`)
	bad(`{"targets":[{"url":"u"}],"webhook":{}}`, "invalid batch: webhook: empty url")
	bad(`{"targets":[{"url":"u"}],"webhook":{"url":""}}`, "invalid batch: webhook: empty url")
	bad(`{"targets":[{"url":"u"}],"webhook":{"url":null}}`, "invalid batch: webhook: empty url")
	bad(`{"targets":[{"url":"u"}],"webhook":{"url":7}}`, `invalid batch: webhook: "url" must be a string`)
	bad(`{"targets":[{"url":"u"}],"webhook":{"URL":"a"}}`, `invalid batch: webhook: unknown field "URL" (field names are case-sensitive: did you mean "url"?)`)
	bad(`{"targets":[{"url":"u"}],"webhook":{"url":"a","secret":"s"}}`, `invalid batch: webhook: unknown field "secret"`)
	bad(`{"targets":[{"url":"u"}],"webhook":{"url":"a","url":"b"}}`, `invalid batch: webhook: duplicate field "url"`)
	bad(`{"targets":[{"url":"u"}],"webhook":null,"webhook":{"url":"a"}}`, `invalid batch: duplicate field "webhook"`)
	// A webhook's events: a non-empty list of strings (the runner knows
	// the types).
	hook(`{"targets":[{"url":"u"}],"webhook":{"events":["batch.target.finished","batch.finished"],"url":"w"}}`, "w",
		"batch.target.finished", "batch.finished")
	hook(`{"targets":[{"url":"u"}],"webhook":{"url":"w","events":null}}`, "w")
	bad(`{"targets":[{"url":"u"}],"webhook":{"url":"w","events":[]}}`, `invalid batch: webhook: "events" is empty`)
	bad(`{"targets":[{"url":"u"}],"webhook":{"url":"w","events":"batch.finished"}}`, `invalid batch: webhook: "events" must be a list of event types`)
	bad(`{"targets":[{"url":"u"}],"webhook":{"url":"w","events":[1]}}`, `invalid batch: webhook: "events" must be a list of event types`)
	bad(`{"targets":[{"url":"u"}],"webhook":{"url":"w","events":["a","b","c","d","e","f","g","h","i"]}}`, `invalid batch: webhook: more than 8 "events"`)
	bad(`{"targets":[{"url":"u"}],"webhook":{"url":"w","events":["a"],"events":["b"]}}`, `invalid batch: webhook: duplicate field "events"`)
	bad(`{"targets":[{"url":"u"}],"webhook":{"url":"w","event":["a"]}}`, `invalid batch: webhook: unknown field "event"`)
	bad(`{"targets":[{"url":"u"}],"Webhook":{"url":"a"}}`, `invalid batch: unknown field "Webhook" (field names are case-sensitive: did you mean "webhook"?)`)

	// Syntax, trailing data, encoding.
	bad(``, "invalid batch: empty body")
	bad("  \n", "invalid batch: empty body")
	bad(`{"targets":[{"url":"u"}]`, "invalid batch: malformed JSON: unexpected end of input")
	bad(`{"targets":[{"url":"u"},]}`, "invalid batch: malformed JSON at line 1, column 25")
	bad(`{"targets":[{"url":"u"}]}{}`, "invalid batch: data after the JSON value")
	bad(`{"targets":[{"url":"u"}]} x`, "invalid batch: data after the JSON value")
	bad(`{"targets":[{"url":"u"}]}]`, "invalid batch: data after the JSON value")
	bad("{\"targets\":[{\"url\":\"\xff\"}]}", "invalid batch: body is not valid UTF-8")
	// Shape.
	bad(`null`, "invalid batch: body must be a JSON object")
	bad(`[{"url":"u"}]`, "invalid batch: body must be a JSON object")
	bad(`"targets"`, "invalid batch: body must be a JSON object")
	bad(`{}`, `invalid batch: missing field "targets"`)
	bad(`{"targets":null}`, `invalid batch: "targets" must be a list, not null`)
	bad(`{"targets":[]}`, "invalid batch: no targets")
	bad(`{"targets":{"url":"u"}}`, `invalid batch: "targets" must be a list`)
	bad(`{"targets":"u"}`, `invalid batch: "targets" must be a list`)
	bad(`{"targets":[null]}`, `invalid batch: target 0 must be an object, such as {"url": "https://example.com/"}`)
	bad(`{"targets":[{"url":"u"},"v"]}`, `invalid batch: target 1 must be an object, such as {"url": "https://example.com/"}`)
	bad(`{"targets":[[{"url":"u"}]]}`, `invalid batch: target 0 must be an object, such as {"url": "https://example.com/"}`)
	// Unknown, case-variant and duplicate keys.
	bad(`{"targets":[{"url":"u"}],"idempotency_key":"k"}`, `invalid batch: unknown field "idempotency_key"`)
	bad(`{"TARGETS":[{"url":"u"}]}`, `invalid batch: unknown field "TARGETS" (field names are case-sensitive: did you mean "targets"?)`)
	bad(`{"Targets":[{"url":"u"}]}`, `invalid batch: unknown field "Targets" (field names are case-sensitive: did you mean "targets"?)`)
	bad(`{"targets":[{"URL":"u"}]}`, `invalid batch: target 0: unknown field "URL" (field names are case-sensitive: did you mean "url"?)`)
	bad(`{"targets":[{"url":"u","Mode":"raw"}]}`, `invalid batch: target 0: unknown field "Mode" (field names are case-sensitive: did you mean "mode"?)`)
	bad(`{"targets":[{"url":"u","options":{}}]}`, `invalid batch: target 0: unknown field "options"`)
	bad(`{"targets":[{"url":"u"}],"targets":[{"url":"v"}]}`, `invalid batch: duplicate field "targets"`)
	bad(`{"targets":[{"url":"u","url":"v"}]}`, `invalid batch: target 0: duplicate field "url"`)
	bad(`{"targets":[{"url":"u"},{"url":"v","mode":"raw","mode":"clean"}]}`, `invalid batch: target 1: duplicate field "mode"`)
	bad(`{"targets":[{"url":"u","\u0075rl":"v"}]}`, `invalid batch: target 0: duplicate field "url"`)
	bad(`{"targets":[{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa":1}]}`,
		`invalid batch: target 0: unknown field "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"…`)
	// Wrong types.
	bad(`{"targets":[{"url":1}]}`, `invalid batch: target 0: "url" must be a string`)
	bad(`{"targets":[{"url":true}]}`, `invalid batch: target 0: "url" must be a string`)
	bad(`{"targets":[{"url":["u"]}]}`, `invalid batch: target 0: "url" must be a string`)
	bad(`{"targets":[{"url":"u","question":{}}]}`, `invalid batch: target 0: "question" must be a string`)
	bad(`{"targets":[{"url":"u","context":"yes"}]}`, `invalid batch: target 0: "context" must be a boolean`)
	bad(`{"targets":[{"url":"u","recover":1}]}`, `invalid batch: target 0: "recover" must be a boolean`)
	bad(`{"targets":[{"url":"u","recover":[]}]}`, `invalid batch: target 0: "recover" must be a boolean`)
}

func TestDecodeSubmitRequest(t *testing.T) {
	t.Parallel()
	for _, in := range []string{`{"targets":[{"url":"u","mode":"raw"}]}`, ` [{"url":"u","mode":"raw"}] `} {
		req, err := DecodeSubmitRequest([]byte(in), batchsift.Options)
		if ts := req.Targets; err != nil || len(ts) != 1 || ts[0].URL != "u" || string(ts[0].Options) != `{"mode":"raw"}` || req.Webhook != nil {
			t.Errorf("DecodeSubmitRequest(%q, batchsift.Options) = %+v, %v", in, req, err)
		}
	}
	for in, want := range map[string]string{
		`[{"URL":"u"}]`:           `invalid targets: target 0: unknown field "URL" (field names are case-sensitive: did you mean "url"?)`,
		`[]`:                      "invalid targets: no targets",
		`"u"`:                     `invalid targets: input must be a JSON object {"targets": […]} or a list of targets`,
		"[\n{\"url\" \"u\"}]":     "invalid targets: malformed JSON at line 2, column 8",
		`{"targets":[{"url":1}]}`: `invalid targets: target 0: "url" must be a string`,
	} {
		if _, err := DecodeSubmitRequest([]byte(in), batchsift.Options); err == nil || err.Error() != want {
			t.Errorf("DecodeSubmitRequest(%q, batchsift.Options) error = %v, want %q", in, err, want)
		}
	}
	if req, err := DecodeSubmitRequest([]byte(`{"targets":[{"url":"u"}],"webhook":{"url":"https://h.test/"}}`), batchsift.Options); err != nil || req.Webhook == nil {
		t.Errorf("DecodeSubmitRequest with a webhook = %+v, %v", req, err)
	}
	// The server's own form refuses a bare list.
	if _, err := decodeSubmit([]byte(`[{"url":"u"}]`), batchsift.Options, 0); err == nil || err.Error() != "invalid batch: body must be a JSON object" {
		t.Errorf("decodeSubmit of a list: %v", err)
	}
}

// The decoder refuses a list over the cap as target max+1 begins, with the
// 422 of the handler's check, whatever the rest of the body holds; a list
// at the cap decodes. DecodeSubmitRequest has no cap.
func TestDecodeSubmit_TargetCap(t *testing.T) {
	t.Parallel()
	f := func(body string, wantErr string) {
		t.Helper()
		_, err := decodeSubmit([]byte(body), batchsift.Options, 2)
		if wantErr == "" {
			if err != nil {
				t.Errorf("decodeSubmit(%s, max 2): %v", body, err)
			}
			return
		}
		he, ok := errors.AsType[*httpError](err)
		if !ok || he.status != http.StatusUnprocessableEntity || he.code != CodeTooManyTargets || he.msg != wantErr {
			t.Errorf("decodeSubmit(%s, max 2) = %v, want 422 %s %q", body, err, CodeTooManyTargets, wantErr)
		}
	}
	f(`{"targets":[{"url":"a"},{"url":"b"}]}`, "")
	f(`{"targets":[{"url":"a"},{"url":"b"},{"url":"c"}]}`, "too many targets (max 2)")
	f(`{"targets":[{},{},{}]}`, "too many targets (max 2)")
	f(`{"targets":[{},{},{"bogus":1}`, "too many targets (max 2)")
	f(`{"targets":[{},{},{}],"webhook":{"url":"https://h.test/"}}`, "too many targets (max 2)")
	if req, err := DecodeSubmitRequest([]byte(`[{"url":"a"},{"url":"b"},{"url":"c"}]`), batchsift.Options); err != nil || len(req.Targets) != 3 {
		t.Errorf("DecodeSubmitRequest of 3 targets = %+v, %v; want all 3", req, err)
	}
}
