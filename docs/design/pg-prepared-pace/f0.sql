\set k random(100000, 9000000000000)
\set tok random(1, 1000000000)
INSERT INTO spike (key, type, fingerprint, result, checkpoint, state, retryable, token, attempts, holder_pid, holder_start, holder_scope, holder_request, holder_took_over, created, updated, lease_deadline, expires, version) VALUES (:k, '', '', '', '', 0, false, :tok, 1, 0, 0, 0, 0, false, now(), now(), now(), now(), 1) ON CONFLICT (key) DO NOTHING;
