\set k random(1, 20000)
\set tok random(1, 1000000000)
SELECT state, result FROM spike WHERE key = :k;
