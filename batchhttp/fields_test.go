package batchhttp

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

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

	var documented []string
	for name := range mustDoc(t).schema(t, "Target").Properties {
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
}
