#!/usr/bin/env bash
# The soak: processes racing Store::Execute on one store while being killed with SIGKILL at random
# moments (the store's owner too), for a chosen time. Not part of CI. See docs/reliability.md.
#
#   scripts/soak.sh [--minutes M] [--workers N] [--keys K] [--dir DIR] [idem_soak options...]
#
#   --minutes M   how long to run rounds (default 3)
#   --workers N   worker processes per round (default 4)
#   --keys K      new keys per round; a quarter as many earlier keys are reused (default 500)
#   --dir DIR     where the store and the logs go (default: a fresh directory under $TMPDIR or
#                 /tmp, removed after a clean run); must not hold a store already
#   other options are passed to idem_soak: --max-kills N (default 4), --lease-ms MS (default
#   1500), --no-dead-holders (killed attempts are taken over only when their lease runs out),
#   --live-checks PERCENT (rounds that also read every acknowledged result through a read-only
#   handle right after a kill, while the workers run; default 33), --seed S, --keep (keep every
#   round's logs), --sabotage (workers make up about one answer in a hundred and log an
#   unguarded run: checks that the checks catch it; the run must exit 1)
#
# It builds idem_soak (RelWithDebInfo, -j2) in build-soak/ and runs it. After every round it
# checks that each acknowledged result is stored and each key ran at most once more than the
# killed attempts that may have had it in flight; it prints a line a round and the totals, and
# exits 1 if anything was violated (keeping that round's logs in the directory).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${IDEM_SOAK_BUILD_DIR:-$repo/build-soak}
args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
    --keep|--no-dead-holders|--sabotage) args+=("$1"); shift ;;
    --*) [[ $# -ge 2 ]] || { echo "soak.sh: $1 needs a value" >&2; exit 2; }
         args+=("$1" "$2"); shift 2 ;;
    *) echo "soak.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

echo "soak.sh: building idem_soak in $build (RelWithDebInfo, -j2)" >&2
cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIDEM_BUILD_EXAMPLES=OFF \
  -DIDEM_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j2 --target idem_soak >/dev/null
exec "$build/tools/soak/idem_soak" "${args[@]}"
