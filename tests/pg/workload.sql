-- tests/pg/workload.sql: the SQL workload of tests/pg/postgres.sh.
-- Every result is deterministic (fixed data, ORDER BY on unique keys, checksums over ordered
-- aggregates), so the psql output of a run under flatmalloc must equal the one under glibc byte
-- for byte. Large results are reduced to counts and md5 checksums to keep the output short.
-- work_mem is 64kB for the whole file so that sorts, hash aggregates and hash joins spill to
-- temporary files (the server logs each one: log_temp_files = 0, and the script checks the log).
\set ON_ERROR_STOP 1
\pset null '(null)'
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, YMD';
SET IntervalStyle = 'postgres';
SET extra_float_digits = 0;
SET work_mem = '64kB';

-- ---------------------------------------------------------------- a table with every common type
CREATE TABLE items (
  id    int PRIMARY KEY,
  big   bigint NOT NULL,
  num   numeric(20,6),
  txt   text,
  vc    varchar(40),
  flag  bool,
  d     date,
  ts    timestamptz,
  iv    interval,
  js    json,
  jb    jsonb,
  arr   int[],
  tarr  text[],
  u     uuid,
  b     bytea
);

INSERT INTO items
SELECT i,
       (i::bigint * 1000003) % 1000000007,
       (i * 3.141592)::numeric(20,6) / 7,
       md5(i::text) || repeat(chr(97 + i % 26), i % 50),
       'v' || (i % 997),
       i % 3 = 0,
       date '2000-01-01' + (i % 10000),
       timestamptz '2020-01-01 00:00:00+00' + i * interval '37 seconds',
       make_interval(days => i % 400, secs => i % 86400),
       json_build_object('id', i, 'name', 'n' || i, 'tags', json_build_array(i % 5, i % 7)),
       jsonb_build_object('id', i, 'grp', i % 100, 'nested', jsonb_build_object('k', md5(i::text), 'odd', i % 2 = 1)),
       ARRAY[i, i % 10, i % 100],
       ARRAY['a' || i % 3, 'b' || i % 5],
       md5('u' || i)::uuid,
       decode(md5(i::text), 'hex')
FROM generate_series(1, 200000) AS i;

-- NULLs in every nullable column
INSERT INTO items (id, big) SELECT i, -i FROM generate_series(200001, 200100) AS i;

SELECT count(*), sum(big), sum(num), min(d), max(d), min(ts), max(ts), sum(iv),
       count(*) FILTER (WHERE flag), count(js), count(DISTINCT vc)
FROM items;

SELECT id, big, num, txt, vc, flag, d, ts, iv, js, jb, arr, tarr, u, b
FROM items WHERE id IN (1, 2, 777, 199999, 200050) ORDER BY id;

-- ---------------------------------------------------------------- sorts larger than work_mem
SELECT id, txt FROM items ORDER BY txt DESC, id OFFSET 100000 LIMIT 5;
SELECT md5(string_agg(id::text, ',' ORDER BY vc, num DESC, id)) FROM items;
SELECT md5(string_agg(u::text, ',' ORDER BY u)) AS by_uuid,
       md5(string_agg(encode(b, 'hex'), ',' ORDER BY b, id)) AS by_bytea,
       md5(string_agg(ts::text, ',' ORDER BY ts DESC)) AS by_ts
FROM items;
SELECT md5(string_agg(txt, ',' ORDER BY txt COLLATE "en-x-icu", id)) AS icu_order FROM items;
SELECT md5(string_agg(s.x, '|')) FROM (SELECT txt || vc AS x FROM items ORDER BY 1, id) AS s;

-- ---------------------------------------------------------------- hash aggregates larger than work_mem
SET enable_sort = off;
SELECT count(*), sum(c), md5(string_agg(k || ':' || c, ',' ORDER BY k))
FROM (SELECT txt AS k, count(*) AS c FROM items GROUP BY txt) AS g;
SELECT count(*), sum(s), md5(string_agg(k::text || '=' || s, ',' ORDER BY k))
FROM (SELECT big % 50000 AS k, sum(num) AS s FROM items GROUP BY big % 50000) AS g;
SELECT count(*), md5(string_agg(k, ',' ORDER BY k))
FROM (SELECT DISTINCT md5(vc || id % 30000) AS k FROM items) AS g;
RESET enable_sort;

