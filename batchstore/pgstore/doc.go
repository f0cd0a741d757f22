// Package pgstore is the PostgreSQL [batch.Store]: several batchkit nodes
// share one database, and any node drains, cancels or reads any job.
package pgstore
