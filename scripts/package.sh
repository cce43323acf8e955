#!/usr/bin/env bash
# Builds idem's Debian packages and checks them:
#   scripts/package.sh          build them (preset package, in build-deb/), check them with
#                               lintian; the .debs land in build-deb/packages/
#   scripts/package.sh --test   then install them in a clean Debian 12 chroot and use them
#                               there (tests/package/deb_install_test.sh; needs root)
# Packages: libidem<soversion>, libidem-dev, idem, and -dbgsym packages of the debug
# information (cmake/IdemDebianPackage.cmake says what goes where). Installs what it needs first
# (scripts/install-deps.sh). Install the result with
#   apt-get install ./build-deb/packages/*.deb
# (apt fetches their dependencies). docs/operations.md, "Debian packages".
set -euo pipefail

usage() {
  echo "usage: scripts/package.sh [--test]" >&2
  exit 2
}
test_install=0
case "${1:-}" in
  "") ;;
  --test) test_install=1 ;;
  *) usage ;;
esac
[[ $# -le 1 ]] || usage

cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/install-deps.sh
jobs="${IDEM_JOBS:-2}"
if command -v ccache >/dev/null; then  # as scripts/test.sh: the shared build's objects are reused
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
fi

cmake --preset package >/dev/null
cmake --build --preset package -j "$jobs"
rm -rf build-deb/packages
(cd build-deb && cpack -G DEB -B "$PWD/packages" >/dev/null)
rm -rf build-deb/packages/_CPack_Packages
shopt -s nullglob
debs=(build-deb/packages/*.deb)
ddebs=(build-deb/packages/*.ddeb)
if [[ ${#debs[@]} -ne 3 ]]; then
  echo "package.sh: expected 3 packages in build-deb/packages, found ${#debs[@]}: ${debs[*]}" >&2
  exit 1
fi
for deb in "${debs[@]}" "${ddebs[@]}"; do
  printf '%-60s %8s KiB\n' "$deb" $(( $(stat -c %s "$deb") / 1024 ))
done

# lintian, run as Debian's archive runs it: errors and warnings fail; each tag left is named,
# with why, in the packages' overrides (written by cmake/IdemDebianPackage.cmake) and
# docs/operations.md.
lintian --fail-on error,warning --display-info --tag-display-limit 0 "${debs[@]}"
echo "package.sh: lintian passed (no errors or warnings)"

if [[ $test_install -eq 1 ]]; then
  tests/package/deb_install_test.sh build-deb/packages
fi