SELECT vc, count(*), sum(num), avg(big)::numeric(30,4), min(d), max(ts),
       string_agg(id::text, ',' ORDER BY id) FILTER (WHERE id < 3000) AS first_ids
FROM items GROUP BY vc ORDER BY count(*) DESC, vc LIMIT 10;

SELECT flag, d, count(*)
FROM items WHERE id <= 200000 GROUP BY ROLLUP (flag, d) ORDER BY flag, d NULLS FIRST LIMIT 8;
SELECT jb ->> 'grp' AS grp, count(*), sum((jb ->> 'id')::int)
FROM items GROUP BY GROUPING SETS ((jb ->> 'grp'), ()) ORDER BY GROUPING(jb ->> 'grp') DESC, grp NULLS FIRST LIMIT 6;

-- ---------------------------------------------------------------- joins
CREATE TABLE customers (cid int PRIMARY KEY, name text NOT NULL, region text NOT NULL, since date);
INSERT INTO customers
SELECT c, 'customer ' || c, (ARRAY['north', 'south', 'east', 'west', 'central'])[1 + c % 5],
       date '2010-01-01' + c % 3000
FROM generate_series(1, 20000) AS c;
CREATE TABLE orders (oid bigint PRIMARY KEY, cid int REFERENCES customers, item int, qty int,
                     price numeric(12,2), placed timestamptz);
INSERT INTO orders
SELECT o, 1 + (o::bigint * 7919) % 20000, 1 + (o::bigint * 104729) % 200000, 1 + o % 9,
       ((o * 31) % 100000) / 100.0, timestamptz '2023-01-01 00:00+00' + o * interval '11 minutes'
FROM generate_series(1, 150000) AS o;
ANALYZE customers, orders, items;

SELECT c.region, count(*), sum(o.qty * o.price), count(DISTINCT o.cid)
FROM orders o JOIN customers c USING (cid) GROUP BY c.region ORDER BY c.region;

SET enable_mergejoin = off;
SET enable_nestloop = off;
SELECT count(*), sum(i.num * o.qty), md5(string_agg(o.oid::text, ',' ORDER BY o.oid))
FROM orders o JOIN items i ON i.id = o.item;
SELECT count(*), md5(string_agg(a.id || '-' || b.id, ',' ORDER BY a.id))
FROM items a JOIN items b ON a.u = b.u AND a.vc = b.vc;
RESET enable_mergejoin;
SET enable_hashjoin = off;
SELECT count(*), sum(i.big % 1000), md5(string_agg(i.txt, '' ORDER BY o.oid))
FROM orders o JOIN items i ON i.id = o.item WHERE o.qty > 4;
RESET enable_hashjoin;
RESET enable_nestloop;

SELECT c.cid, c.name, count(o.oid) AS n, coalesce(sum(o.price), 0) AS total
FROM customers c LEFT JOIN orders o ON o.cid = c.cid AND o.qty = 9
GROUP BY c.cid, c.name ORDER BY total DESC, c.cid LIMIT 5;

SELECT count(*) FROM customers c WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.cid = c.cid AND o.qty = 1);
SELECT count(*) FROM items WHERE id IN (SELECT item FROM orders WHERE price > 900);

-- ---------------------------------------------------------------- window functions, CTEs
SELECT id, num, rank() OVER w, sum(num) OVER w, lag(id) OVER w, ntile(4) OVER w
FROM items WHERE id % 1000 = 0 AND id <= 200000
WINDOW w AS (PARTITION BY flag ORDER BY num DESC, id) ORDER BY flag, num DESC, id LIMIT 12;
SELECT md5(string_agg(r::text, ',' ORDER BY id))
FROM (SELECT id, row_number() OVER (PARTITION BY vc ORDER BY ts DESC, id) AS r FROM items) AS w;

WITH RECURSIVE fib(n, a, b) AS (SELECT 1, 0::numeric, 1::numeric
                                UNION ALL SELECT n + 1, b, a + b FROM fib WHERE n < 300)
SELECT n, a FROM fib WHERE n IN (1, 10, 90, 91, 300) ORDER BY n;
WITH RECURSIVE tree(id, depth, path) AS (
  SELECT 1, 0, ARRAY[1]
  UNION ALL SELECT t.id * 2 + k, t.depth + 1, t.path || (t.id * 2 + k)
  FROM tree t, generate_series(0, 1) AS k WHERE t.depth < 14)
