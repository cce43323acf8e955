#!/usr/bin/env bash
# The benchmark, in one command: idem against raw RocksDB, a SQLite dedup table and a Redis lock,
# and idem on PostgreSQL against hand-written SQL, side by side in one run (see bench/README.md).
#
#   scripts/bench.sh [--records N] [--seconds S] [--rounds R] [--smoke] [--postgres-only]
#
#   --records N       records stored before the scale and purge measurements (default 10000000)
#   --seconds S       length of each measurement (default 3)
#   --rounds R        rounds of each lifecycle, effects, replay and client figure, interleaved
#                     across the systems; the page shows the round of median throughput (default 3)
#   --smoke           tiny sizes, every workload once, a few seconds; checks that the benchmark
#                     works, exits non-zero if any workload fails, and writes no docs (what CI runs)
#   --postgres-only   only the PostgreSQL workloads (and fsync): rewrites only the PostgreSQL
#                     section of docs/benchmarks.md, leaving the rest of the page as it is
#
# It installs what it needs from Debian 12 (apt-get, as root or through sudo), builds idem_bench
# with optimizations in build-bench/ (-j2), starts redis-server on a free loopback port (no
# persistence) and a throwaway PostgreSQL 15 (initdb in a temporary directory, fsync on, a free
# loopback port; as the `postgres` user when run as root) and stops both on exit, runs every
# workload (one process each), prints the table, and, unless --smoke, rewrites
# docs/benchmarks.md and docs/benchmarks.png from this run.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
records=10000000
seconds=3
rounds=3
smoke=0
postgres_only=0
command_line="scripts/bench.sh${*:+ $*}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --records) records=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --smoke) smoke=1; shift ;;
    --postgres-only) postgres_only=1; shift ;;
    -h|--help) sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

threads=1,4,16,64
replay_keys=20000
# The PostgreSQL purge's table: its own size, not --records (10,000,000 rows written through SQL
# would take several minutes and ~3 GB; the target is set at 1,000,000).
pg_purge_records=1000000
# The edge workloads: lifecycles per system for the bytes written, records of the 8 MiB device.
wear_lifecycles=100000
device_records=1000000
# The restore workload's store: the 1,000,000 records of issue 43's pg_restore anchor.
restore_records=1000000
if [[ $smoke -eq 1 ]]; then
  restore_records=2000
  wear_lifecycles=300
  device_records=2000
  records=2000
  seconds=0.05
  rounds=2
  threads=1,4
  replay_keys=500
  pg_purge_records=2000
fi

# ---- packages -----------------------------------------------------------------------------------
packages=(build-essential cmake pkg-config librocksdb-dev libssl-dev libcli11-dev
          sqlite3 libsqlite3-dev redis-server libhiredis-dev python3 postgresql-15 libpq-dev)
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
# Measured figures come from optimized code (Release). A smoke run checks that the benchmark builds
# and that every workload runs, not its speed: it compiles as build/ does (RelWithDebInfo,
# warnings as errors), so that with ccache (scripts/test.sh sets it up and runs this after build/)
# the library's objects are build/'s and only the benchmark's own files compile.
build_flags=(-DCMAKE_BUILD_TYPE=Release -DIDEM_WERROR=OFF)
[[ $smoke -eq 0 ]] || build_flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DIDEM_WERROR=ON)
cmake -S "$repo" -B "$build" "${build_flags[@]}" -DIDEM_BUILD_BENCHMARKS=ON \
  -DIDEM_BUILD_TESTS=OFF -DIDEM_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$build" -j2 --target idem_bench idem_minimal idem_tool
bench="$build/bench/idem_bench"

# ---- Redis and PostgreSQL on free loopback ports -------------------------------------------------
run="$build/bench-run"
data="$build/bench-data"
rm -rf "$run" "$data"
mkdir -p "$run" "$data"
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
redis_pid=""
pg_dir=""
as_pg=()
cleanup() {
  if [[ -n $redis_pid ]]; then
    kill "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
  fi
  if [[ -n $pg_dir ]]; then
    "${as_pg[@]}" "$pg_bin/pg_ctl" stop --pgdata="$pg_dir/data" --mode=fast --silent \
      >/dev/null 2>&1 || true
    rm -rf "$pg_dir"
  fi
  rm -rf "$data"
}
trap cleanup EXIT

port=$(free_port)
if [[ $postgres_only -eq 0 ]]; then
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$run" \
    --logfile "$run/redis.log" &
  redis_pid=$!
  for _ in $(seq 100); do
    [[ "$(redis-cli -p "$port" ping 2>/dev/null)" == PONG ]] && break
    sleep 0.05
  done
  [[ "$(redis-cli -p "$port" ping 2>/dev/null)" == PONG ]] || {
    echo "bench.sh: redis-server did not start on port $port (see $run/redis.log)" >&2; exit 1; }
fi

