package pgstore

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// gcBatch is how many jobs one sweep statement deletes at most, and
// gcTxJobs how many one sweep or eviction transaction deletes before it
// commits and lets the writers it holds up go on.
const (
	gcBatch  = 256
	gcTxJobs = 4 * gcBatch
)

// Sweep implements [batch.Store.Sweep]. It walks the partial index of
// released finished jobs by lease, so a pass costs the same however many
// jobs are stored, and deletes them with their targets (ON DELETE CASCADE)
// in statements of at most gcBatch jobs. Each transaction first locks the
// byte counter's rows, so that sweeps and evictions on all nodes decide one
// after the other; it skips jobs that another transaction has locked (a
// lease bump under way), which are then not expired anyway. Each also folds
// the callers' byte deltas into their counters (see foldCallers).
//
// A pass with nothing expired is one read, and locks nothing, unless
// callers' deltas wait to be folded: then it folds them, so that the log
// of deltas holds at most a sweep interval's releases. Without a p.Now it
// deletes the jobs whose lease is older than p.TTL by the database's clock.
func (s *Store) Sweep(ctx context.Context, p batchdriver.SweepParams) (int, error) {
	ctx, cancel, err := s.begin(ctx)
	defer cancel()
	if err != nil {
		return 0, s.wrap(ctx, "sweep", err)
	}
	if _, err := s.pool.Exec(ctx, s.q.hostSweep, s.now(p.Now)); err != nil {
		return 0, s.wrap(ctx, "sweep", err)
	}
	abs, age := s.timeBound(p.Now, p.TTL)
	var oldest int64
	switch err := s.pool.QueryRow(ctx, s.q.oldestExpired, abs, age).Scan(&oldest); {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, s.wrap(ctx, "sweep", s.foldIdle(ctx))
	case err != nil:
		return 0, s.wrap(ctx, "sweep", err)
	}
	total := 0
	for {
		n := 0
		err := s.inTx(ctx, func(tx pgx.Tx) error {
			if _, err := s.lockCounter(ctx, tx); err != nil {
				return err
			}
			for n < gcTxJobs {
				var d int
				if err := tx.QueryRow(ctx, s.q.sweep, abs, age, gcBatch).Scan(&d); err != nil {
					return err
				}
				n += d
				if d < gcBatch {
					break
				}
			}
			return s.foldCallers(ctx, tx)
		})
		if err != nil {
			return total, s.wrap(ctx, "sweep", err)
		}
		total += n
		if n < gcTxJobs {
			return total, nil
		}
	}
}

// lockCounter locks the byte counter's rows for the rest of tx, in id
// order, and returns their sum: the bytes of the jobs no runner holds.
func (s *Store) lockCounter(ctx context.Context, tx pgx.Tx) (int64, error) {
	rows, err := tx.Query(ctx, s.q.lockStat)
	if err != nil {
		return 0, err
	}
	bytes, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	var total int64
	for _, b := range bytes {
		total += b
	}
	return total, err
}

// foldCallers folds the callers' byte deltas (010_caller_bytes_log) into
// caller_bytes, in tx, which holds the counter's locks (lockCounter): so
// one fold runs at a time, and the caller rows it locks, in caller order,
// are locked by no one else.
func (s *Store) foldCallers(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, s.q.foldCallers); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, s.q.dropZeroCallers)
	return err
}

// foldIdle folds the callers' byte deltas, if there are any, in a
// transaction of its own.
func (s *Store) foldIdle(ctx context.Context) error {
	var any bool
	if err := s.pool.QueryRow(ctx, s.q.anyCallerDeltas).Scan(&any); err != nil || !any {
		return err
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := s.lockCounter(ctx, tx); err != nil {
			return err
		}
		return s.foldCallers(ctx, tx)
	})
}

// Heartbeat implements [batch.Store.Heartbeat]: one row per runner,
// written in a statement of its own (so at the statement's time on the
// database's clock), and never moved back.
func (s *Store) Heartbeat(ctx context.Context, p batchdriver.HeartbeatParams) error {
	ctx, cancel, err := s.begin(ctx)
	defer cancel()
	if err != nil {
		return s.wrap(ctx, "heartbeat", err)
	}
	if _, err := s.pool.Exec(ctx, s.q.heartbeat, p.Runner, s.now(p.Now)); err != nil {
		return s.wrap(ctx, "heartbeat", err)
	}
	return nil
}