SELECT count(*), max(depth), md5(string_agg(array_to_string(path, '.'), ';' ORDER BY id)) FROM tree;

-- ---------------------------------------------------------------- numeric, text, date/time functions
SELECT factorial(200) % 1000000007 AS f, (2::numeric ^ 1000)::text AS p, sqrt(2::numeric(1000, 500)) AS s,
       ln(10::numeric), exp(3.5::numeric(30, 20)), round(1234567.891234, 3), 10.0 / 3;
SELECT sum(num * num), sum(num / 7), sum(big::numeric * big) FROM items;
SELECT upper(txt), initcap(vc), lpad(id::text, 8, '0'), reverse(txt), left(txt, 5), length(txt),
       position('a' IN txt), split_part(txt, 'a', 2), format('%s|%-6s|%I', id, vc, txt),
       regexp_replace(txt, '([0-9]+)', '<\1>', 'g'), translate(txt, 'abc', 'XYZ')
FROM items WHERE id IN (5, 55, 555) ORDER BY id;
SELECT count(*), md5(string_agg(m[1], ',' ORDER BY id))
FROM (SELECT id, regexp_matches(txt, '([a-f]{3,})', 'g') AS m FROM items WHERE id <= 20000) AS r;
SELECT count(*) FROM items WHERE txt LIKE '%abc%' OR vc ILIKE 'V12%' OR txt ~ '^[0-9]{4}';
SELECT to_char(ts, 'YYYY-MM-DD HH24:MI:SS Dy Month'), to_char(num, 'FM999G999G990D0000'),
       d + iv, ts - iv, date_trunc('month', ts), extract(epoch FROM iv), age(ts, timestamptz '2000-01-01'),
       justify_interval(iv * 13)
FROM items WHERE id IN (3, 33333, 123456) ORDER BY id;
SELECT count(*), min(g), max(g)
FROM generate_series(timestamptz '2024-01-01', timestamptz '2024-12-31', interval '7 hours 3 minutes') AS g;
SELECT to_tsvector('english', string_agg(txt || ' running jumps quickly', ' ' ORDER BY id)) @@ to_tsquery('english', 'jump & run')
FROM items WHERE id <= 500;

-- ---------------------------------------------------------------- json / jsonb, arrays
SELECT count(*), sum((js ->> 'id')::int), sum((jb -> 'nested' ->> 'odd')::bool::int)
FROM items WHERE jb @> '{"grp": 42}';
SELECT jb #> '{nested,k}', jsonb_pretty(jb), js -> 'tags' -> 1, jsonb_typeof(jb -> 'id')
FROM items WHERE id IN (7, 70007) ORDER BY id;
SELECT md5(jsonb_agg(jb ORDER BY id)::text), md5(json_agg(js ORDER BY id)::text) FROM items WHERE id <= 50000;
SELECT key, count(*) FROM items, jsonb_each(jb) GROUP BY key ORDER BY key;
SELECT count(*), md5(string_agg(v::text, ',' ORDER BY v::text))
FROM (SELECT jsonb_path_query(jb, '$.nested.k') AS v FROM items WHERE id <= 30000) AS p;
SELECT jsonb_build_object('a', array_agg(id ORDER BY id), 'b', jsonb_object_agg(vc, id ORDER BY id))
FROM items WHERE id <= 12;
SELECT x, jsonb_set(x, '{q}', '[1,2,{"r":null}]') FROM (SELECT '{"p":1}'::jsonb AS x) AS s;
SELECT (SELECT to_jsonb(t) FROM (SELECT id, num, d, ts, arr, u FROM items WHERE id = 9) AS t);

SELECT sum(array_length(arr, 1)), sum(arr[2]), count(*) FILTER (WHERE arr @> ARRAY[7]),
       count(*) FILTER (WHERE tarr && ARRAY['b3'])
FROM items;
SELECT cardinality(a), a[1:3], a[array_upper(a, 1)], md5(array_to_string(a, ','))
FROM (SELECT array_agg(id ORDER BY big) AS a FROM items) AS s;
SELECT u, count(*) FROM (SELECT unnest(tarr) AS u FROM items) AS s GROUP BY u ORDER BY u;
SELECT string_to_array('a,b,,c', ','), array_remove(ARRAY[1, 2, 3, 2], 2), array_cat(ARRAY[[1, 2]], ARRAY[[3, 4]]),
       ARRAY(SELECT generate_series(1, 5)), array_position(ARRAY['x', 'y'], 'y');

