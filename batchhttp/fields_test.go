package batchhttp

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchsift"
)

// TestTargetFields holds the runner's option set, the one list of a
// target's fields, against the places that must know them: the submit
// decoder (each field decodes into the target's options) and the OpenAPI
// document's Target schema. It runs for sift's set and for another host's.
func TestTargetFields(t *testing.T) {
	t.Parallel()
	other := batch.OptionSet{Fields: []batch.OptionField{
		{Name: "wait_for", Type: batch.OptionString},
		{Name: "full_page", Type: batch.OptionBool},
	}}
	for name, set := range map[string]batch.OptionSet{"sift": batchsift.Options, "other": other} {
		want := append([]string{"url", "custom_id"}, set.Names()...)
		var doc struct {
			Components struct {
				Schemas map[string]struct {
					Properties map[string]json.RawMessage `json:"properties"`
				} `json:"schemas"`
			} `json:"components"`
		}
		if err := json.Unmarshal(OpenAPI(set), &doc); err != nil {
			t.Fatal(err)
		}
		documented := slices.Sorted(maps.Keys(doc.Components.Schemas["Target"].Properties))
		if !slices.Equal(documented, slices.Sorted(slices.Values(want))) {
			t.Errorf("%s: OpenAPI Target.properties %q, want %q", name, documented, want)
		}
		for _, f := range set.Fields {
			val := `"x"`
			if f.Type != batch.OptionString {
				val = "true"
			} else if f.Enum != nil {
				val = strconv.Quote(f.Enum[len(f.Enum)-1])
			}
			body := fmt.Sprintf(`{"targets":[{"url":"https://example.com/",%q:%s}]}`, f.Name, val)
			req, err := DecodeSubmitRequest([]byte(body), set)
			if err != nil {
				t.Errorf("%s: field %q: the decoder refused %s: %v", name, f.Name, body, err)
				continue
			}
			if wantOpts := fmt.Sprintf(`{%q:%s}`, f.Name, val); string(req.Targets[0].Options) != wantOpts {
				t.Errorf("%s: field %q decoded into options %s, want %s", name, f.Name, req.Targets[0].Options, wantOpts)
			}
		}
		if _, err := DecodeSubmitRequest([]byte(`[{"url":"u","selector":"x"}]`), set); err == nil {
			t.Errorf("%s: a field outside the set was accepted", name)
		}
	}
}

// TestWebhookFields: the webhook payload's Go types and the document's
// schemas of it have the same fields.
func TestWebhookFields(t *testing.T) {
	t.Parallel()
	doc := mustDoc(t)
	f := func(typ reflect.Type, schema string) {
		t.Helper()
		var fields, documented []string
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			fields = append(fields, name)
		}
		for name := range doc.schema(t, schema).Properties {
			documented = append(documented, name)
		}
		slices.Sort(fields)
		slices.Sort(documented)
		if !slices.Equal(fields, documented) {
			t.Errorf("openapi.json %s.properties %q, want %s's %q", schema, documented, typ, fields)
		}
	}
	f(reflect.TypeFor[WebhookPayload](), "WebhookPayload")
	f(reflect.TypeFor[WebhookData](), "WebhookData")
	f(reflect.TypeFor[WebhookTargetPayload](), "WebhookTargetPayload")
	f(reflect.TypeFor[WebhookTargetData](), "WebhookTargetData")
	f(reflect.TypeFor[WebhookTarget](), "WebhookTarget")
	f(reflect.TypeFor[Webhook](), "Webhook")
}
