\set k random(1, 20000)
\set tok random(1, 1000000000)
SELECT state, result, fingerprint, type, token, expires, version, CASE WHEN state = 0 THEN holder_pid END, CASE WHEN state = 0 THEN lease_deadline END FROM spike WHERE key = :k;
