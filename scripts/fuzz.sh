#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang in build-fuzz/ and runs each for a while.
#
#   scripts/fuzz.sh [--seconds N] [--target NAME]
#
#   --seconds N    how long each target runs (default 60)
#   --target NAME  run only this target: record_decoder, frame_decoder, record_counts, import_line or cli
#                  (default: all)
#
# Each target starts from a temporary copy of its seed corpus (fuzz/corpus/<target>/), so a run
# never grows the repository's corpus. A crash, leak, timeout (10 s for one input) or
# out-of-memory (2 GB) input is saved in fuzz/regressions/<target>/, and the script exits
# non-zero once every chosen target has run. Installs clang and libclang-rt-14-dev (with the
# packages of scripts/install-deps.sh) when they are missing. IDEM_JOBS sets build parallelism
# (default 2). See fuzz/README.md.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
jobs="${IDEM_JOBS:-2}"
seconds=60
targets=(record_decoder frame_decoder record_counts import_line cli)

usage() {
  echo "usage: scripts/fuzz.sh [--seconds N] [--target record_decoder|frame_decoder|record_counts|import_line|cli]" >&2
  exit 2
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds)
      [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || usage
      seconds=$2
      shift 2
      ;;
    --target)
      [[ $# -ge 2 && " ${targets[*]} " == *" $2 "* ]] || usage
      targets=("$2")
      shift 2
      ;;
    -h | --help) usage ;;
    *) usage ;;
  esac
done

# ---- Packages: the project's, then clang with its sanitizer and libFuzzer runtimes -------------
scripts/install-deps.sh
fuzz_packages=(clang libclang-rt-14-dev)
missing=()
for package in "${fuzz_packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$package")
  fi
done
if [[ ${#missing[@]} -gt 0 ]]; then
  if [[ $(id -u) -eq 0 ]]; then
    as_root=()
  elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
  else
    echo "fuzz.sh: missing packages: ${missing[*]}; not root and sudo is not available" >&2
    exit 1
  fi
  echo "fuzz.sh: installing ${missing[*]}"
  "${as_root[@]}" apt-get update
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}"
fi

# ---- Build: the whole library instrumented for coverage (fuzzer-no-link) and sanitized --------
# -fno-sanitize-recover makes undefined behaviour in the library stop the run like a crash.
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS=-fno-sanitize-recover=all \
  -DIDEM_SANITIZE=fuzzer-no-link,address,undefined -DIDEM_BUILD_FUZZERS=ON \
  -DIDEM_BUILD_TESTS=OFF -DIDEM_BUILD_EXAMPLES=OFF -DIDEM_INSTALL=OFF
cmake --build build-fuzz -j "$jobs" --target "${targets[@]/#/fuzz_}"

# ---- Run --------------------------------------------------------------------------------------
work=$(mktemp -d "${TMPDIR:-/tmp}/idem-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"

failed=()
for target in "${targets[@]}"; do
  corpus="$work/$target"
  cp -r "fuzz/corpus/$target" "$corpus"
  mkdir -p "fuzz/regressions/$target"
  dictionary=()
  if [[ -f "fuzz/$target.dict" ]]; then
    dictionary=("-dict=$root/fuzz/$target.dict")
  fi
  echo "fuzz.sh: fuzz_$target for $seconds s"
  # libFuzzer's log goes to a file; its last lines (or the whole report on a crash) are shown.
  log="$work/$target.log"
  if (cd "$work" && "$root/build-fuzz/fuzz/fuzz_$target" -max_total_time="$seconds" -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 "${dictionary[@]}" \
        -artifact_prefix="$root/fuzz/regressions/$target/" "$corpus") >"$log" 2>&1; then
    grep -E '^#[0-9]+[[:space:]]+DONE' "$log" || tail -n 3 "$log"
  else
    tail -n 60 "$log"
    echo "fuzz.sh: fuzz_$target FAILED; the input is in fuzz/regressions/$target/" >&2
    failed+=("$target")
  fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz.sh: failed: ${failed[*]} (add a fix, keep the input: see fuzz/README.md)" >&2
  exit 1
fi
echo "fuzz.sh: ${targets[*]}: no crash in $seconds s each"
