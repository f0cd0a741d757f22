package batchhttp

import (
	"crypto/sha256"
	_ "embed" // for the document
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/siftfetch/batchkit/batch"
)

// openAPIDoc is the OpenAPI 3.1 document of the wire API, written by hand
// with sift's target options; [OpenAPI] puts the runner's in their place.
// The package's tests hold every answer of the [Handler] against it.
//
//go:embed openapi.json
var openAPIDoc []byte

// OpenAPIPath is the path the OpenAPI document is served at, as the
// document itself says: mount [OpenAPIHandler] there.
const OpenAPIPath = "/v1/openapi.json"

// OpenAPI returns the OpenAPI 3.1 document (JSON) of the wire API that
// [Handler] serves, and of [OpenAPIPath]: every route, status, header and
// body shape, with a target's fields those of opts, the runner's target
// options (see [batch.OptionSet]). Each call returns a new copy, which the
// caller may change.
func OpenAPI(opts batch.OptionSet) []byte {
	var doc map[string]any
	if err := json.Unmarshal(openAPIDoc, &doc); err != nil {
		panic("batchhttp: openapi.json: " + err.Error()) // embedded; the tests parse it
	}
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	target := opts.Schema()
	props := target["properties"].(map[string]any)
	for _, name := range []string{"url", "custom_id"} { // the runner's fields, beside the host's options
		if old, ok := schemas["Target"].(map[string]any)["properties"].(map[string]any)[name]; ok {
			props[name] = old
		}
	}
	target["description"] = "One URL to fetch and its options, flat beside `url`: the host's option set. " +
		"The runner stores the options and hands them to the host's fetcher. `null` counts as an absent field."
	schemas["Target"] = target
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		panic("batchhttp: openapi.json: " + err.Error())
	}
	return append(b, '\n')
}

// OpenAPIHandler returns a handler that serves the document of [OpenAPI]
// for opts to GET and HEAD, as application/json with an ETag, and answers
// 304 to a request whose If-None-Match names it. Its Cache-Control is
// "no-cache" rather than the API's "no-store": the document is the same
// for everyone and changes only with the server, so a client may keep it
// and revalidate. Like every answer of the [Handler], its answers carry an
// X-Request-Id (see [RequestIDHeader]); another method is 405 with an
// Allow header.
//
// It does not authenticate: the document holds no caller's data, and a
// client generator needs it before anyone has a key. A host that wants it
// behind a key wraps it.
func OpenAPIHandler(opts batch.OptionSet) http.Handler {
	doc := OpenAPI(opts)
	sum := sha256.Sum256(doc)
	etag := `"` + hex.EncodeToString(sum[:8]) + `"`
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requestID(w, r)
		h := w.Header()
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			WriteError(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed, "method not allowed", "")
			return
		}
		h.Set("ETag", etag)
		h.Set("Cache-Control", "no-cache")
		if etagMatch(r.Header.Values("If-None-Match"), etag) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		h.Set("Content-Type", "application/json")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Length", strconv.Itoa(len(doc)))
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			_, _ = w.Write(doc)
		}
	})
}

// etagMatch reports whether the If-None-Match header values name etag (or
// are "*"), comparing weakly as RFC 9110 asks for If-None-Match.
func etagMatch(values []string, etag string) bool {
	for _, v := range values {
		for tag := range strings.SplitSeq(v, ",") {
			tag = strings.TrimSpace(tag)
			if tag == "*" || strings.TrimPrefix(tag, "W/") == etag {
				return true
			}
		}
	}
	return false
}