-- ---------------------------------------------------------------- updates, deletes, upserts, subtransactions
UPDATE items SET num = num * 2, jb = jb || '{"upd": true}', arr = arr || id, vc = vc || 'u'
WHERE id % 10 = 0;
DELETE FROM items WHERE id % 13 = 0;
WITH upd AS (UPDATE orders SET qty = qty + 1 WHERE placed < timestamptz '2023-03-01' RETURNING oid, qty)
SELECT count(*), sum(qty), md5(string_agg(oid::text, ',' ORDER BY oid)) FROM upd;
DELETE FROM orders WHERE oid % 7 = 3;
INSERT INTO customers (cid, name, region) VALUES (5, 'dup', 'x'), (20001, 'new', 'north')
ON CONFLICT (cid) DO UPDATE SET name = customers.name || ' (seen again)';
SELECT cid, name, region FROM customers WHERE cid IN (5, 20001) ORDER BY cid;
SELECT count(*), sum(num), md5(string_agg(jb::text, '' ORDER BY id)), sum(cardinality(arr)) FROM items;
SELECT count(*), sum(qty) FROM orders;

BEGIN;
SAVEPOINT s1;
UPDATE items SET txt = 'gone' WHERE id < 100;
ROLLBACK TO SAVEPOINT s1;
SAVEPOINT s2;
INSERT INTO customers VALUES (20002, 'kept', 'south', NULL);
RELEASE SAVEPOINT s2;
COMMIT;
SELECT count(*) FROM items WHERE txt = 'gone';
SELECT * FROM customers WHERE cid > 20000 ORDER BY cid;

-- ---------------------------------------------------------------- PL/pgSQL, triggers, exceptions
CREATE INDEX orders_by_cid ON orders (cid);  -- keeps the foreign-key checks of the deletes below cheap
CREATE TABLE audit (n serial PRIMARY KEY, op text, cid int, note text);
CREATE FUNCTION audit_customers() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO audit (op, cid, note) VALUES (TG_OP, coalesce(NEW.cid, OLD.cid), coalesce(NEW.name, OLD.name));
  RETURN coalesce(NEW, OLD);
END $$;
CREATE TRIGGER customers_audit AFTER INSERT OR UPDATE OR DELETE ON customers
  FOR EACH ROW EXECUTE FUNCTION audit_customers();
CREATE FUNCTION churn(n int) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  acc text := '';
  j jsonb := '[]';
  caught int := 0;
BEGIN
  FOR i IN 1 .. n LOOP
    acc := md5(acc || i);
    j := j || to_jsonb(i);
    BEGIN
      IF i % 97 = 0 THEN
        PERFORM 1 / 0;
      END IF;
      INSERT INTO customers VALUES (30000 + i, acc, 'loop', NULL);
    EXCEPTION WHEN division_by_zero THEN
      caught := caught + 1;
    END;
  END LOOP;
  RETURN acc || ' ' || jsonb_array_length(j) || ' ' || caught;
END $$;
SELECT churn(3000);
UPDATE customers SET region = 'moved' WHERE cid BETWEEN 30001 AND 30500;
DELETE FROM customers WHERE cid > 32000;
SELECT op, count(*), md5(string_agg(cid || note, ',' ORDER BY n)) FROM audit GROUP BY op ORDER BY op;

PREPARE top_orders(int, numeric) AS
  SELECT oid, cid, qty, price FROM orders WHERE cid = $1 AND price > $2 ORDER BY oid;
EXECUTE top_orders(17, 100);
EXECUTE top_orders(4242, 10);
DEALLOCATE top_orders;

BEGIN;
DECLARE cur CURSOR FOR SELECT id, txt FROM items ORDER BY num DESC, id;
FETCH 3 FROM cur;
MOVE FORWARD 100000 IN cur;
FETCH 2 FROM cur;
CLOSE cur;
COMMIT;

-- ---------------------------------------------------------------- TOAST, COPY, temp and partitioned tables
CREATE TABLE docs (id int PRIMARY KEY, body text, blob bytea);
ALTER TABLE docs ALTER COLUMN body SET COMPRESSION lz4;
INSERT INTO docs
SELECT k, repeat(md5(k::text), 20000 + k * 1000),
       (SELECT string_agg(decode(md5(k::text || g), 'hex'), '' ) FROM generate_series(1, 20000 + k * 500) AS g)
