package batchstore

import (
	"testing"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// The runner's behaviour, drained through this store. Not parallel: see
// batchtest.TestRunner.
func TestRunner_OnSQLite(t *testing.T) {
	batchtest.TestRunner(t, func(t *testing.T) batch.Store { return openTest(t, Options{}) })
}
