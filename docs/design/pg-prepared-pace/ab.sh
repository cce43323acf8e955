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
data=$(mktemp -d /tmp/ab-data.XXXXXX)
cleanup_more() { rm -rf "$data"; }
. "$(dirname "${BASH_SOURCE[0]}")/../throwaway-pg.sh"
start_throwaway_pg
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
