package main

import (
	"strings"
	"testing"

	"github.com/siftfetch/batchkit/internal/conntest"
)

// TestEmbed_RefusedStalledBody sends requests that withCaller, the host's
// own auth middleware, refuses, each announcing a body it never sends: the
// 401 comes at once and the connection ends with it, not at the server's
// 30s read timeout.
func TestEmbed_RefusedStalledBody(t *testing.T) {
	t.Parallel()
	h := startHost(t)
	conntest.WantRefusalClosed(t, strings.TrimPrefix(h.url, "http://"),
		"POST /v1/batch HTTP/1.1\r\nHost: x",
		"POST /v1/batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong",
		"GET /v1/fetch HTTP/1.1\r\nHost: x")
}
