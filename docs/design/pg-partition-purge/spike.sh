#!/usr/bin/env bash
# Spike for issue 42 item 2 (docs/design/pg-partition-purge-plan.md): on one throwaway PostgreSQL,
# a table shaped as idem's records table, plain and partitioned by expiry, N rows of which 1%
# expired an hour ago; times a sequential scan, the plain table's DELETE, idem-like batched
# deletes, and dropping the due partition; then the cost of a read by key and of a claim with
# the partitions unpruned (pgbench, prepared). Run as root:
#   ROWS=1000000 PARTS=32 docs/design/pg-partition-purge/spike.sh
set -euo pipefail
rows=${ROWS:-1000000}; parts=${PARTS:-32}; secs=${SECS:-5}
. "$(dirname "${BASH_SOURCE[0]}")/../throwaway-pg.sh"
start_throwaway_pg 50
q() { psql -X -q -v ON_ERROR_STOP=1 "$pg" "$@"; }
timed() { local label=$1; shift; local t0; t0=$(date +%s.%N); q -c "$@" >/dev/null; echo "$label $(echo "$(date +%s.%N) - $t0" | bc) s"; }

columns="key bytea NOT NULL, type bytea NOT NULL, fingerprint bytea NOT NULL, result bytea NOT NULL,
  checkpoint bytea NOT NULL, state smallint NOT NULL, retryable boolean NOT NULL, token bigint NOT NULL,
  attempts bigint NOT NULL, holder_pid bigint NOT NULL, holder_start bigint NOT NULL,
  holder_scope bigint NOT NULL, holder_request bigint NOT NULL, holder_took_over boolean NOT NULL,
  created timestamptz NOT NULL, updated timestamptz NOT NULL, lease_deadline timestamptz NOT NULL,
  expires timestamptz NOT NULL, version bigint NOT NULL"
# Rows as the benchmark's pg-purge loads them: UUIDv7-shaped ordered keys, its result payload,
# every 100th row expired an hour ago, the others in 30 days.
fill="SELECT convert_to('0190a5c4-0000-7000-8000-' || lpad(to_hex(g), 12, '0'), 'UTF8'), 'payment',
  '\\x00112233445566778899aabbccddeeff', convert_to('{\"status\":\"captured\",\"amount\":1999,\"currency\":\"EUR\",\"charge\":\"ch_3PqL0a2eZvKYlo2C1x7Hn\"}', 'UTF8'),
  '', 1, false, g, 1, 0, 0, 0, 0, false, now(), now(), now(),
  CASE WHEN g % 100 = 0 THEN now() - interval '1 hour' ELSE now() + interval '30 days' END, 2
  FROM generate_series(1, $rows) g"

q -c "CREATE TABLE plain ($columns, PRIMARY KEY (key))" -c "CREATE INDEX ON plain (expires)"
q -c "CREATE TABLE copy (LIKE plain INCLUDING ALL)"
# Partitioned by expiry: a unique index must hold the partition key, so the key alone is unique
# only within a partition.
q -c "CREATE TABLE parted ($columns, PRIMARY KEY (key, expires)) PARTITION BY RANGE (expires)"
q -c "CREATE INDEX ON parted (key)"
# The due partition (the hour that ended an hour ago and before), then PARTS-1 others up to 31
# days ahead.
q -c "CREATE TABLE parted_due PARTITION OF parted FOR VALUES FROM (MINVALUE) TO (now() - interval '30 minutes')"
span=$(( 31 * 24 * 3600 / (parts - 1) ))
for i in $(seq 1 $((parts - 1))); do
  from="now() - interval '30 minutes' + interval '$(( (i - 1) * span )) seconds'"
  to=$([ "$i" -eq $((parts - 1)) ] && echo MAXVALUE || echo "now() - interval '30 minutes' + interval '$(( i * span )) seconds'")
  q -c "CREATE TABLE parted_$i PARTITION OF parted FOR VALUES FROM ($from) TO ($to)"
