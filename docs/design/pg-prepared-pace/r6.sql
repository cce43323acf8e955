\set k random(1, 20000)
\set tok random(1, 1000000000)
\startpipeline
SELECT state, result FROM spike WHERE key = :k;
INSERT INTO spike (key, type, fingerprint, result, checkpoint, state, retryable, token, attempts, holder_pid, holder_start, holder_scope, holder_request, holder_took_over, created, updated, lease_deadline, expires, version) SELECT :k, '', '', '', '', 0, false, :tok, 1, 0, 0, 0, 0, false, now(), now(), now(), now(), 1 WHERE NOT EXISTS (SELECT 1 FROM spike WHERE key = :k) ON CONFLICT (key) DO NOTHING;
\endpipeline
