#!/usr/bin/env bash
# Interleaved A/B of two idem_bench binaries (each tree's own, built in Release) on one throwaway
# PostgreSQL, PostgreSQL workloads only (docs/design/pg-prepared-pace-plan.md, sections 6 and 7).
# Run as root (the server runs as `postgres`).
#   A=/path/to/old/idem_bench B=/path/to/new/idem_bench [THREADS=1,4,16,64] [SECONDS_PER=3] \
#   [WORKLOADS=replay|life] docs/design/pg-prepared-pace/ab.sh OUTDIR A B B A
# then: ANCHOR_LIFE=pg-sql-prepared ANCHOR_REPLAY=pg-sql-read-first-prepared \
#   docs/design/pg-prepared-pace/ab_summary.py OUTDIR
set -euo pipefail
declare -A bin=([A]=${A:?the old side\'s idem_bench} [B]=${B:?the new side\'s idem_bench})
out=$1; shift; mkdir -p "$out"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
pg_dir=$(mktemp -d /tmp/ab-pg.XXXXXX); chown postgres: "$pg_dir"; chmod 700 "$pg_dir"
data=$(mktemp -d /tmp/ab-data.XXXXXX)
cleanup() { runuser -u postgres -- "$pg_bin/pg_ctl" stop --pgdata="$pg_dir/data" --mode=fast --silent || true; rm -rf "$pg_dir" "$data"; }
trap cleanup EXIT
runuser -u postgres -- "$pg_bin/initdb" --pgdata="$pg_dir/data" --username=postgres --auth=trust \
  --encoding=UTF8 --locale=C --no-instructions >/dev/null
runuser -u postgres -- mkdir "$pg_dir/socket"
pg_port=$(free_port)
runuser -u postgres -- "$pg_bin/pg_ctl" start --pgdata="$pg_dir/data" --log="$pg_dir/server.log" --wait --silent \
  -o "-c listen_addresses=127.0.0.1 -c port=$pg_port -c unix_socket_directories=$pg_dir/socket -c fsync=on -c max_connections=200"
pg="postgresql://postgres@127.0.0.1:$pg_port/postgres"
n=0
for side in "$@"; do
  n=$((n + 1))
  res="$out/$n-$side.tsv"; rm -f "$res"
  common=(--dir "$data" --results "$res" --seconds "${SECONDS_PER:-3}" --rounds 1 --threads "${THREADS:-1,4,16,64}" --postgres "$pg")
  echo "=== run $n side $side $(date +%T)"
  b=${bin[$side]}
  [[ "${WORKLOADS:-}" == replay ]] || "$b" "${common[@]}" --workload lifecycle --systems idem-pg,pg-sql-prepared >/dev/null
  [[ "${WORKLOADS:-}" == life ]] || "$b" "${common[@]}" --workload replay --systems idem-pg,pg-sql-read-first-prepared,pg-sql-prepared --replay-keys 20000 >/dev/null
  [[ "${WORKLOADS:-}" == replay ]] || "$b" "${common[@]}" --workload effects --systems idem-pg,pg-sql-prepared >/dev/null
done
echo "=== done $(date +%T)"
