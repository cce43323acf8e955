#!/usr/bin/env bash
# The benchmark, in one command: idem against raw RocksDB, a SQLite dedup table and a Redis lock,
# side by side in one run (see bench/README.md).
#
#   scripts/bench.sh [--records N] [--seconds S] [--smoke]
#
#   --records N   records stored before the scale and purge measurements (default 10000000)
#   --seconds S   length of each measurement (default 3)
#   --smoke       tiny sizes, every workload once, a few seconds; checks that the benchmark works,
#                 exits non-zero if any workload fails, and writes no docs (what CI runs)
#
# It installs what it needs from Debian 12 (apt-get, as root or through sudo), builds idem_bench
# with optimizations in build-bench/ (-j2), starts redis-server on a free loopback port (no
# persistence) and stops it on exit, runs every workload (one process each), prints the table,
# and, unless --smoke, rewrites docs/benchmarks.md and docs/benchmarks.png from this run.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
records=10000000
seconds=3
smoke=0
command_line="scripts/bench.sh${*:+ $*}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --records) records=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --smoke) smoke=1; shift ;;
    -h|--help) sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

threads=1,4,16,64
replay_keys=20000
if [[ $smoke -eq 1 ]]; then
  records=2000
  seconds=0.05
  threads=1,4
  replay_keys=500
fi

# ---- packages -----------------------------------------------------------------------------------
packages=(build-essential cmake pkg-config librocksdb-dev libssl-dev libcli11-dev
          sqlite3 libsqlite3-dev redis-server libhiredis-dev python3)
[[ $smoke -eq 1 ]] || packages+=(gnuplot-nox)  # the plot (pngcairo works without X)
missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$package")
  fi
done
if [[ ${#missing[@]} -gt 0 ]]; then
  as_root=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "bench.sh: install as root: ${missing[*]}" >&2; exit 1; }
    as_root=(sudo)
  fi
  echo "bench.sh: installing ${missing[*]}"
  "${as_root[@]}" apt-get update
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}"
fi

# ---- build --------------------------------------------------------------------------------------
build="$repo/build-bench"
cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release -DIDEM_BUILD_BENCHMARKS=ON \
  -DIDEM_BUILD_TESTS=OFF -DIDEM_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$build" -j2 --target idem_bench
bench="$build/bench/idem_bench"

# ---- Redis on a free loopback port --------------------------------------------------------------
run="$build/bench-run"
data="$build/bench-data"
rm -rf "$run" "$data"
mkdir -p "$run" "$data"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$run" \
  --logfile "$run/redis.log" &
redis_pid=$!
cleanup() {
  kill "$redis_pid" 2>/dev/null || true
  wait "$redis_pid" 2>/dev/null || true
  rm -rf "$data"
}
trap cleanup EXIT
for _ in $(seq 100); do
  [[ "$(redis-cli -p "$port" ping 2>/dev/null)" == PONG ]] && break
  sleep 0.05
done
[[ "$(redis-cli -p "$port" ping 2>/dev/null)" == PONG ]] || {
  echo "bench.sh: redis-server did not start on port $port (see $run/redis.log)" >&2; exit 1; }

# ---- the workloads ------------------------------------------------------------------------------
results="$run/results.tsv"
common=(--dir "$data" --results "$results" --redis-port "$port" --seconds "$seconds"
        --threads "$threads")
failed=()
workload() {
  echo "== $*"
  if ! "$bench" "${common[@]}" --workload "$@"; then failed+=("$1"); fi
}
workload fsync
workload lifecycle
workload replay --systems idem-buffered,rocksdb,sqlite-off,redis --replay-keys "$replay_keys"
workload contention --systems idem-buffered,rocksdb,sqlite-off,redis
workload client
workload scale --records "$records"

# ---- report -------------------------------------------------------------------------------------
if [[ $smoke -eq 1 ]]; then
  python3 "$repo/bench/report.py" --results "$results"
elif [[ ${#failed[@]} -eq 0 ]]; then
  note=""
  if [[ $records -ne 10000000 ]]; then
    grouped=$(sed ':a;s/\B[0-9]\{3\}\>/,&/;ta' <<<"$records")
    note="Scale and purge ran with $grouped records instead of the default 10,000,000 (a shorter run on a shared machine)."
  fi
  python3 "$repo/bench/report.py" --results "$results" --markdown "$repo/docs/benchmarks.md" \
    --plot "$repo/docs/benchmarks.png" --command "$command_line" --note "$note"
fi
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "bench.sh: failed workloads: ${failed[*]} (docs not written)" >&2
  exit 1
fi
