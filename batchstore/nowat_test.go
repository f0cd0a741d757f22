package batchstore

import "time"

// nowAt is the Now of a store call at t (see the clock note on
// [batch.CreateParams]).
func nowAt(t time.Time) *time.Time { return &t }
