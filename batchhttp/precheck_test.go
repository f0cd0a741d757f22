package batchhttp

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchnet"
)

// PrecheckURL is batchnet's pre-check; batchnet's table tests it in full
// (and the connect-time check with the same rows). Here: the shapes of its
// answers, and the cases where the two classifiers used to disagree.
func TestPrecheckURL(t *testing.T) {
	t.Parallel()

	f := func(raw string, wantErr string) {
		t.Helper()
		err := PrecheckURL(context.Background(), alice, raw)
		switch {
		case wantErr == "" && err != nil:
			t.Errorf("PrecheckURL(%q) = %v, want nil", raw, err)
		case wantErr != "" && (err == nil || err.Error() != "blocked: "+wantErr):
			t.Errorf("PrecheckURL(%q) = %v, want blocked: %s", raw, err, wantErr)
		case err != nil && strings.Contains(err.Error(), "example"):
			t.Errorf("PrecheckURL(%q) = %v repeats the URL", raw, err)
		}
	}
	f("https://example.com/a?b=c", "")
	f("http://example.com:80/", "")
	f("https://93.184.216.34/", "")
	f("https://[2606:2800:220:1::]/", "")
	f("https://123.example.com/", "")

	f("https://example.com/"+strings.Repeat("a", MaxURLBytes), batchnet.ReasonURLTooLong)
	f("ftp://example.com/", batchnet.ReasonScheme)
	f("https://user:pw@example.com/", batchnet.ReasonUserinfo)
	f("https://example.com:8443/", batchnet.ReasonPort)
	f("http://localhost/", batchnet.ReasonLoopback)
	f("http://127.0.0.1/", batchnet.ReasonLoopback)
	f("http://127.1/", batchnet.ReasonNonCanonical)
	// Let through before, refused by the connect-time guard all along.
	f("http://[fec0::1]/", batchnet.ReasonReserved)
	f("http://[4000::1]/", batchnet.ReasonReserved)
	f("http://[::127.0.0.1]/", batchnet.ReasonReserved)
	f("http://[fe80::1%25eth0]/", batchnet.ReasonZone)
	f("http://example.123/", batchnet.ReasonNonCanonical)
	// Refused before and let through by the guard: now refused by both.
	f("http://[64:ff9b::5db8:d70e]/", batchnet.ReasonTranslated)
	f("http://[2002:5db8:d70e::1]/", batchnet.ReasonTranslated)
}

// A submit of a host that folds to loopback (fullwidth digits and full
// stops, fullwidth letters, trailing dots) is refused at submit with 422,
// not left to fail at connect time.
func TestHandler_SubmitFoldedHostBlocked(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{precheck: PrecheckURL})
	for _, u := range []string{"http://１２７．０．０．１/", "http://ｌｏｃａｌｈｏｓｔ/", "http://localhost../"} {
		body := submitBody(t, []batch.Target{{URL: "https://example.com/"}, {URL: u}})
		wantError(t, b.do(t, http.MethodPost, "/v1/batch", keyAlice, body), http.StatusUnprocessableEntity, "blocked: target 1: loopback address")
	}
}
