-- tests/pg/plans.sql: proves that the workload's plans do what workload.sql says they do (spill to
-- disk with work_mem = 64kB, run parallel workers, compile with JIT). Run after workload.sql on the
-- tables it leaves; its output is grepped, not compared (plans may change with ANALYZE's sample).
\set ON_ERROR_STOP 1
SET work_mem = '64kB';
-- the workload has built indexes by now: plan the scans as the workload did before them
SET enable_indexscan = off;
SET enable_indexonlyscan = off;
SET enable_bitmapscan = off;
SET enable_incremental_sort = off;
SET enable_sort = off;
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
SELECT count(*) FROM (SELECT txt AS k, count(*) AS c FROM items GROUP BY txt) AS g;
RESET enable_sort;
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
SELECT id, txt FROM items ORDER BY txt DESC, id OFFSET 100000 LIMIT 5;
SET enable_mergejoin = off;
SET enable_nestloop = off;
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
SELECT count(*) FROM items a JOIN items b ON a.u = b.u AND a.vc = b.vc;
RESET enable_mergejoin;
RESET enable_nestloop;
SET max_parallel_workers_per_gather = 2;
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
SELECT flag, count(*), sum(num), max(txt) FROM items GROUP BY flag ORDER BY flag;
RESET max_parallel_workers_per_gather;
SET jit = on;
SET jit_above_cost = 0;
SET jit_inline_above_cost = 0;
SET jit_optimize_above_cost = 0;
-- EXPLAIN prints its JIT section only with COSTS on
EXPLAIN (ANALYZE, TIMING OFF, SUMMARY OFF)
SELECT sum(big % 7 * 3 + id), count(*) FILTER (WHERE num > 1000 AND flag) FROM items;
