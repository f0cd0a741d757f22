package batchtest

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
)

var _ batchdriver.Inspector = (*Store)(nil)

// Overview implements [batch.Inspector]. The reference store scans its
// maps under its lock: it is the semantics the database stores are held
// to, not a model of their cost (they read indexes; see their docs).
func (s *Store) Overview(ctx context.Context, p batchdriver.OverviewParams) (ov batchdriver.Overview, err error) {
	now := memNow(p.Now)
	since := time.Time{} // every finished job
	if p.FailureWindow > 0 {
		since = now.Add(-p.FailureWindow)
	}
	err = s.locked(ctx, func() error {
		ov.Stats.Bytes = s.bytes
		ov.Failures = map[batch.Outcome]int{}
		var running, all []*memJob
		bytes := map[string]int64{}
		newest := map[string]*memJob{}
		for _, j := range s.jobs {
			all = append(all, j)
			switch j.job.Status {
			case batch.JobQueued:
				ov.Stats.Queued++
			case batch.JobRunning:
				ov.Stats.Running++
				running = append(running, j)
			}
			if j.job.Runner != "" || (!j.job.FinishedAt.IsZero() && !j.job.FinishedAt.Before(since)) {
				for _, t := range j.targets {
					if t.Status == batch.TargetFailed {
						ov.Failures[t.Outcome]++
					}
				}
			}
			if j.job.Bytes != 0 {
				bytes[j.job.Caller.Name] += j.job.Bytes
			}
			if n, ok := newest[j.job.Caller.Name]; !ok || j.seq > n.seq {
				newest[j.job.Caller.Name] = j
			}
		}
		slices.SortFunc(running, func(a, b *memJob) int {
			return cmp.Or(a.job.CreatedAt.Compare(b.job.CreatedAt), cmp.Compare(a.seq, b.seq))
		})
		for _, j := range running[:min(len(running), max(p.Running, 0))] {
			ov.Running = append(ov.Running, j.job)
		}
		slices.SortFunc(all, func(a, b *memJob) int { return cmp.Compare(b.seq, a.seq) })
		for _, j := range all[:min(len(all), max(p.Recent, 0))] {
			ov.Recent = append(ov.Recent, j.job)
		}
		for _, id := range slices.Sorted(maps.Keys(s.beats)) {
			hb := s.beats[id]
			ov.Runners = append(ov.Runners, batchdriver.RunnerBeat{ID: id, Heartbeat: hb, Age: now.Sub(hb)})
		}
		for _, h := range s.hooks {
			ov.Webhooks.Pending++
			if h.runner != "" && h.dueAt.After(now) {
				ov.Webhooks.Claimed++
			}
			if !h.dueAt.After(now) {
				ov.Webhooks.Due++
				ov.Webhooks.OldestDue = max(ov.Webhooks.OldestDue, now.Sub(h.dueSince))
			}
		}
		ov.Callers = batchdriver.TopCallers(bytes, p.Callers)
		for i := range ov.Callers {
			ov.Callers[i].Caller = newest[ov.Callers[i].Caller.Name].job.Caller
		}
		return nil
	})
	return ov, err
}

// InspectJob implements [batch.Inspector].
func (s *Store) InspectJob(ctx context.Context, jobID string) (job batchdriver.Job, targets []batchdriver.TargetRecord, err error) {
	err = s.locked(ctx, func() error {
		j, ok := s.jobs[jobID]
		if !ok {
			return batch.ErrNotFound
		}
		job, targets = j.job, j.copyTargets(false)
		return nil
	})
	return job, targets, err
}
