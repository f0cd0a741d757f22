package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// Evict implements [batch.Store.Evict]: while the store's bytes are above
// p.MaxBytes, the oldest-lease released finished job (then the oldest
// insert) of the caller that holds the most bytes goes, as long as that
// caller holds more than its share: p.MaxBytes divided by the number of
// callers holding bytes (counted once a transaction, from caller_bytes
// and the held jobs' callers, and followed as it deletes). What a caller
// holds is its caller_bytes row (its released jobs' bytes, kept by
// triggers and folded in first) plus its held jobs' bytes; so a pick reads the first two
// entries of caller_bytes_most and the rows of the callers of the few held
// jobs, and the jobs of the caller picked come from job_evict in lease
// order. It deletes that caller's jobs one after the other while the
// caller still holds more than the runner-up (the name decides between
// equals), up to evictRun jobs a statement, then picks again: the order
// of one pick per job, in fewer statements.
//
// Each transaction holds the byte counter's row locks (all 16, see
// lockCounter) from the first read of the total to the commit, and folds
// the callers' byte deltas in before it picks, so a concurrent eviction,
// on any node, waits
// and then sees the totals this one left: concurrent evictions never
// delete more than one alone would. Jobs another transaction has locked (a
// lease bump under way) are skipped; a caller whose jobs are all locked is
// left out of the rest of the pass. A store under its budget costs one
// read, and locks nothing.
func (s *Store) Evict(ctx context.Context, p batchdriver.EvictParams) (int, error) {
	ctx, cancel, err := s.begin(ctx)
	defer cancel()
	if err != nil {
		return 0, s.wrap(ctx, "evict", err)
	}
	var bytes int64
	if err := s.pool.QueryRow(ctx, s.q.totalBytes).Scan(&bytes); err != nil || bytes <= p.MaxBytes {
		return 0, s.wrap(ctx, "evict", err)
	}
	total := 0
	for {
		n, more := 0, false
		err := s.inTx(ctx, func(tx pgx.Tx) error {
			n, more = 0, false
			counted, err := s.lockCounter(ctx, tx)
			if err != nil {
				return err
			}
			if err := s.foldCallers(ctx, tx); err != nil { // the picks read caller_bytes
				return err
			}
			held, err := s.heldByCaller(ctx, tx)
			if err != nil {
				return err
			}
			bytes := counted
			var names []string
			var heldBytes []int64
			holding := []string{} // not nil: cardinality(NULL) is NULL
			for name, b := range held {
				bytes += b
				names, heldBytes = append(names, name), append(heldBytes, b)
				if b > 0 {
					holding = append(holding, name)
				}
			}
			var holders int64
			if err := tx.QueryRow(ctx, s.q.evictHolders, holding).Scan(&holders); err != nil {
				return err
			}
			skip := []string{} // not nil: "<> ALL (NULL)" would match no caller
			for bytes > p.MaxBytes && n < gcTxJobs {
				rows, err := tx.Query(ctx, s.q.evictPick, names, heldBytes, skip)
				if err != nil {
					return err
				}
				picks, err := pgx.CollectRows(rows, pgx.RowToStructByPos[pick])
				if err != nil {
					return err
				}
				if len(picks) == 0 {
					return nil // no caller has a released job with bytes
				}
				first := picks[0]
				if first.Held*holders <= p.MaxBytes {
					// The largest caller with a released job is within its
					// share, and so is every other: what is over the budget
					// is held, and stays until it is released.
					return nil
				}
				rows, err = tx.Query(ctx, s.q.evictOldest, first.Caller, evictRun)
				if err != nil {
					return err
				}
				var seqs []int64
				for rows.Next() {
					var seq, b int64
					if err := rows.Scan(&seq, &b); err != nil {
						rows.Close()
						return err
					}
					if bytes <= p.MaxBytes || first.Held*holders <= p.MaxBytes ||
						len(seqs) > 0 && len(picks) > 1 && !first.beats(picks[1]) {
						break
					}
					seqs, bytes, first.Held = append(seqs, seq), bytes-b, first.Held-b
				}
				rows.Close()
				if err := rows.Err(); err != nil {
					return err
				}
				if len(seqs) == 0 { // all locked by lease bumps: leave the caller out
					skip = append(skip, first.Caller)
					continue
				}
				if _, err := tx.Exec(ctx, s.q.evict, seqs); err != nil {
					return err
				}
				if first.Held == 0 {
					holders-- // the caller holds nothing now
				}
				if err := s.foldCallers(ctx, tx); err != nil { // its deletes' deltas, for the next pick
					return err
				}
				n += len(seqs)
			}
			more = bytes > p.MaxBytes
			return nil
		})
		if err != nil {
			return total, s.wrap(ctx, "evict", err)
		}
		total += n
		if !more || n == 0 {
			return total, nil
		}
	}
}

// evictRun is how many of one caller's jobs a pick locks at most: the
// jobs it may delete before it picks again. Candidates it locks and does
// not delete stay locked to the commit, so it is small.
const evictRun = 16

// pick is a caller that eviction may take from, with the bytes it holds.
type pick struct {
	Caller string
	Held   int64
}

// beats reports whether p goes before q: it holds more, or as much with
// the smaller name (byte order, as the SQL's COLLATE "C").
func (p pick) beats(q pick) bool { return p.Held > q.Held || p.Held == q.Held && p.Caller < q.Caller }

// heldByCaller returns the bytes of the held jobs by caller: what
// caller_bytes does not count yet.
func (s *Store) heldByCaller(ctx context.Context, tx pgx.Tx) (map[string]int64, error) {
	rows, err := tx.Query(ctx, s.q.heldByCaller)
	if err != nil {
		return nil, err
	}
	held := map[string]int64{}
	var name string
	var b int64
	_, err = pgx.ForEachRow(rows, []any{&name, &b}, func() error {
		held[name] += b
		return nil
	})
	return held, err
}
