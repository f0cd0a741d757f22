// Package batchsift is sift's per-target option set, ready for a host
// whose fetch takes the fields of sift's /v1/fetch: mode, question, pages,
// grep, jq, context and recover, flat beside "url".
//
// Set [Options] as batch.Config.Options, and read a target's fields in the
// FetchFunc with [Read]:
//
//	cfg := batch.Config{Options: batchsift.Options, Fetch: func(ctx context.Context, c batch.Caller, t batch.Target) (batch.Result, error) {
//		f, err := batchsift.Read(t)
//		…
//	}}
package batchsift

import (
	"encoding/json"
	"fmt"

	"github.com/siftfetch/batchkit/batch"
)

// Modes are the values of the "mode" field.
const (
	ModeDefault = ""
	ModeClean   = "clean"
	ModeRaw     = "raw"
	ModeDigest  = "digest"
)

// Options is sift's option set.
var Options = batch.OptionSet{Fields: []batch.OptionField{
	{Name: "mode", Type: batch.OptionString, Enum: []string{ModeDefault, ModeClean, ModeRaw, ModeDigest},
		Description: `How the page is returned: "" (the default), "clean", "raw" or "digest".`},
	{Name: "question", Type: batch.OptionString, Description: "A question to answer from the page."},
	{Name: "pages", Type: batch.OptionString, Description: `Which pages of a paged document to fetch, such as "1-3".`},
	{Name: "grep", Type: batch.OptionString, Description: "A regular expression: only matching lines are returned."},
	{Name: "jq", Type: batch.OptionString, Description: "A jq filter applied to a JSON answer."},
	{Name: "context", Type: batch.OptionOptionalBool, Description: "Whether to return context around grep matches; absent is not false."},
	{Name: "recover", Type: batch.OptionBool, Description: "Whether to recover a failed fetch from an archive."},
}}

// Fields are a target's sift options, decoded.
type Fields struct {
	Mode     string `json:"mode,omitempty"`
	Question string `json:"question,omitempty"`
	Pages    string `json:"pages,omitempty"`
	Grep     string `json:"grep,omitempty"`
	JQ       string `json:"jq,omitempty"`
	// Context is optional: nil (absent) is not the same as false.
	Context *bool `json:"context,omitempty"`
	Recover bool  `json:"recover,omitempty"`
}

// Read decodes the sift options of t.
func Read(t batch.Target) (Fields, error) {
	var f Fields
	if len(t.Options) == 0 {
		return f, nil
	}
	if err := json.Unmarshal(t.Options, &f); err != nil {
		return Fields{}, fmt.Errorf("batchsift: target options: %w", err)
	}
	return f, nil
}

// JSON returns f as target options in their stored form, nil when f is
// empty.
func (f Fields) JSON() json.RawMessage {
	if f == (Fields{}) {
		return nil
	}
	b, err := json.Marshal(f)
	if err != nil {
		panic("batchsift: " + err.Error()) // strings and bools always encode
	}
	return b
}

// Target returns a target for url with the options f.
func (f Fields) Target(url string) batch.Target {
	return batch.Target{URL: url, Options: f.JSON()}
}
