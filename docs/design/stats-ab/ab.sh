#!/usr/bin/env bash
# Interleaved A/B of two idem_bench binaries (each tree's own, built in Release) on the RocksDB
# write path: lifecycles kBuffered and kSync, and replays, each beside its raw RocksDB anchor
# (docs/design/stats-plan.md: the owner's kept counts cost one short critical section a write).
#   A=/path/to/old/idem_bench B=/path/to/new/idem_bench [THREADS=1,4,16,64] [SECONDS_PER=2] \
#   docs/design/stats-ab/ab.sh OUTDIR A B B A
# then: docs/design/pg-prepared-pace/ab_summary.py OUTDIR
set -euo pipefail
declare -A bin=([A]=${A:?the old side\'s idem_bench} [B]=${B:?the new side\'s idem_bench})
out=$1; shift; mkdir -p "$out"
data=$(mktemp -d /tmp/ab-data.XXXXXX)
trap 'rm -rf "$data"' EXIT
n=0
for side in "$@"; do
  n=$((n + 1))
  res="$out/$n-$side.tsv"; rm -f "$res"
  common=(--dir "$data" --results "$res" --seconds "${SECONDS_PER:-2}" --rounds 1 --threads "${THREADS:-1,4,16,64}")
  echo "=== run $n side $side $(date +%T)"
  b=${bin[$side]}
  "$b" "${common[@]}" --workload lifecycle --systems idem-buffered,rocksdb,idem-sync,rocksdb-sync >/dev/null
  "$b" "${common[@]}" --workload replay --systems idem-buffered,rocksdb >/dev/null
done
echo "=== done $(date +%T)"
