package batchtest_test

import (
	"testing"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

func TestMemoryStore(t *testing.T) {
	t.Parallel()
	batchtest.TestStore(t, func(*testing.T) batch.Store { return batchtest.NewStore() })
}

func TestRunnerOnMemoryStore(t *testing.T) {
	batchtest.TestRunner(t, func(*testing.T) batch.Store { return batchtest.NewStore() })
}
