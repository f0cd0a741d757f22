package batchhttp

import (
	"net/url"
	"testing"
	"time"
)

func TestWaitParam(t *testing.T) {
	t.Parallel()

	f := func(query string, want time.Duration, wantErr bool) {
		t.Helper()
		q, err := url.ParseQuery(query)
		if err != nil {
			t.Fatal(err)
		}
		got, err := waitParam(q)
		if got != want || (err != nil) != wantErr {
			t.Errorf("waitParam(%q) = %s, %v; want %s, error %v", query, got, err, want, wantErr)
		}
	}
	f("", 0, false)
	f("wait=0", 0, false)
	f("wait=30", 30*time.Second, false)
	f("wait=60", time.Minute, false)
	f("wait=61", time.Minute, false)
	f("wait=999999999", time.Minute, false)
	f("wait=1.5s", 1500*time.Millisecond, false)
	f("wait=250ms", 250*time.Millisecond, false)
	f("wait=10m", time.Minute, false)
	f("wait=99999999999h", 0, true)
	f("wait=-1s", 0, true)
	f("wait=-1", 0, true)
	f("wait=", 0, true)
	f("wait=soon", 0, true)
	f("wait=1&wait=2", 0, true)
}

func TestSinceParam(t *testing.T) {
	t.Parallel()

	f := func(query string, want int, wantErr bool) {
		t.Helper()
		q, _ := url.ParseQuery(query)
		got, err := sinceParam(q)
		if (err != nil) != wantErr || (err == nil && query != "" && (got == nil || *got != want)) || (query == "" && got != nil) {
			t.Errorf("sinceParam(%q) = %v, %v; want %d, error %v", query, got, err, want, wantErr)
		}
	}
	f("", 0, false)
	f("since=0", 0, false)
	f("since=31", 31, false)
	f("since=-1", 0, true)
	f("since=+1", 0, true)
	f("since=1e2", 0, true)
	f("since=", 0, true)
	f("since=9999999999", 0, true)
}

func TestValidID(t *testing.T) {
	t.Parallel()

	f := func(id string, want bool) {
		t.Helper()
		if got := validID(id); got != want {
			t.Errorf("validID(%q) = %v, want %v", id, got, want)
		}
	}
	f("6f1c2a9e-0000-4000-8000-000000000000", true)
	f("abc_DEF-123", true)
	f("", false)
	f("a.b", false)
	f("a/b", false)
	f("a b", false)
	f("é", false)
	f("\x00", false)
	f(string(make([]byte, 64)), false)
	f("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", true)
	f("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false)
}

func TestCleanPath(t *testing.T) {
	t.Parallel()

	f := func(p string, want bool) {
		t.Helper()
		if got := cleanPath(p); got != want {
			t.Errorf("cleanPath(%q) = %v, want %v", p, got, want)
		}
	}
	f("/", true)
	f("/v1/batch", true)
	f("/v1/batch/", true)
	f("/v1/batch/x/0", true)
	f("", false)
	f("*", false)
	f("v1/batch", false)
	f("//", false)
	f("//v1/batch", false)
	f("/v1//batch", false)
	f("/v1/batch//", false)
	f("/v1/./batch", false)
	f("/v1/batch/..", false)
	f("/v1/batch/.", false)
}
