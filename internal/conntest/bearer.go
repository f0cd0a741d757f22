package conntest

import "net/http"

// Bearer is a client transport that sends Authorization: Bearer Key on
// every request, for a client that takes an http.Client but no headers
// (the MCP SDK's). Next defaults to http.DefaultTransport.
type Bearer struct {
	Key  string
	Next http.RoundTripper
}

// RoundTrip sends a copy of r with the key.
func (b Bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.Key)
	next := b.Next
	if next == nil {
		next = http.DefaultTransport
	}
	return next.RoundTrip(r)
}
