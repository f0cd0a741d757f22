package batchhttp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/siftfetch/batchkit/batch"
)

func TestNewKeyAuth(t *testing.T) {
	t.Parallel()

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		for name, keys := range map[string][]Key{
			"NoKeys":     nil,
			"NoName":     {{Secret: "s"}},
			"NoSecret":   {{Name: "n"}},
			"SameSecret": {{Name: "a", Secret: "s"}, {Name: "b", Secret: "s"}},
		} {
			if _, err := NewKeyAuth(keys); err == nil {
				t.Errorf("%s: NewKeyAuth succeeded", name)
			}
		}
	})

	t.Run("Header", func(t *testing.T) {
		t.Parallel()
		auth, err := NewKeyAuth(slices.Concat(testKeys, []Key{{Name: "alice", Secret: "alice-new-key", Class: "agent"}}))
		if err != nil {
			t.Fatal(err)
		}
		f := func(header []string, want batch.Caller, wantOK bool) {
			t.Helper()
			req := httptest.NewRequest(http.MethodGet, "/v1/batch", nil)
			for _, h := range header {
				req.Header.Add("Authorization", h)
			}
			rec := httptest.NewRecorder()
			got, ok := auth(rec, req)
			if ok != wantOK || got != want {
				t.Errorf("%q: got %+v, %v; want %+v, %v", header, got, ok, want, wantOK)
			}
			if !ok {
				wantError(t, rec, http.StatusUnauthorized, "unauthorized")
				if !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("%q: no Bearer challenge", header)
				}
			}
		}
		f([]string{"Bearer " + keyAlice}, alice, true)
		f([]string{"bearer  " + keyAlice + " "}, alice, true)
		f([]string{"Bearer alice-new-key"}, alice, true)
		f([]string{"Bearer " + keyRita}, batch.Caller{Name: "rita", Class: "guest", Restricted: true}, true)
		f(nil, batch.Caller{}, false)
		f([]string{""}, batch.Caller{}, false)
		f([]string{"Bearer"}, batch.Caller{}, false)
		f([]string{"Bearer "}, batch.Caller{}, false)
		f([]string{"Basic " + keyAlice}, batch.Caller{}, false)
		f([]string{keyAlice}, batch.Caller{}, false)
		f([]string{"Bearer " + keyAlice + "x"}, batch.Caller{}, false)
		f([]string{"Bearer " + keyAlice[:len(keyAlice)-1]}, batch.Caller{}, false)
		f([]string{"Bearer " + keyAlice, "Bearer " + keyBob}, batch.Caller{}, false)
	})
}

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
	f("https://example.com:443/", "")
	f("https://93.184.216.34/", "")
	f("https://[2606:2800:220:1::]/", "")
	f("https://123.example.com/", "")

	f("https://example.com/"+strings.Repeat("a", MaxURLBytes), "url too long")
	f("https://example.com/%zz", "malformed url")
	f("ftp://example.com/", "scheme must be http or https")
	f("file:///etc/passwd", "scheme must be http or https")
	f("gopher://example.com/", "scheme must be http or https")
	f("data:text/plain,hi", "scheme must be http or https")
	f("example.com/a", "scheme must be http or https")
	f("https:example.com", "url has no host")
	f("https:///a", "url has no host")
	f("https://user:pw@example.com/", "url has user info")
	f("https://example.com:8443/", "port must be 80 or 443")
	f("http://example.com:0/", "port must be 80 or 443")
	f("http://localhost/", "localhost")
	f("http://LOCALHOST./", "localhost")
	f("http://a.localhost/", "localhost")
	for _, ip := range []string{
		"127.0.0.1", "10.0.0.5", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0",
		"255.255.255.255", "224.0.0.1", "192.0.2.1", "198.18.0.1", "240.0.0.1", "127.0.0.1.",
		"[::1]", "[::]", "[fc00::1]", "[fe80::1%25eth0]", "[::ffff:127.0.0.1]", "[64:ff9b::a00:1]",
		"[2002:7f00:1::]", "[2001:db8::1]", "[ff02::1]",
	} {
		f("http://"+ip+"/", "private or reserved address")
	}
	for _, host := range []string{"127.1", "2130706433", "0x7f000001", "0177.0.0.1", "0", "0x7f.1", "1.2.3"} {
		f("http://"+host+"/", "numeric host that is not a dotted-quad address")
	}
}
