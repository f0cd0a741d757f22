package fetcher

import (
	"mime"
	"strings"
	"unicode/utf8"

	"github.com/siftfetch/batchkit/batch"
)

// contentType is a response's media type and charset.
type contentType struct {
	media    string // lower-case type/subtype, no parameters
	charset  string // lower-case, "" if none
	declared bool   // from a parseable Content-Type header, not sniffed
}

// parseContentType parses a Content-Type value. An empty or malformed
// value is not declared, and the body is sniffed instead.
func parseContentType(v string) contentType {
	if v == "" {
		return contentType{}
	}
	media, params, err := mime.ParseMediaType(v)
	if err != nil || len(media) > 100 {
		return contentType{}
	}
	return contentType{media: media, charset: strings.ToLower(params["charset"]), declared: true}
}

// textApplicationTypes are the application/* media types read as text.
var textApplicationTypes = map[string]bool{
	"application/json":                  true,
	"application/xml":                   true,
	"application/xhtml+xml":             true,
	"application/javascript":            true,
	"application/x-javascript":          true,
	"application/ecmascript":            true,
	"application/x-ndjson":              true,
	"application/yaml":                  true,
	"application/x-yaml":                true,
	"application/toml":                  true,
	"application/x-www-form-urlencoded": true,
}

// isText reports whether media is a type the fetcher returns as text:
// text/*, the types above, and any application/*+json or +xml type.
func isText(media string) bool {
	if strings.HasPrefix(media, "text/") || textApplicationTypes[media] {
		return true
	}
	return strings.HasPrefix(media, "application/") &&
		(strings.HasSuffix(media, "+json") || strings.HasSuffix(media, "+xml"))
}

// isHTML reports whether media is an HTML type that mode clean extracts.
func isHTML(media string) bool {
	return media == "text/html" || media == "application/xhtml+xml"
}

// unsupportedType is the error for a body that is not text. The media type
// comes from the upstream, but it is a parsed token/token pair of bounded
// length, never the URL.
func unsupportedType(media string) error {
	if media == "" {
		media = "unknown"
	}
	return failf(batch.OutcomeUnsupported, "unsupported: content type "+media)
}

// decodeText turns body into valid UTF-8. ISO-8859-1 and windows-1252 are
// read as Latin-1 (windows-1252's 0x80–0x9F punctuation becomes C1
// controls); everything else is read as UTF-8, invalid bytes replaced by
// U+FFFD. A UTF-8 byte-order mark is dropped.
func decodeText(body []byte, charset string) string {
	switch charset {
	case "iso-8859-1", "latin1", "latin-1", "l1", "windows-1252", "cp1252":
		var b strings.Builder
		b.Grow(len(body))
		for _, c := range body {
			b.WriteRune(rune(c))
		}
		return b.String()
	}
	s := strings.TrimPrefix(string(body), "\uFEFF")
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return s
}
