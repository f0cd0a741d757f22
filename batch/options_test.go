package batch

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestOptionSet_Normalize(t *testing.T) {
	t.Parallel()
	ok := func(in, want string) {
		t.Helper()
		got, err := testOptions.Normalize(json.RawMessage(in))
		if err != nil || string(got) != want {
			t.Errorf("Normalize(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
	bad := func(in, wantErr string) {
		t.Helper()
		got, err := testOptions.Normalize(json.RawMessage(in))
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("Normalize(%s) = %s, %v; want an error with %q", in, got, err, wantErr)
		}
	}
	ok(``, ``)
	ok(`{}`, ``)
	ok(`{"mode":""}`, ``)                                                     // empty is absent
	ok(`{"recover":false}`, ``)                                               // false is absent
	ok(`{"question":null}`, ``)                                               // null is absent
	ok(`{"context":false}`, `{"context":false}`)                              // an optional bool keeps false
	ok(` {"recover": true, "mode": "raw"} `, `{"mode":"raw","recover":true}`) // declared order, compact
	ok(`{"grep":"a\u003cb"}`, `{"grep":"a\u003cb"}`)
	bad(`[]`, "must be a JSON object")
	bad(`{"selector":"x"}`, `unknown field "selector"`)
	bad(`{"Mode":"raw"}`, `did you mean "mode"?`)
	bad(`{"mode":"bogus"}`, `unknown mode "bogus"`)
	bad(`{"mode":true}`, `"mode" must be a string`)
	bad(`{"recover":"yes"}`, `"recover" must be a boolean`)
	bad("{\"question\":\"\xc3\"}", "invalid UTF-8")
}

func TestOptionSet_Validate(t *testing.T) {
	t.Parallel()
	f := func(set OptionSet, wantErr string) {
		t.Helper()
		err := set.validate()
		if (err == nil) != (wantErr == "") || err != nil && !strings.Contains(err.Error(), wantErr) {
			t.Errorf("validate(%+v) = %v, want %q", set, err, wantErr)
		}
	}
	f(OptionSet{}, "")
	f(testOptions, "")
	f(OptionSet{Fields: []OptionField{{Name: "url", Type: OptionString}}}, `"url" is declared twice`)
	f(OptionSet{Fields: []OptionField{{Name: "a", Type: OptionString}, {Name: "a", Type: OptionBool}}}, `"a" is declared twice`)
	f(OptionSet{Fields: []OptionField{{Name: "a"}}}, `"a" has no type`)
	f(OptionSet{Fields: []OptionField{{Name: "", Type: OptionBool}}}, "has no name")
	f(OptionSet{Fields: []OptionField{{Name: "a", Type: OptionBool, Enum: []string{"x"}}}}, "only a string option")
	cfg := Config{Options: OptionSet{Fields: []OptionField{{Name: "url", Type: OptionString}}}}.withDefaults()
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "options:") {
		t.Errorf("a config with a bad option set: %v", err)
	}
}

func TestOptionSet_Schema(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(testOptions.Schema())
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Required   []string                   `json:"required"`
		Additional bool                       `json:"additionalProperties"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Required) != 1 || s.Required[0] != "url" || s.Additional || len(s.Properties) != 8 {
		t.Errorf("schema = %s", b)
	}
	if got := string(s.Properties["mode"]); !strings.Contains(got, `"enum":["","clean","raw","digest"]`) || !strings.Contains(got, `"type":"string"`) {
		t.Errorf("mode's schema = %s", got)
	}
	if got := string(s.Properties["context"]); !strings.Contains(got, `"type":"boolean"`) {
		t.Errorf("context's schema = %s", got)
	}
}
