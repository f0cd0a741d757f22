package batchhttp

import (
	"bytes"
	"crypto/sha256"
	_ "embed" // for the document
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
)

// openAPIDoc is the OpenAPI 3.1 document of the wire API, written by hand.
// The package's tests hold every answer of the [Handler] against it.
//
//go:embed openapi.json
var openAPIDoc []byte

// openAPIETag is the document's entity tag: a prefix of its SHA-256.
var openAPIETag = func() string {
	sum := sha256.Sum256(openAPIDoc)
	return `"` + hex.EncodeToString(sum[:8]) + `"`
}()

// OpenAPIPath is the path the OpenAPI document is served at, as the
// document itself says: mount [OpenAPIHandler] there.
const OpenAPIPath = "/v1/openapi.json"

// OpenAPI returns the OpenAPI 3.1 document (JSON) of the wire API that
// [Handler] serves, and of [OpenAPIPath]: every route, status, header and
// body shape. Each call returns a new copy, which the caller may change.
func OpenAPI() []byte { return bytes.Clone(openAPIDoc) }

// OpenAPIHandler returns a handler that serves the document of [OpenAPI] to
// GET and HEAD, as application/json with an ETag, and answers 304 to a
// request whose If-None-Match names it. Its Cache-Control is "no-cache"
// rather than the API's "no-store": the document is the same for everyone
// and changes only with the server, so a client may keep it and revalidate.
// Like every answer of the [Handler], its answers carry an X-Request-Id
// (see [RequestIDHeader]); another method is 405 with an Allow header.
//
// It does not authenticate: the document holds no caller's data, and a
// client generator needs it before anyone has a key. A host that wants it
// behind a key wraps it.
func OpenAPIHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requestID(w, r)
		h := w.Header()
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			WriteError(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed, "method not allowed", "")
			return
		}
		h.Set("ETag", openAPIETag)
		h.Set("Cache-Control", "no-cache")
		if etagMatch(r.Header.Values("If-None-Match"), openAPIETag) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		h.Set("Content-Type", "application/json")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Length", strconv.Itoa(len(openAPIDoc)))
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			_, _ = w.Write(openAPIDoc)
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
