package batchstore

import "time"

// The store's clock is time.Now: a call whose Now is nil (what the runner
// passes without a Config.Now) reads it once, so that the times one call
// writes agree; a call with a Now uses that instant (see the clock note on
// [batch.CreateParams]).

// callTime is the time of a call whose Now is now.
func callTime(now *time.Time) time.Time {
	if now == nil {
		return time.Now()
	}
	return *now
}

// callNow is now, or the store's clock read once when it is nil: a call
// sets its p.Now to it on entry, so that every use of p.Now below is the
// same instant.
func callNow(now *time.Time) *time.Time {
	t := callTime(now)
	return &t
}
