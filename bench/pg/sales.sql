-- The GROUP BY workload's table (design.md): 5,000 rows of sales over five regions.
CREATE TABLE sales (id INT, region TEXT, product TEXT, quantity INT, amount NUMERIC(10,2));
INSERT INTO sales
SELECT i,
       (ARRAY['north', 'south', 'east', 'west', 'central'])[1 + i % 5],
       'product-' || lpad((1 + (i * 7) % 50)::text, 2, '0'),
       1 + (i * 13) % 20,
       ((i * 7919) % 100000) / 100.0
FROM generate_series(1, 5000) AS i;
VACUUM ANALYZE sales;
