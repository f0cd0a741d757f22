package reliability

import (
	"testing"

	"github.com/siftfetch/batchkit/batchstore/pgstore/pgstoretest"
)

// pgSchema returns the database URL and a fresh schema for the test,
// dropped when it ends (see package pgstoretest).
func pgSchema(t *testing.T) (url, schema string) {
	t.Helper()
	return pgstoretest.Schema(t, "rel")
}
