package batchhttp

import (
	"net/http"
	"sync"
)

// callerSlots counts what each caller holds at once of one kind of
// request that lasts or holds memory (a long-poll, a results stream, a
// submit), so that one caller cannot hold all of a server's connections or
// memory with them.
type callerSlots struct {
	max  int
	busy *httpError // the answer to one more than max
	mu   sync.Mutex
	held map[string]int // caller name → held now; absent when 0
}

func newCallerSlots(max int, busy *httpError) *callerSlots {
	return &callerSlots{max: max, busy: busy, held: map[string]int{}}
}

// acquire takes one of caller's slots, or returns the busy answer when the
// caller holds them all. The caller gives the slot back with release.
func (s *callerSlots) acquire(caller string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[caller] >= s.max {
		return s.busy
	}
	s.held[caller]++
	return nil
}

func (s *callerSlots) release(caller string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[caller]--; s.held[caller] <= 0 {
		delete(s.held, caller)
	}
}

// The answers of a caller over its caps of long-polls, streams, submits
// and ?results=1 answers.
var (
	errWaitsBusy = &httpError{
		status: http.StatusTooManyRequests, code: CodeWaitsBusy, retryAfter: 5,
		msg:  "too many long-polls of yours at once",
		hint: "wait on fewer jobs at a time, or follow one job's results stream",
	}
	errStreamsBusy = &httpError{
		status: http.StatusTooManyRequests, code: CodeStreamsBusy, retryAfter: 5,
		msg:  "too many results streams of yours at once",
		hint: "read fewer streams at a time",
	}
	errResultsBusyCaller = &httpError{
		status: http.StatusTooManyRequests, code: CodeResultsBusy, retryAfter: 1,
		msg:  "too many result answers of yours in flight",
		hint: "read fewer jobs' results at a time, or read them with the results stream",
	}
	errSubmitsBusy = &httpError{
		status: http.StatusTooManyRequests, code: CodeSubmitsBusy, retryAfter: 5,
		msg:  "too many submits of yours at once",
		hint: "send fewer submits at a time",
	}
)
