\set k random(1, 20000)
\set tok random(1, 1000000000)
SELECT row(key, type, fingerprint, result, checkpoint, state, retryable, token, attempts, holder_pid, holder_start, holder_scope, holder_request, holder_took_over, created, updated, lease_deadline, expires, version), COALESCE(NULL::timestamptz, clock_timestamp()) FROM spike WHERE key = :k;
