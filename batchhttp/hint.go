package batchhttp

import (
	"net/http"
	"net/url"
	"strings"
)

// basePath is the path the client reached the API's routes under: what a
// middleware such as [http.StripPrefix] took off the front of the request's
// path, then [HandlerConfig].Prefix. It is "" for the API at the root.
func (h *Handler) basePath(r *http.Request) string {
	stripped := ""
	if u, err := url.ParseRequestURI(r.RequestURI); err == nil {
		sent, seen := u.EscapedPath(), r.URL.EscapedPath()
		if len(sent) > len(seen) && strings.HasSuffix(sent, seen) && strings.HasPrefix(sent, "/") {
			stripped = sent[:len(sent)-len(seen)]
		}
	}
	return stripped + h.prefix
}

// under returns a copy of e whose hint names its routes under base, so that
// a client that follows it reaches the API: "GET /api/v1/batch".
func (e *httpError) under(base string) *httpError {
	if base == "" {
		return e
	}
	c := *e
	c.hint = strings.ReplaceAll(c.hint, RouteList, base+RouteList)
	return &c
}
