package reliability

import (
	"testing"

	"github.com/siftfetch/batchkit/internal/pgtest"
)

// pgSchema returns the database URL and a fresh schema for the test,
// dropped when it ends (see package pgtest).
func pgSchema(t *testing.T) (url, schema string) {
	t.Helper()
	return pgtest.Schema(t, "rel")
}
