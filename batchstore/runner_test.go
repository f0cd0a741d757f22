package batchstore

import (
	"testing"

	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchdriver/batchdrivertest"
)

// The runner's behaviour, drained through this store. Not parallel: see
// batchdrivertest.TestRunner.
func TestRunner_OnSQLite(t *testing.T) {
	batchdrivertest.TestRunner(t, func(t *testing.T) batchdriver.Store { return openTest(t, Config{}) })
}