# PostgreSQL refuses to run as root: then the server runs as the `postgres` user that Debian's
# package creates (as tests/support/pg_server.cc does). Its directory is under /tmp, short enough for
# the socket's path, and only its user may enter it. max_connections is 200, not 100: the replay
# workload keeps every system's store open through its rounds, idem's pool of 64 connections
# beside the 64 of the anchor measured next. fsync stays on (the default, said explicitly):
# kSync against synchronous_commit=on compares durable commits. pg_stat_statements counts the
# statements each measurement ran (utility statements such as BEGIN, SET and COMMIT left out).
# The superuser's password is random, for this run only, and reaches idem_bench through
# PGPASSWORD, never a command line.
pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
if [[ $(id -u) -eq 0 ]]; then
  as_pg=(runuser -u postgres --)
fi
pg_dir=$(mktemp -d /tmp/idem-bench-pg.XXXXXX)
[[ ${#as_pg[@]} -eq 0 ]] || chown postgres: "$pg_dir"
chmod 700 "$pg_dir"
export PGPASSWORD
PGPASSWORD=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
printf '%s\n' "$PGPASSWORD" | "${as_pg[@]}" tee "$pg_dir/password" >/dev/null
"${as_pg[@]}" "$pg_bin/initdb" --pgdata="$pg_dir/data" --username=postgres \
  --pwfile="$pg_dir/password" --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 \
  --locale=C --no-instructions >"$run/initdb.log" 2>&1 || {
  echo "bench.sh: initdb failed (see $run/initdb.log)" >&2; exit 1; }
"${as_pg[@]}" mkdir "$pg_dir/socket"
pg_port=$(free_port)
"${as_pg[@]}" "$pg_bin/pg_ctl" start --pgdata="$pg_dir/data" --log="$pg_dir/server.log" --wait \
  --silent -o "-c listen_addresses=127.0.0.1 -c port=$pg_port \
    -c unix_socket_directories=$pg_dir/socket -c fsync=on -c max_connections=200 \
    -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track_utility=off" || {
  cp "$pg_dir/server.log" "$run/postgres.log" 2>/dev/null || true
  echo "bench.sh: PostgreSQL did not start on port $pg_port (see $run/postgres.log)" >&2; exit 1; }
pg_uri="postgresql://postgres@127.0.0.1:$pg_port/postgres"

# ---- the workloads ------------------------------------------------------------------------------
results="$run/results.tsv"
common=(--dir "$data" --results "$results" --redis-port "$port" --seconds "$seconds"
        --rounds "$rounds" --threads "$threads")
failed=()
workload() {
  echo "== $*"
  if ! "$bench" "${common[@]}" --workload "$@"; then failed+=("$1"); fi
}
workload fsync
if [[ $postgres_only -eq 0 ]]; then
  # Sizes on a device's disk, stripped as a package ships them: the smallest program using idem
  # (idem linked statically), the shared libraries it loads, and the idem command.
  stripped_size() { strip -o "$run/stripped" "$1" && stat -c %s "$run/stripped" && rm -f "$run/stripped"; }
  minimal="$build/bench/idem_minimal"
  "$minimal" "$data/minimal" >/dev/null || failed+=("minimal")
  shared_libraries=$(ldd "$minimal" | awk '$3 ~ /^\// {print $3}' | xargs -r stat -L -c %s |
                     awk '{s += $1} END {print s + 0}')
  printf 'sizes\tidem\tfigure\t%s\t%s\tbytes\n' \
    minimal_program "$(stripped_size "$minimal")" \
    minimal_program_shared_libraries "$shared_libraries" \
    idem_command "$(stripped_size "$build/tools/idem")" >>"$results"
  workload wear --systems idem-sync,idem-periodic,idem-buffered,rocksdb-sync,rocksdb,sqlite-full,sqlite-off \
    --wear-lifecycles "$wear_lifecycles"
  workload device --records "$device_records" --memory-budget $((8 << 20))
  workload lifecycle
  workload effects --systems idem-buffered,idem-sync,rocksdb,rocksdb-sync
  workload replay --systems idem-buffered,rocksdb,sqlite-off,redis --replay-keys "$replay_keys"
  workload contention --systems idem-buffered,rocksdb,sqlite-off,redis
  workload client
  workload scale --records "$records"
  # idem export and import --create beside pg_dump and pg_restore of the same rows.
  workload restore --restore-records "$restore_records" --postgres "$pg_uri" --pg-bin "$pg_bin"
fi
# The same server and synchronous_commit=on for both sides of each ratio; a table per subject.
workload lifecycle --systems idem-pg,pg-sql,pg-sql-prepared --postgres "$pg_uri"
workload effects --systems idem-pg,pg-sql,pg-sql-prepared --postgres "$pg_uri"
workload replay --systems idem-pg,pg-sql-read-first,pg-sql-read-first-prepared,pg-sql \
  --replay-keys "$replay_keys" --postgres "$pg_uri"
workload pg-purge --pg-purge-records "$pg_purge_records" --postgres "$pg_uri"

# ---- report -------------------------------------------------------------------------------------
if [[ $smoke -eq 1 ]]; then
  python3 "$repo/bench/report.py" --results "$results" --expect-rounds "$rounds" ||
    failed+=("report")
elif [[ ${#failed[@]} -eq 0 && $postgres_only -eq 1 ]]; then
  python3 "$repo/bench/report.py" --results "$results" \
    --postgres-section "$repo/docs/benchmarks.md" --command "$command_line"
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
