-- 009_stat_shards: the byte counter in shards, so that releases on many
-- nodes do not queue for one row.
--
-- {s} is the store's schema, quoted.
--
-- Every drain write that releases a job adds the job's bytes to the
-- counter, and holds the row it changed until its commit (its WAL flush):
-- with one row, the releases of all nodes ran one after the other, the
-- one lock wait the 3-node benchmark found once relation extension was out
-- of the way. The counter is now the sum of its rows (stat_shards of them,
-- ids 1 to 16); a release adds to the row its job's seq names (1 + seq %
-- 16), so two releases meet only one time in 16. The reap, the sweep and
-- an eviction keep moving row 1. Sweep and Evict, which decide on the
-- whole counter, lock every row, in id order, before anything else, so
-- that no release commits while they decide (as with one row): a release
-- locks one row and then, in its triggers, its caller's caller_bytes row,
-- so no lock order can cycle. Readers sum the rows. A node of an older
-- build that is still running reads row 1 alone, and so counts less until
-- it is replaced (a newer schema refuses to open for it).

ALTER TABLE {s}.stat DROP CONSTRAINT stat_id_check;
ALTER TABLE {s}.stat ADD CONSTRAINT stat_id_check CHECK (id BETWEEN 1 AND 16);
INSERT INTO {s}.stat (id, bytes) SELECT g, 0 FROM generate_series(2, 16) g;
