package batchstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// Ten rounds of filling the store past its byte budget and evicting: the
// file gives the evicted bytes back each time (incremental auto-vacuum plus
// a checkpoint), so it stays within the budget plus the documented
// overhead, and the WAL within its size limit plus one eviction's pages.
func TestStore_FileSizeBounded(t *testing.T) {
	t.Parallel()
	const (
		budget  = 2 << 20 // the byte budget of the test
		rounds  = 10
		targets = 4
	)
	path := filepath.Join(t.TempDir(), "size.db")
	s, err := Open(t.Context(), path, Config{Synchronous: SyncNormal})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(3, 4))
	seq := 0
	var maxDB, maxWAL int64
	for round := range rounds {
		// Fill to 1.5× the budget with results of 4–64 KiB.
		for {
			st, err := s.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Bytes > budget*3/2 {
				break
			}
			seq++
			fillJob(t, s, fmt.Sprintf("job-%d", seq), targets, func() int { return 4<<10 + rng.IntN(60<<10) })
		}
		if _, err := s.Evict(ctx, batchdriver.EvictParams{MaxBytes: budget}); err != nil {
			t.Fatal(err)
		}
		st, err := s.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		results := countRows(t, s, `SELECT count(*) FROM batch_body`)
		jobs := countRows(t, s, `SELECT count(*) FROM batch_job`)
		db, wal := fileSize(t, path), fileSize(t, path+"-wal")
		maxDB, maxWAL = max(maxDB, db), max(maxWAL, wal)
		allowed := budget + sizeOverhead(results, jobs)
		t.Logf("round %d: %d jobs made, %d bytes stored in %d results; file %d bytes (allowed %d), WAL %d bytes",
			round, seq, st.Bytes, results, db, allowed, wal)
		if st.Bytes > budget {
			t.Fatalf("round %d: %d bytes stored after Evict(%d)", round, st.Bytes, budget)
		}
		if db > allowed {
			t.Errorf("round %d: file is %d bytes, want at most %d (budget %d + overhead)", round, db, allowed, budget)
		}
	}
	t.Logf("largest file %d bytes (%.2f× the budget), largest WAL %d bytes", maxDB, float64(maxDB)/budget, maxWAL)
	// Checkpoints run beside the writes (see checkpoint.go), so the WAL may
	// grow to the writer's own checkpoint threshold, and past it within one
	// transaction; a checkpoint reset truncates it back.
	if limit := int64(checkpointCeiling*4096 + budget); maxWAL > limit {
		t.Errorf("WAL reached %d bytes, want at most %d", maxWAL, limit)
	}
}

// sizeOverhead is the file overhead the package documentation promises
// over the stored bytes: up to one page per stored result (the last,
// partly filled overflow page), 0.5 KiB per stored job of 4 targets for its
// rows and index entries, and 256 KiB for the schema, pointer-map and partly filled
// pages.
func sizeOverhead(results, jobs int64) int64 { return results*4096 + jobs*512 + 256<<10 }

// fillJob makes one finished job whose targets have results of size()
// bytes.
func fillJob(t *testing.T, s *Store, id string, n int, size func() int) {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	if _, _, err := s.Create(ctx, withLimits(newJob(id, "filler", n, now), testLimits)); err != nil {
		t.Fatal(err)
	}
	_, err := drainJob(ctx, s, "r", id, func(idx int) batchdriver.TargetFinish {
		return batchdriver.TargetFinish{Idx: idx, Status: batchdriver.TargetDone, Outcome: batchdriver.OutcomeOK, Result: make([]byte, size())}
	})
	if err != nil {
		t.Fatal(err)
	}
}