done
timed "load plain" "INSERT INTO plain $fill"
timed "load parted" "INSERT INTO parted $fill"
q -c "INSERT INTO copy SELECT * FROM plain" -c "VACUUM ANALYZE plain" -c "VACUUM ANALYZE copy" -c "VACUUM ANALYZE parted" -c "CHECKPOINT"
q -At -c "SELECT 'plain MiB ' || pg_total_relation_size('plain') / 1048576"
timed "scan plain (sequential count)" "SET enable_indexonlyscan = off; SET enable_indexscan = off; SET enable_bitmapscan = off; SELECT count(*) FROM plain"
timed "delete plain (one DELETE by the expiry index)" "DELETE FROM copy WHERE expires <= clock_timestamp()"
# idem's purge today: batches of 1000 rows by the expiry index, each its own transaction.
t0=$(date +%s.%N)
while [ "$(q -At -c "WITH due AS (SELECT key FROM plain WHERE expires <= clock_timestamp() LIMIT 1000 FOR UPDATE SKIP LOCKED) DELETE FROM plain p USING due WHERE p.key = due.key RETURNING 1" | wc -l)" -gt 0 ]; do :; done
echo "purge plain (batches of 1000) $(echo "$(date +%s.%N) - $t0" | bc) s"
q -At -c "SELECT 'due rows in parted_due ' || count(*) FROM parted_due"
timed "drop due partition (DETACH CONCURRENTLY, DROP)" "ALTER TABLE parted DETACH PARTITION parted_due CONCURRENTLY"
timed "  drop" "DROP TABLE parted_due"

# A read by key and a claim, prepared, at 4 clients: the plain table against the partitioned one,
# where nothing prunes (the key says nothing of the expiry).
cat > "$pg_dir/read_plain.sql" <<SQL
\set g random(1, $rows)
SELECT state, result FROM plain WHERE key = convert_to('0190a5c4-0000-7000-8000-' || lpad(to_hex(:g::bigint), 12, '0'), 'UTF8');
SQL
sed 's/FROM plain/FROM parted/' "$pg_dir/read_plain.sql" > "$pg_dir/read_parted.sql"
cat > "$pg_dir/claim_plain.sql" <<SQL
\set g random(1, 1000000000)
INSERT INTO plain VALUES (convert_to('new-' || :g || '-' || :client_id, 'UTF8'), 'payment', '', '', '', 0, false, :g, 1, 1, 1, 1, 1, false, now(), now(), now() + interval '10 seconds', now() + interval '30 days', 1) ON CONFLICT (key) DO NOTHING;
SQL
# On the partitioned table the key's uniqueness is the claim's own work: a lock on the key's
# hash for the transaction, then, in a statement of its own (whose snapshot is taken after the
# lock), a read of every partition and the insert. One pipeline: one round trip, as idem sends it.
cat > "$pg_dir/claim_parted.sql" <<SQL
\set g random(1, 1000000000)
\startpipeline
BEGIN;
SELECT pg_advisory_xact_lock(hashtextextended('new-' || :g || '-' || :client_id, 0));
INSERT INTO parted SELECT convert_to('new-' || :g || '-' || :client_id, 'UTF8'), 'payment', '', '', '', 0, false, :g, 1, 1, 1, 1, 1, false, now(), now(), now() + interval '10 seconds', now() + interval '30 days', 1 WHERE NOT EXISTS (SELECT 1 FROM parted WHERE key = convert_to('new-' || :g || '-' || :client_id, 'UTF8'));
COMMIT;
\endpipeline
SQL
for round in 1 2; do
  for script in read_plain read_parted claim_plain claim_parted; do
    tps=$(set +o pipefail; runuser -u postgres -- "$pg_bin/pgbench" -n -M prepared -c 4 -j 2 -T "$secs" -f "$pg_dir/$script.sql" "$pg" 2>"$pg_dir/pgbench.err" | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
    echo "round $round $script 4 clients: $tps tps"; [ -n "$tps" ] || tail -3 "$pg_dir/pgbench.err"
  done
done
