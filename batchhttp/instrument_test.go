package batchhttp

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Instrument observes a host route under its fixed label, logs one line
// without the URL, and gives the answer a request id.
func TestInstrument(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	observe := func(route string, status int, _ time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, route+" "+http.StatusText(status))
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := Instrument("/v1/fetch", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("url") == "" {
			WriteError(w, http.StatusBadRequest, CodeInvalidRequest, "no url", "")
			return
		}
		io.WriteString(w, "page")
	}), observe, log)
	for _, target := range []string{"/v1/fetch?url=https://secret.example/token-abc", "/v1/fetch"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
		if rec.Header().Get(RequestIDHeader) == "" {
			t.Errorf("%s: no request id", target)
		}
	}
	if want := []string{"/v1/fetch OK", "/v1/fetch Bad Request"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("observations %q, want %q", got, want)
	}
	if n := strings.Count(logs.String(), "msg=request"); n != 2 || strings.Contains(logs.String(), "secret.example") || strings.Contains(logs.String(), "token") {
		t.Errorf("%d log lines, want 2 without the URL:\n%s", n, &logs)
	}
}
