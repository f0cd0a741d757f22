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

func TestSharedMemoryStore(t *testing.T) {
	t.Parallel()
	batchtest.TestStore(t, func(*testing.T) batch.Store { return batchtest.NewSharedStore() })
}

func TestMemoryStoreReopen(t *testing.T) {
	t.Parallel()
	batchtest.TestStoreReopen(t, func(*testing.T) (batch.Store, func() batch.Store) {
		s := batchtest.NewStore()
		return s, func() batch.Store { return s }
	})
}

// Not parallel: see batchtest.TestRunner. The shared store runs the
// cluster cases too.
func TestRunnerOnMemoryStore(t *testing.T) {
	batchtest.TestRunner(t, func(*testing.T) batch.Store { return batchtest.NewStore() })
}

func TestRunnerOnSharedMemoryStore(t *testing.T) {
	batchtest.TestRunner(t, func(*testing.T) batch.Store { return batchtest.NewSharedStore() })
}
