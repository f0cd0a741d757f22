// Package ablation holds the switches with which the benchmarks turn a
// store's throughput mechanisms off one at a time, to measure what each
// buys. Only code in this repository can import it, and only the bench
// module sets it; a store reads it once, when it opens, so a switch set
// afterwards changes no open store.
package ablation

import "sync/atomic"

// Off names the mechanisms switched off. The zero value, the only one a
// host ever sees, switches none off.
type Off struct {
	// SQLiteGroupCommit: each SQLite write commits alone.
	SQLiteGroupCommit bool `json:",omitempty"`
	// SQLiteLinger: a SQLite write group never waits for the writers it
	// expects.
	SQLiteLinger bool `json:",omitempty"`
	// SQLiteCheckpointer: under synchronous=NORMAL, SQLite checkpoints
	// inside the commit that crosses its threshold, as it does under FULL.
	SQLiteCheckpointer bool `json:",omitempty"`
	// SQLiteQuickReaders: point reads take a connection from the pool.
	SQLiteQuickReaders bool `json:",omitempty"`
	// PGWriteGroups: each PostgreSQL drain write commits alone.
	PGWriteGroups bool `json:",omitempty"`
	// PGSharedCreates: every PostgreSQL create takes the global lock
	// exclusive.
	PGSharedCreates bool `json:",omitempty"`
	// PGNotifyWindow: a PostgreSQL store sends its changes to the other
	// nodes as soon as the last NOTIFY has returned, not at most once per
	// window.
	PGNotifyWindow bool `json:",omitempty"`
}

var off atomic.Pointer[Off]

// Set switches off what o names, for the stores opened after it.
func Set(o Off) { off.Store(&o) }

// Get returns what is switched off.
func Get() Off {
	if o := off.Load(); o != nil {
		return *o
	}
	return Off{}
}
