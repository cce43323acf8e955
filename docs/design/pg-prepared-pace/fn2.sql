CREATE OR REPLACE FUNCTION spike_begin2(k bytea, tok bigint, pid bigint, st bigint, scope bigint, req bigint, lease bigint, ret bigint, sc text)
RETURNS spike LANGUAGE plpgsql AS $$
DECLARE n timestamptz := clock_timestamp(); r spike;
BEGIN
  SELECT * INTO r FROM spike WHERE key = k;
  IF FOUND THEN RETURN r; END IF;
  PERFORM set_config('synchronous_commit', sc, true);
  INSERT INTO spike (key, type, fingerprint, result, checkpoint, state, retryable, token, attempts, holder_pid, holder_start, holder_scope, holder_request, holder_took_over, created, updated, lease_deadline, expires, version) VALUES (k, '', '', '', '', 0, false, tok, 1, pid, st, scope, req, false, n, n, n + lease * interval '1 microsecond', n + ret * interval '1 microsecond', 1) ON CONFLICT (key) DO NOTHING RETURNING * INTO r;
  RETURN r;
END $$;
