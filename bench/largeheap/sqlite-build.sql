-- sqlite-build.sql: the database of bench/largeheap.sh's sqlite workload, made once with no
-- preload (@ROWS@ rows; k is a scattered, distinct key with an index).
PRAGMA journal_mode=OFF;
PRAGMA synchronous=OFF;
CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER NOT NULL, v TEXT NOT NULL);
WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < @ROWS@)
INSERT INTO t SELECT i, (i * 2654435761) % 4294967296, printf('row %d of a large page cache', i) FROM s;
CREATE INDEX t_k ON t(k);
