package batchhttp

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/siftfetch/batchkit/batch"
)

// targetJSONFields returns the JSON names of batch.Target's fields, in
// declaration order, with the embedded Options flattened, and the field
// each names.
func targetJSONFields(t *testing.T) ([]string, map[string][]int) {
	t.Helper()
	var names []string
	index := map[string][]int{}
	var walk func(typ reflect.Type, at []int)
	walk = func(typ reflect.Type, at []int) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			idx := append(slices.Clone(at), i)
			if f.Anonymous {
				walk(f.Type, idx)
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				t.Fatalf("batch.Target field %s has no JSON name", f.Name)
			}
			names = append(names, name)
			index[name] = idx
		}
	}
	walk(reflect.TypeFor[batch.Target](), nil)
	return names, index
}

// TestTargetFields holds the one list of a target's fields, batch.Target's
// JSON tags, against every place that must know them: the submit decoder
// (its field list, and that each field decodes into its struct field), the
// OpenAPI document's Target schema, and the idempotency key (each field
// is part of it). A field added to batch.Target and forgotten in one of
// them fails here rather than being answered 400 or hashed away.
func TestTargetFields(t *testing.T) {
	t.Parallel()
	names, index := targetJSONFields(t)

	if !slices.Equal(names, targetFields) {
		t.Errorf("the decoder's target fields %q, want batch.Target's %q", targetFields, names)
	}

	c := mustContract(t)
	var documented []string
	for name := range c.schema("Target").Properties {
		documented = append(documented, name)
	}
	sorted := slices.Sorted(slices.Values(names))
	slices.Sort(documented)
	if !slices.Equal(documented, sorted) {
		t.Errorf("openapi.json Target.properties %q, want batch.Target's %q", documented, sorted)
	}

	base := batch.Target{URL: "https://example.com/"}
	baseKey := batch.IdemKey("alice", []batch.Target{base})
	for _, name := range names {
		if name == "url" {
			continue
		}
		// A value of the field's kind that is not its zero value.
		f := reflect.TypeFor[batch.Target]().FieldByIndex(index[name])
		var val string
		switch {
		case f.Type.Kind() == reflect.String:
			val = `"x"`
		case f.Type.Kind() == reflect.Bool, f.Type.Kind() == reflect.Pointer && f.Type.Elem().Kind() == reflect.Bool:
			val = "true"
		default:
			t.Errorf("batch.Target field %q is a %s: teach the decoder and this test", name, f.Type)
			continue
		}
		body := fmt.Sprintf(`{"targets":[{"url":"https://example.com/",%q:%s}]}`, name, val)
		req, err := DecodeSubmitRequest([]byte(body))
		if err != nil {
			t.Errorf("field %q: the decoder refused %s: %v", name, body, err)
			continue
		}
		got := reflect.ValueOf(req.Targets[0]).FieldByIndex(index[name])
		if got.IsZero() {
			t.Errorf("field %q: decoded into no struct field (%+v)", name, req.Targets[0])
		}
		if key := batch.IdemKey("alice", req.Targets); key == baseKey {
			t.Errorf("field %q: not part of the idempotency key", name)
		}
		var canon []map[string]json.RawMessage
		if err := json.Unmarshal(batch.CanonicalTargets(req.Targets), &canon); err != nil || canon[0][name] == nil {
			t.Errorf("field %q: not in the canonical form %s (%v)", name, batch.CanonicalTargets(req.Targets), err)
		}
	}
}

// checkWebhookDelivery holds a real delivery against the document's
// batchFinished webhook: its headers and its body.
func checkWebhookDelivery(t *testing.T, d delivery) {
	t.Helper()
	c := mustContract(t)
	item := c.doc.Webhooks["batchFinished"]
	if item == nil || item.Post == nil {
		t.Fatal("openapi.json has no batchFinished webhook")
	}
	op := item.Post
	for _, p := range op.Parameters {
		v := d.header.Get(p.Value.Name)
		if v == "" {
			t.Errorf("the delivery has no %s header", p.Value.Name)
			continue
		}
		if err := p.Value.Schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
			t.Errorf("header %s %q: %v", p.Value.Name, v, err)
		}
	}
	var body any
	if err := json.Unmarshal(d.body, &body); err != nil {
		t.Fatalf("delivery body: %v", err)
	}
	schema := op.RequestBody.Value.Content.Get("application/json").Schema.Value
	if err := schema.VisitJSON(body, openapi3.EnableJSONSchema2020()); err != nil {
		t.Errorf("delivery body %s against WebhookPayload: %v", d.body, err)
	}
}

// TestWebhookFields: the webhook payload's Go types and the document's
// schemas of it have the same fields.
func TestWebhookFields(t *testing.T) {
	t.Parallel()
	c := mustContract(t)
	f := func(typ reflect.Type, schema string) {
		t.Helper()
		var fields, documented []string
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			fields = append(fields, name)
		}
		for name := range c.schema(schema).Properties {
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
}
