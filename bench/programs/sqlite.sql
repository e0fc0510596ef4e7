-- bench/programs/sqlite.sql: sqlite in-memory inserts, indexes and joins for bench/programs.sh,
-- run as `sqlite3 :memory: '.read FILE'` after the script puts the row count in place of @ROWS@.
-- Values come from arithmetic on the row number (random() is seeded from the system): the output
-- must not depend on the allocator.
PRAGMA cache_size = -1000000;
CREATE TABLE item(id INTEGER PRIMARY KEY, grp INT, name TEXT, price REAL, note TEXT);
CREATE TABLE grp(id INTEGER PRIMARY KEY, label TEXT, weight INT);
CREATE TABLE sale(id INTEGER PRIMARY KEY, item INT, qty INT, day INT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000)
INSERT INTO grp SELECT x, 'group-' || x, x % 17 FROM c;
BEGIN;
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < @ROWS@)
INSERT INTO item SELECT x, (x * 7919) % 1000 + 1, printf('item-%08x', (x * 2654435761) % 4294967296),
  ((x * 31) % 10007) / 100.0, substr('lorem ipsum dolor sit amet consectetur adipiscing', 1 + x % 20, 10 + x % 30) FROM c;
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 2 * @ROWS@)
INSERT INTO sale SELECT x, (x * 104729) % @ROWS@ + 1, 1 + x % 9, x % 365 FROM c;
COMMIT;
CREATE INDEX item_name ON item(name);
CREATE INDEX item_grp ON item(grp, price);
CREATE INDEX sale_item ON sale(item, day);
SELECT g.label, count(*), round(sum(s.qty * i.price), 2)
  FROM sale s JOIN item i ON i.id = s.item JOIN grp g ON g.id = i.grp
  GROUP BY g.label ORDER BY 3 DESC LIMIT 3;
SELECT count(*) FROM item a JOIN item b ON b.name = a.name AND b.id <> a.id;
SELECT i.grp, count(DISTINCT s.day) FROM item i JOIN sale s ON s.item = i.id
  WHERE i.price < 20 GROUP BY i.grp ORDER BY 2 DESC, 1 LIMIT 3;
UPDATE item SET note = note || name, name = name || '-x' WHERE grp % 3 = 0;
DELETE FROM sale WHERE day % 5 = 0;
SELECT count(*), sum(length(note)) FROM item WHERE name LIKE '%-x';
SELECT day, count(*) FROM sale GROUP BY day ORDER BY 2 DESC, 1 LIMIT 2;
