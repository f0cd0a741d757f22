package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// Expire implements [batch.Store.Expire] in one statement (see expire in
// sql.go), after a read without a lock that finds nothing to do on most
// passes. A queued job a concurrent claim holds locked is left to the
// claim's drain, which ends it at its first write.
func (s *Store) Expire(ctx context.Context, p batchdriver.ExpireParams) ([]batchdriver.Expired, error) {
	ctx, cancel, err := s.begin(ctx)
	defer cancel()
	if err != nil {
		return nil, s.wrap(ctx, "expire", err)
	}
	now := s.now(p.Now)
	var any bool
	if err := s.pool.QueryRow(ctx, s.q.anyExpired, now).Scan(&any); err != nil || !any {
		return nil, s.wrap(ctx, "expire", err)
	}
	rows, err := s.pool.Query(ctx, s.q.expire, now)
	if err != nil {
		return nil, s.wrap(ctx, "expire", err)
	}
	ended, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (batchdriver.Expired, error) {
		var e batchdriver.Expired
		var status string
		err := row.Scan(&e.JobID, &e.Caller, &status, &e.Targets, &e.Webhook)
		e.Status = batchdriver.JobStatus(status)
		return e, err
	})
	if err != nil {
		return nil, s.wrap(ctx, "expire", err)
	}
	ids := make([]string, len(ended))
	for i, e := range ended {
		ids[i] = e.JobID
	}
	s.feed.changed(ids...)
	return ended, nil
}
