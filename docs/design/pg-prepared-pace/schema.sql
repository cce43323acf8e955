-- The statements run with synchronous_commit off (idem's set it so themselves, through set_config):
-- the commit's flush would hide what each statement costs the server.
ALTER DATABASE postgres SET synchronous_commit = off;
DROP TABLE IF EXISTS spike CASCADE;
CREATE TABLE spike (key bytea PRIMARY KEY, type bytea NOT NULL, fingerprint bytea NOT NULL, result bytea NOT NULL, checkpoint bytea NOT NULL, state smallint NOT NULL, retryable boolean NOT NULL, token bigint NOT NULL, attempts bigint NOT NULL, holder_pid bigint NOT NULL, holder_start bigint NOT NULL, holder_scope bigint NOT NULL, holder_request bigint NOT NULL, holder_took_over boolean NOT NULL, created timestamptz NOT NULL, updated timestamptz NOT NULL, lease_deadline timestamptz NOT NULL, expires timestamptz NOT NULL, version bigint NOT NULL);
CREATE INDEX spike_expires ON spike (expires);
INSERT INTO spike SELECT convert_to(i::text, 'UTF8'), '', '', convert_to(repeat('r', 90), 'UTF8'), '', 1, false, i, 1, 0, 0, 0, 0, false, now(), now(), now(), now() + interval '30 days', 2 FROM generate_series(1, 20000) i;
CREATE OR REPLACE FUNCTION spike_begin(k bytea, tok bigint, pid bigint, st bigint, scope bigint, req bigint, lease bigint, ret bigint, sc text)
RETURNS SETOF spike LANGUAGE plpgsql AS $$
DECLARE n timestamptz := clock_timestamp();
BEGIN
  PERFORM set_config('synchronous_commit', sc, true);
  RETURN QUERY SELECT * FROM spike WHERE key = k;
  IF FOUND THEN RETURN; END IF;
  RETURN QUERY INSERT INTO spike (key, type, fingerprint, result, checkpoint, state, retryable, token, attempts, holder_pid, holder_start, holder_scope, holder_request, holder_took_over, created, updated, lease_deadline, expires, version) VALUES (k, '', '', '', '', 0, false, tok, 1, pid, st, scope, req, false, n, n, n + lease * interval '1 microsecond', n + ret * interval '1 microsecond', 1) ON CONFLICT (key) DO NOTHING RETURNING *;
END $$;
VACUUM ANALYZE spike;
