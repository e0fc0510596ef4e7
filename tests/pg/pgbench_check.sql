-- tests/pg/pgbench_check.sql: the state pgbench left, after `pgbench --random-seed=... -t N`.
-- Each client draws the same (aid, tid, bid, delta) sequence on every run with the same seed and
-- additions commute, so every balance and the history as a multiset are deterministic even though
-- the clients interleave differently from run to run.
\set ON_ERROR_STOP 1
SELECT count(*) AS history_rows, sum(delta) AS delta_sum,
       md5(string_agg(aid || ':' || tid || ':' || bid || ':' || delta, ',' ORDER BY aid, tid, bid, delta)) AS history
FROM pgbench_history;
SELECT count(*) AS accounts, sum(abalance) AS balance, md5(string_agg(aid || ':' || abalance, ',' ORDER BY aid)) AS accounts_md5
FROM pgbench_accounts;
SELECT md5(string_agg(tid || ':' || tbalance, ',' ORDER BY tid)) AS tellers_md5,
       (SELECT md5(string_agg(bid || ':' || bbalance, ',' ORDER BY bid)) FROM pgbench_branches) AS branches_md5
FROM pgbench_tellers;
SELECT (SELECT sum(abalance) FROM pgbench_accounts) = (SELECT sum(delta) FROM pgbench_history) AS accounts_agree,
       (SELECT sum(tbalance) FROM pgbench_tellers) = (SELECT sum(delta) FROM pgbench_history) AS tellers_agree,
       (SELECT sum(bbalance) FROM pgbench_branches) = (SELECT sum(delta) FROM pgbench_history) AS branches_agree;
