package openapitest_test

import (
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// TestOpenAPI_Document checks that openapi.json is a valid OpenAPI 3.1
// document, as kin-openapi's loader and validator (with the 3.1 options)
// have it.
func TestOpenAPI_Document(t *testing.T) {
	t.Parallel()
	c := mustContract(t) // loads and validates it
	if c.doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi %q, want 3.1.0", c.doc.OpenAPI)
	}
}

// TestOpenAPI_Codes checks that each code of the ErrorCode enum is the
// code of at least one documented answer. (batchhttp's TestOpenAPI_Codes
// checks that the enum is exactly its Code constants.)
func TestOpenAPI_Codes(t *testing.T) {
	t.Parallel()
	c := mustContract(t)
	var enum []string
	for _, v := range c.schema("ErrorCode").Enum {
		enum = append(enum, v.(string))
	}
	if len(enum) == 0 {
		t.Fatal("openapi.json's ErrorCode has no enum")
	}

	// Each code is what some documented answer narrows "code" to.
	answered := map[string]bool{}
	addCodes := func(r *openapi3.Response) {
		mt := r.Content.Get("application/json")
		if mt == nil || mt.Schema == nil {
			return
		}
		for _, part := range mt.Schema.Value.AllOf {
			code := part.Value.Properties["code"]
			if code == nil {
				continue
			}
			if code.Value.Const != nil {
				answered[code.Value.Const.(string)] = true
			}
			for _, v := range code.Value.Enum {
				answered[v.(string)] = true
			}
		}
	}
	for _, r := range c.doc.Components.Responses {
		addCodes(r.Value)
	}
	for _, item := range c.doc.Paths.Map() {
		for _, op := range item.Operations() {
			for _, r := range op.Responses.Map() {
				if r.Ref == "" {
					addCodes(r.Value)
				}
			}
		}
	}
	for _, code := range enum {
		if !answered[code] {
			t.Errorf("no documented answer has code %q", code)
		}
	}
}
