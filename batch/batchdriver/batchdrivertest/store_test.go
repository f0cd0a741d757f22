package batchdrivertest_test

import (
	"testing"

	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchdriver/batchdrivertest"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

func TestMemoryStore(t *testing.T) {
	t.Parallel()
	batchdrivertest.TestStore(t, func(*testing.T) batchdriver.Store { return batchtest.NewStore() })
}

func TestSharedMemoryStore(t *testing.T) {
	t.Parallel()
	batchdrivertest.TestStore(t, func(*testing.T) batchdriver.Store { return batchtest.NewSharedStore() })
}

func TestMemoryStoreReopen(t *testing.T) {
	t.Parallel()
	batchdrivertest.TestStoreReopen(t, func(*testing.T) (batchdriver.Store, func() batchdriver.Store) {
		s := batchtest.NewStore()
		return s, func() batchdriver.Store { return s }
	})
}

// Not parallel: see batchtest.TestRunner. The shared store runs the
// cluster cases too.
func TestRunnerOnMemoryStore(t *testing.T) {
	batchdrivertest.TestRunner(t, func(*testing.T) batchdriver.Store { return batchtest.NewStore() })
}

func TestRunnerOnSharedMemoryStore(t *testing.T) {
	batchdrivertest.TestRunner(t, func(*testing.T) batchdriver.Store { return batchtest.NewSharedStore() })
}
