package daemon

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them. With
// webhookChildEnv set, the test binary is the daemon child of
// TestDaemon_WebhookSurvivesKill instead.
func TestMain(m *testing.M) {
	if c := os.Getenv(webhookChildEnv); c != "" {
		os.Exit(runWebhookChild(c))
	}
	goleak.VerifyTestMain(m)
}
