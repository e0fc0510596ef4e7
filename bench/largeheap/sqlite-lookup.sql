-- sqlite-lookup.sql: bench/largeheap.sh's sqlite workload. A page cache of up to 1 GB (malloc'd
-- page by page; no mmap), filled by a scan of the table and one of the index (not timed), then
-- @LOOKUPS@ index lookups of random keys, each followed by its row: only that statement is
-- timed (.timer). The AnonHugePages line of sqlite3's /proc/PID/smaps_rollup goes to stderr.
PRAGMA cache_size=-1000000;
PRAGMA mmap_size=0;
SELECT count(*), sum(length(v)) FROM t;
SELECT count(*), sum(k % 1000) FROM t INDEXED BY t_k WHERE k >= 0;
.timer on
WITH RECURSIVE r(n, x) AS (SELECT 0, @SEED@ UNION ALL SELECT n + 1, (x * 1103515245 + 12345) % 2147483648 FROM r WHERE n < @LOOKUPS@)
SELECT count(*), sum(length(t.v)), sum(t.id) FROM r JOIN t ON t.k = ((r.x % @ROWS@ + 1) * 2654435761) % 4294967296;
.timer off
.shell grep AnonHugePages /proc/$PPID/smaps_rollup >&2
