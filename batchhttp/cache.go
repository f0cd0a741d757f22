package batchhttp

import (
	"container/list"
	"sync"
	"time"

	"github.com/siftfetch/batchkit/batch"
)

// summaryCache keeps the encoded status summaries of recent jobs, so that
// a poll of a job that has not changed costs a read of the job's row and a
// write of the bytes, not a read of its targets and their encoding. Each
// entry is keyed by the caller and the job, and valid for one version of
// the job (what a summary shows of the job row: status, error, progress,
// bytes and lease). Every write of a target row changes the job's version
// too (a target ends: progress moves; the next one starts in the same
// write; a claim, a cancel or a reap: the status moves), so the cache never
// answers with a stale summary. A store write that changed a target and
// none of these would break that; the runner suite's reads pin it. It is bounded in bytes and
// drops the least recently used entries first.
type summaryCache struct {
	mu    sync.Mutex
	max   int // bytes
	size  int
	lru   *list.List // of *cacheEntry, most recent first
	byKey map[cacheKey]*list.Element
}

type cacheKey struct{ caller, job string }

// jobVersion is what a status summary shows of the job row.
type jobVersion struct {
	status      batch.JobStatus
	err         string
	total, done int
	bytes       int64
	expiresAt   time.Time
	createdAt   time.Time
}

func versionOf(info batch.JobInfo) jobVersion {
	return jobVersion{info.Status, info.Error, info.TargetsTotal, info.TargetsDone, info.Bytes, info.ExpiresAt, info.CreatedAt}
}

type cacheEntry struct {
	key     cacheKey
	version jobVersion
	body    []byte
}

func newSummaryCache(maxBytes int) *summaryCache {
	return &summaryCache{max: maxBytes, lru: list.New(), byKey: make(map[cacheKey]*list.Element)}
}

// get returns the summary cached for key at version v.
func (c *summaryCache) get(key cacheKey, v jobVersion) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if !ok {
		return nil, false
	}
	e := el.Value.(*cacheEntry)
	if e.version != v {
		return nil, false
	}
	c.lru.MoveToFront(el)
	return e.body, true
}

// put caches body as key's summary at version v.
func (c *summaryCache) put(key cacheKey, v jobVersion, body []byte) {
	if len(body) > c.max/8 { // a few large jobs must not push out every other
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		c.size -= len(el.Value.(*cacheEntry).body)
		c.lru.Remove(el)
	}
	c.byKey[key] = c.lru.PushFront(&cacheEntry{key, v, body})
	c.size += len(body)
	for c.size > c.max {
		old := c.lru.Back()
		e := old.Value.(*cacheEntry)
		c.lru.Remove(old)
		delete(c.byKey, e.key)
		c.size -= len(e.body)
	}
}
