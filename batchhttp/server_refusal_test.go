package batchhttp

import "testing"

// Serve closes the connection of a request refused by a host's own
// middleware in front of the API (the Handler never runs), whose body was
// not read, as it does for the Handler's own refusals: nothing to wrap.
func TestServe_HostMiddlewareRefusal(t *testing.T) {
	t.Parallel()
	wantRefusalClosed(t, serveLimited(t, hostAuthAPI(t), Limits{}))
}
