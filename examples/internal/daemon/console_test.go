package daemon

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/siftfetch/batchkit/batchhttp/batchserver"
)

// The console is served at /console only with an admin key, which no
// caller may share, and its requests are counted under a fixed route label.
func TestDaemon_Console(t *testing.T) {
	t.Parallel()
	const admin = "admin-key-0123456789"
	if status, _ := get(t, openTest(t, Config{}).URL+"/console", admin); status != http.StatusNotFound {
		t.Errorf("without an admin key GET /console = %d, want 404 (no console)", status)
	}
	srv := openTest(t, Config{AdminKey: admin, MetricsKey: "metrics-key-0123456789"})
	for key, want := range map[string]int{"": http.StatusUnauthorized, "alice-key": http.StatusUnauthorized, admin: http.StatusOK} {
		if status, _ := get(t, srv.URL+"/console", key); status != want {
			t.Errorf("GET /console with key %q = %d, want %d", key, status, want)
		}
	}
	_, metrics := get(t, srv.URL+"/metrics", "metrics-key-0123456789")
	if !strings.Contains(metrics, `route="/console"`) {
		t.Error("the console's requests have no route label /console in /metrics")
	}
	_, err := Open(t.Context(), Config{DB: filepath.Join(t.TempDir(), "d.db"), AdminKey: "alice-key-0123456789",
		Keys: []batchserver.Key{{Name: "alice", Secret: "alice-key-0123456789"}}})
	if err == nil || !strings.Contains(err.Error(), "admin key") || strings.Contains(err.Error(), "alice-key-0123456789") {
		t.Errorf("an admin key that is a caller's: %v, want it refused without repeating it", err)
	}
	if _, err := Open(t.Context(), Config{DB: filepath.Join(t.TempDir(), "d.db"), AdminKey: "short",
		Keys: []batchserver.Key{{Name: "alice", Secret: "alice-key"}}}); err == nil {
		t.Error("a short admin key was accepted")
	}
}
