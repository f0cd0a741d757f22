package batchstore

import (
	"context"
	"errors"
	"fmt"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// The eviction's reads (see TestStore_QueryPlans), each on an index:
// the caller whose finished jobs hold the most bytes, how many callers'
// finished jobs hold any (one index entry per caller, not per job), one
// caller's counter, a caller's oldest-lease finished job (+?: an equality
// that feeds the ORDER BY, see qJob), and the bytes of the held jobs'
// targets by caller (a handful of jobs).
const (
	qTopCaller    = `SELECT caller, bytes FROM batch_caller ORDER BY bytes DESC, caller LIMIT 1`
	qCallerCount  = `SELECT count(*) FROM batch_caller WHERE bytes > 0`
	qCallerBytes  = `SELECT bytes FROM batch_caller WHERE caller = ?`
	qCallerOldest = `SELECT seq, bytes FROM batch_job
		WHERE caller = +? AND ` + whereFinished + ` AND ` + whereReleased + ` ORDER BY lease, seq LIMIT 1`
	qHeldByCaller = `SELECT j.caller, t.bytes FROM batch_job j CROSS JOIN batch_target t ON t.job_seq = j.seq
		WHERE j.runner <> ''`
)

// Evict implements [batch.Store.Evict]: while the byte total is above
// p.MaxBytes, the oldest-lease finished job (then the oldest insert) of
// the caller that holds the most bytes goes, as long as that caller holds
// more than its share: p.MaxBytes divided by the number of callers
// holding bytes. What a caller holds is its row of batch_caller, which the
// triggers keep exact for its finished jobs, plus the bytes of its held
// jobs' targets; so a pick reads the first entry of the
// batch_caller_bytes index and the rows of the callers of the few held
// jobs, and its job is the first entry of batch_job_evict for that
// caller: no read scans, at any store size. The callers holding bytes are
// counted once a transaction (an index of one entry per caller) and
// followed as it deletes. Each transaction deletes at most gcBatch jobs
// and decides on the totals read in it, so concurrent evictions never
// over-evict.
func (s *Store) Evict(ctx context.Context, p batchdriver.EvictParams) (int, error) {
	total := 0
	for {
		n, more := 0, false
		err := s.write(ctx, "evict", func(conn *sqlite.Conn) error {
			bytes, err := totalBytes(conn)
			if err != nil || bytes <= p.MaxBytes {
				return err
			}
			held, err := heldByCaller(conn)
			if err != nil {
				return err
			}
			holders, err := countHolders(conn, held)
			if err != nil {
				return err
			}
			for bytes > p.MaxBytes && n < gcBatch {
				caller, most, ok, err := largestCaller(conn, held)
				if err != nil {
					return err
				}
				// No caller has a finished job left, or the largest that has
				// one is within its share, and so is every other: what is
				// over the budget is live, and stays until it is released.
				// Vacuum what was freed.
				if !ok || most*holders <= p.MaxBytes {
					break
				}
				var job jobNum
				found := false
				err = sqlitex.Execute(conn, qCallerOldest, &sqlitex.ExecOptions{
					Args: []any{caller},
					ResultFunc: func(stmt *sqlite.Stmt) error {
						job, found = jobNum{stmt.ColumnInt64(0), stmt.ColumnInt64(1)}, true
						return nil
					},
				})
				if err != nil {
					return err
				}
				if !found { // the counter says otherwise: never evict blind
					return fmt.Errorf("batchstore: evict: caller counter holds bytes without a finished job")
				}
				if err := deleteJob(conn, job.seq); err != nil {
					return err
				}
				bytes -= job.n
				if most == job.n {
					holders-- // the caller holds nothing now
				}
				n++
			}
			more = bytes > p.MaxBytes && n == gcBatch
			return vacuum(conn, n)
		})
		if err != nil { // the batch rolled back
			return total, errors.Join(err, s.reclaim(ctx, total))
		}
		total += n
		if !more {
			return total, s.reclaim(ctx, total)
		}
	}
}

// heldByCaller returns the bytes of the held jobs' targets, by caller:
// what the job rows do not carry yet.
func heldByCaller(conn *sqlite.Conn) (map[string]int64, error) {
	held := map[string]int64{}
	err := sqlitex.Execute(conn, qHeldByCaller, &sqlitex.ExecOptions{
		ResultFunc: func(stmt *sqlite.Stmt) error {
			held[stmt.ColumnText(0)] += stmt.ColumnInt64(1)
			return nil
		},
	})
	return held, err
}

// countHolders returns how many callers hold bytes: those with a
// batch_caller row, and those with held bytes and none.
func countHolders(conn *sqlite.Conn, held map[string]int64) (int64, error) {
	n, err := countInt(conn, qCallerCount)
	for name, b := range held {
		if err != nil || b <= 0 {
			continue
		}
		counted := false
		err = sqlitex.Execute(conn, qCallerBytes, &sqlitex.ExecOptions{
			Args: []any{name},
			ResultFunc: func(*sqlite.Stmt) error {
				counted = true
				return nil
			},
		})
		if !counted {
			n++
		}
	}
	return n, err
}

// largestCaller returns the caller that holds the most bytes, held bytes
// included, and those bytes, among the callers whose finished jobs hold
// any (those with a batch_caller row), the smaller name of equals; ok is
// false when there is none. Only the first entry by counter and the
// callers with held bytes can be the largest: any other holds no more
// than the first.
func largestCaller(conn *sqlite.Conn, held map[string]int64) (caller string, best int64, ok bool, err error) {
	consider := func(name string, counted int64) {
		b := counted + held[name]
		if !ok || b > best || b == best && name < caller {
			caller, best, ok = name, b, true
		}
	}
	err = sqlitex.Execute(conn, qTopCaller, &sqlitex.ExecOptions{
		ResultFunc: func(stmt *sqlite.Stmt) error {
			consider(stmt.ColumnText(0), stmt.ColumnInt64(1))
			return nil
		},
	})
	for name := range held {
		if err != nil {
			break
		}
		err = sqlitex.Execute(conn, qCallerBytes, &sqlitex.ExecOptions{
			Args: []any{name},
			ResultFunc: func(stmt *sqlite.Stmt) error {
				consider(name, stmt.ColumnInt64(0))
				return nil
			},
		})
	}
	return caller, best, ok, err
}
