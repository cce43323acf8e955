#!/usr/bin/env bash
# The spike of docs/design/pg-prepared-pace-plan.md, section 2: pgbench against a throwaway
# PostgreSQL 15 (run as root: the server runs as `postgres`). Prints one line per figure.
#   [CLIENTS="1 4 16 64"] docs/design/pg-prepared-pace/run.sh [SECONDS] [SCRIPT...]
# (default: 6 s, 1 and 4 clients, every script; two rounds, interleaved)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
seconds=${1:-6}; shift || true
scripts=("$@"); [[ ${#scripts[@]} -gt 0 ]] || scripts=(r0 r2b r5 r7 r8 r9 r2 r2-no-time r2-no-set-config r2-no-standby-wait r6 r1 r3 r4
                                           f0 f-insert-alone f1 f3 f4)
. "$here/../throwaway-pg.sh"
start_throwaway_pg
psql -q -h 127.0.0.1 -p "$port" -U postgres -f "$here/schema.sql" 2>&1 | grep -v NOTICE || true
psql -q -h 127.0.0.1 -p "$port" -U postgres -f "$here/fn2.sql"
for round in 1 2; do
  for clients in ${CLIENTS:-1 4}; do
    for script in "${scripts[@]}"; do
      tps=$("$pg_bin/pgbench" -n -M prepared -D sc=off -h 127.0.0.1 -p "$port" -U postgres \
        -f "$here/$script.sql" -c "$clients" -j $((clients > 1 ? 2 : 1)) -T "$seconds" postgres 2>&1 |
        awk '/^tps/ {printf "%.0f", $3}')
      echo "round $round clients $clients $script ${tps:-failed}"
    done
  done
done