FROM generate_series(1, 30) AS k;
SELECT id, length(body), md5(body), length(blob), md5(blob) FROM docs WHERE id % 7 = 1 ORDER BY id;
UPDATE docs SET body = body || body WHERE id % 2 = 0;
SELECT sum(length(body)), md5(string_agg(md5(body), '' ORDER BY id)) FROM docs;

COPY (SELECT id, num, txt, flag, d, ts, iv, jb, arr, u, b FROM items WHERE id % 20000 = 1 ORDER BY id) TO STDOUT;
CREATE TEMP TABLE copy_in (a int, b text, c jsonb);
COPY copy_in FROM STDIN;
1	one	{"x": 1}
2	two	{"y": [1, 2, 3]}
3	\N	null
\.
SELECT * FROM copy_in ORDER BY a;

CREATE TEMP TABLE tmp_big AS SELECT id, txt, jb FROM items WHERE id % 3 = 1;
SELECT count(*), md5(string_agg(txt, ',' ORDER BY id)) FROM tmp_big;

CREATE TABLE events (id bigint, at date, payload jsonb) PARTITION BY RANGE (at);
CREATE TABLE events_2000 PARTITION OF events FOR VALUES FROM ('2000-01-01') TO ('2010-01-01');
CREATE TABLE events_2010 PARTITION OF events FOR VALUES FROM ('2010-01-01') TO ('2020-01-01');
CREATE TABLE events_rest PARTITION OF events DEFAULT;
INSERT INTO events SELECT id, d, jb FROM items WHERE d IS NOT NULL;
SELECT tableoid::regclass, count(*), min(at), max(at) FROM events GROUP BY 1 ORDER BY 1;

-- ---------------------------------------------------------------- index builds (external sort), index scans
SET maintenance_work_mem = '1MB';
CREATE INDEX items_txt ON items (txt);
CREATE INDEX items_vc_num ON items (vc, num DESC);
CREATE INDEX items_jb ON items USING gin (jb);
CREATE INDEX items_u ON items USING hash (u);
CREATE INDEX orders_cid ON orders (cid, placed);
ANALYZE items;
SET enable_seqscan = off;
SELECT id, txt FROM items WHERE txt > 'ffff' ORDER BY txt LIMIT 5;
SELECT count(*) FROM items WHERE jb @> '{"nested": {"odd": true}, "grp": 7}';
SELECT id FROM items WHERE u = md5('u' || 4242)::uuid;
SELECT vc, num FROM items WHERE vc = 'v500' ORDER BY num DESC LIMIT 3;
RESET enable_seqscan;
REINDEX TABLE orders;

-- ---------------------------------------------------------------- parallel query and JIT (llvmjit.so, C++)
SET max_parallel_workers_per_gather = 2;
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SELECT flag, count(*), sum(num), max(txt) FROM items GROUP BY flag ORDER BY flag;
SELECT count(*), sum(o.price) FROM orders o JOIN items i ON i.id = o.item WHERE i.flag;
RESET max_parallel_workers_per_gather;
RESET parallel_setup_cost;
RESET parallel_tuple_cost;
RESET min_parallel_table_scan_size;
SET jit = on;
SET jit_above_cost = 0;
SET jit_inline_above_cost = 0;
SET jit_optimize_above_cost = 0;
SELECT sum(big % 7 * 3 + id), count(*) FILTER (WHERE num > 1000 AND flag) FROM items;
RESET jit_above_cost;
RESET jit_inline_above_cost;
RESET jit_optimize_above_cost;

-- ---------------------------------------------------------------- maintenance
VACUUM items;
VACUUM (ANALYZE) orders;
VACUUM FULL docs;
CLUSTER customers USING customers_pkey;
SELECT id, length(body), md5(body) FROM docs ORDER BY id LIMIT 3;
SELECT count(*), md5(string_agg(cid || name || region, ',' ORDER BY cid)) FROM customers;
SELECT count(*), sum(num), md5(string_agg(id::text || txt || coalesce(jb::text, ''), ',' ORDER BY id)) FROM items;
DROP TABLE events;
DROP TABLE docs;