// Reap implements [batch.Store.Reap] in one READ COMMITTED transaction:
//
//  1. It deletes the heartbeats it judges stale (and p.Runner's, or all
//     for AllLive). A heartbeat racing with it is ordered by the row lock:
//     one that committed first keeps its runner alive; one that comes after
//     finds no row, and its runner's next drain write gets
//     [batch.ErrNotHeld].
//  2. It fails the selected jobs in one statement, which locks their rows,
//     releases them and moves their bytes into the counter: the jobs p
//     selects, where a stale selection is every held job whose runner has
//     no heartbeat row any more.
//  3. It fails their targets in flight, the ones their rows named when the
//     lock was granted.
//
// The job trigger writes the webhook events of the jobs it finishes (see
// migrations/003), and the webhook claims of p.Runner (AllLive: all) are
// released, due at once, in the same transaction.
//
// Without a p.Now, a heartbeat is stale when it is older than p.StaleAfter
// by the database's clock.
func (s *Store) Reap(ctx context.Context, p batchdriver.ReapParams) (int, error) {
	ctx, cancel, err := s.begin(ctx)
	defer cancel()
	if err != nil {
		return 0, s.wrap(ctx, "reap jobs", err)
	}
	stale := p.StaleAfter > 0
	var parts []string
	args := []any{s.now(p.Now), p.Reason, len(p.Reason)}
	if p.AllLive {
		parts = append(parts, s.q.reapLive)
	}
	if p.Runner != "" {
		parts = append(parts, s.q.reapRunner)
		args = append(args, p.Runner)
	}
	if stale {
		parts = append(parts, s.q.reapOrphans)
	}
	if len(parts) == 0 {
		return 0, nil
	}
	failed := 0
	var ids []string
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		failed, ids = 0, nil
		switch {
		case p.AllLive:
			if _, err := tx.Exec(ctx, s.q.forgetAll); err != nil {
				return err
			}
		case p.Runner != "":
			if _, err := tx.Exec(ctx, s.q.forgetRunner, p.Runner); err != nil {
				return err
			}
		}
		if stale {
			abs, age := s.timeBound(p.Now, p.StaleAfter)
			if _, err := tx.Exec(ctx, s.q.forgetStale, abs, age); err != nil {
				return err
			}
		}
		q := s.q.reapJobs
		if p.HandBack {
			q = strings.ReplaceAll(s.q.reapHandBack, "{repeat}", strconv.FormatBool(p.RepeatInFlight))
		}
		rows, err := tx.Query(ctx, strings.Replace(q, "{sel}", strings.Join(parts, " UNION ALL "), 1), args...)
		if err != nil {
			return err
		}
		var seqs []int64 // with idxs: the targets that were in flight
		var idxs []int
		for rows.Next() {
			var seq int64
			var id string
			var live bool
			var inFlight int
			if err := rows.Scan(&seq, &id, &live, &inFlight); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
			if live {
				failed++
			}
			if inFlight >= 0 && (!p.RepeatInFlight || !slices.Contains(p.Unfetched, id)) {
				seqs, idxs = append(seqs, seq), append(idxs, inFlight)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		// The webhook claims of the runners that left, due at once: after
		// the jobs, whose trigger writes webhook rows too, so that the
		// locks go job, then webhook, as in every statement.
		switch {
		case p.AllLive:
			_, err = tx.Exec(ctx, s.q.hookReleaseAll, s.now(p.Now))
		case p.Runner != "":
			_, err = tx.Exec(ctx, s.q.hookRelease, s.now(p.Now), p.Runner)
		}
		if err != nil || len(seqs) == 0 {
			return err
		}
		if p.HandBack && p.RepeatInFlight {
			_, err = tx.Exec(ctx, s.q.reapRepeat, seqs, idxs)
			return err
		}
		outcome := batchdriver.OutcomeOther
		if p.HandBack {
			outcome = batchdriver.OutcomeInterrupted
		}
		_, err = tx.Exec(ctx, s.q.reapTargets, seqs, idxs, []byte(p.Reason), string(outcome))
		return err
	})
	if err != nil {
		return 0, s.wrap(ctx, "reap jobs", err)
	}
	s.feed.changed(ids...)
	return failed, nil
}

// Stats implements [batch.Store.Stats] in one statement: the live counts
// from the partial index of live jobs (at most Limits.JobsTotal rows), and
// the bytes as the counter plus the held jobs' bytes.
func (s *Store) Stats(ctx context.Context) (st batchdriver.Stats, err error) {
	ctx, cancel, err := s.begin(ctx)
	defer cancel()
	if err != nil {
		return st, s.wrap(ctx, "stats", err)
	}
	if err := s.pool.QueryRow(ctx, s.q.stats).Scan(&st.Queued, &st.Running, &st.Bytes); err != nil {
		return batchdriver.Stats{}, s.wrap(ctx, "stats", err)
	}
	return st, nil
}
