package pgstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchdriver/batchdrivertest"
)

// The conformance suites run in the store's default mode: every call they
// make carries the Now of their fake clock, and the runner cases' runners
// have a Config.Now, so they pass it. clock_test.go proves calls without a
// Now, on the database's clock.
func TestStore_Conformance(t *testing.T) {
	t.Parallel()
	batchdrivertest.TestStore(t, func(t *testing.T) batchdriver.Store { return openTest(t, Config{}) })
}

func TestStore_Reopen(t *testing.T) {
	t.Parallel()
	batchdrivertest.TestStoreReopen(t, func(t *testing.T) (batchdriver.Store, func() batchdriver.Store) {
		opts := Config{Schema: newSchema(t), MaxConns: testMaxConns}
		open := func() *Store {
			s, err := Open(context.Background(), pgURL(t), opts)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			return s
		}
		s := open()
		t.Cleanup(func() { s.Close() })
		return s, func() batchdriver.Store {
			s.Close()
			s = open()
			return s
		}
	})
}

// The runner's behaviour, cluster cases included, drained through this
// store. Not parallel: see batchdrivertest.TestRunner.
func TestRunner(t *testing.T) {
	batchdrivertest.TestRunner(t, func(t *testing.T) batchdriver.Store { return openTest(t, Config{}) })
}

func TestOpen_Options(t *testing.T) {
	t.Parallel()
	for _, opts := range []Config{
		{Schema: "Upper"}, {Schema: "with-dash"}, {Schema: "9lives"}, {Schema: "pg_catalog"},
		{Schema: `x"; DROP TABLE y; --`}, {Schema: strings.Repeat("s", maxSchemaLen+1)},
		{MaxConns: -1}, {Timeout: -time.Second},
	} {
		_, err := Open(context.Background(), "postgres://127.0.0.1:1/none", opts)
		if err == nil || !strings.HasPrefix(err.Error(), "pgstore: invalid options") {
			t.Errorf("Open(%+v) = %v, want an invalid options error", opts, err)
		}
	}
	if _, err := (Config{Schema: strings.Repeat("s", maxSchemaLen)}).withDefaults(); err != nil {
		t.Errorf("a %d-byte schema: %v", maxSchemaLen, err)
	}
}
