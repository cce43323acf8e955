#!/usr/bin/env bash
# Builds idem for another architecture with Debian's cross compiler and runs its tests there,
# under qemu user mode (docs/cross.md):
#   scripts/cross.sh arm64            the library, the idem command and every test (but PostgreSQL's)
#   scripts/cross.sh armhf            the same for 32-bit ARM (armv7, hard float)
#   scripts/cross.sh arm64 --quick    the library, the idem command and the tests labelled core
# Options: --quick as above; --jobs N (default IDEM_JOBS or 2); --postgres: also the PostgreSQL
# tests (the ARM client against the host's own x86-64 server binaries; see docs/cross.md).
#
# It needs root (or sudo) for what it sets up once:
#   - host packages, installed with apt-get when missing: crossbuild-essential-<arch>,
#     qemu-user-static, binfmt-support, mmdebstrap, ninja-build, ccache, cmake;
#   - binfmt_misc entries for qemu (update-binfmts), so that the programs the tests start
#     themselves (the idem command, worker processes) run under qemu too;
#   - the sysroot, the target's Debian packages unpacked by mmdebstrap into
#     ${IDEM_CROSS_CACHE:-/var/cache/idem-cross}/<arch>, never into the host (multiarch cannot
#     hold librocksdb-dev for two architectures). Made again when its package list changes.
# The build is in build-cross-<arch>/ (Ninja, ccache). The tests run with TMPDIR on a tmpfs
# (/dev/shm): under qemu-arm, a 32-bit readdir cannot return ext4's 64-bit directory cookies.
# IDEM_CROSS_MIRROR names the Debian mirror (default http://deb.debian.org/debian).
set -euo pipefail

usage() {
  sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit 2
}

arch=""
quick=0
postgres=0
jobs="${IDEM_JOBS:-2}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    arm64 | armhf) arch="$1" ;;
    --quick) quick=1 ;;
    --postgres) postgres=1 ;;
    --jobs) jobs="$2"; shift ;;
    -h | --help) usage ;;
    *) echo "cross.sh: unknown argument '$1'" >&2; usage ;;
  esac
  shift
done
[[ -n "$arch" ]] || usage

case "$arch" in
  arm64) triplet=aarch64-linux-gnu; qemu=qemu-aarch64; toolchain=aarch64-linux-gnu.cmake ;;
  armhf) triplet=arm-linux-gnueabihf; qemu=qemu-arm; toolchain=arm-linux-gnueabihf.cmake ;;
esac

cd "$(dirname "${BASH_SOURCE[0]}")/.."
source_dir="$PWD"
start=$SECONDS
step() { printf '\n=== cross %s: %s (%d s so far)\n' "$arch" "$*" $((SECONDS - start)); }

if [[ $(id -u) -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "cross.sh: needs root or sudo (host packages, binfmt_misc, the sysroot)" >&2
  exit 1
fi

# ---- Host packages ----------------------------------------------------------------------------
step "host packages"
host_packages=(crossbuild-essential-"$arch" qemu-user-static binfmt-support mmdebstrap
               ninja-build ccache cmake)
missing=()
for package in "${host_packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$package")
  fi
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "cross.sh: installing ${missing[*]}"
  "${as_root[@]}" apt-get update
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}"
else
  echo "cross.sh: all ${#host_packages[@]} host packages are installed"
fi

# ---- binfmt_misc: programs started by the tests run under qemu too ----------------------------
# The tests themselves run through CMAKE_CROSSCOMPILING_EMULATOR (the toolchain file); the
# programs they start (the idem command, sharing_worker, themselves again) are started by the
# kernel, which hands them to qemu through binfmt_misc. qemu-user-static's entries have the F
# flag (the interpreter is opened once, so it works in any mount namespace); QEMU_LD_PREFIX,
# passed on through the environment, names the sysroot.
if [[ ! -e /proc/sys/fs/binfmt_misc/status ]]; then
  "${as_root[@]}" mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || true
fi
if [[ ! -e /proc/sys/fs/binfmt_misc/$qemu ]]; then
  "${as_root[@]}" update-binfmts --enable "$qemu" || true
fi
if [[ ! -e /proc/sys/fs/binfmt_misc/$qemu ]] ||
   ! grep -q '^enabled' "/proc/sys/fs/binfmt_misc/$qemu"; then
  echo "cross.sh: warning: no binfmt_misc entry for $qemu: tests that start other programs" \
       "will fail" >&2
fi

# ---- The sysroot ----------------------------------------------------------------------------
# What the library, the idem command and the tests link (and what they load at run time), for
# the target. Changing this list makes the sysroot again.
target_packages=(libc6-dev libstdc++-12-dev librocksdb-dev libssl-dev libfmt-dev libgtest-dev
                 libcli11-dev nlohmann-json3-dev libpq-dev)
mirror="${IDEM_CROSS_MIRROR:-http://deb.debian.org/debian}"
security_mirror="${IDEM_CROSS_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
cache="${IDEM_CROSS_CACHE:-/var/cache/idem-cross}"
sysroot="$cache/$arch"
# The stamp names what made the sysroot: the packages, the mirrors and the sysroot's own path
# (the fix-ups below write it into CMake's package files).
stamp="sysroot v2 $arch ${target_packages[*]} $mirror $security_mirror $sysroot"

make_sysroot() {
  local new="$sysroot.new"
  "${as_root[@]}" rm -rf "$new"
  "${as_root[@]}" mkdir -p "$cache"
  # The extract variant unpacks the packages and their dependencies, running none of their
  # scripts: no emulation needed, and a sysroot needs nothing more.
  local include
  include=$(IFS=,; echo "${target_packages[*]}")
  "${as_root[@]}" nice -n 10 mmdebstrap --variant=extract --architectures="$arch" \
    --include="$include" bookworm "$new" \
    "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
    "deb $security_mirror bookworm-security main"
  # Absolute symbolic links (libz.so -> /lib/...) point into the host: made relative.
  local link target
  while IFS= read -r -d '' link; do
    target=$(readlink "$link")
    "${as_root[@]}" ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$new$target")" "$link"
  done < <(find "$new/usr" -type l -lname '/*' -print0)
  # Debian's CMake package files name absolute paths under /usr (RocksDB's list of libraries,
  # Snappy's and GTest's imported locations): they are made to name the sysroot's.
  local dirs=() dir
  for dir in "$new/usr/lib/$triplet/cmake" "$new/usr/share/cmake" "$new/usr/lib/cmake"; do
    if [[ -d "$dir" ]]; then dirs+=("$dir"); fi
  done
  find "${dirs[@]}" -name '*.cmake' -print0 |
    xargs -0 -r "${as_root[@]}" sed -i -e "s#\\([\";]\\)/usr/#\\1$sysroot/usr/#g" \
      -e "s#\"/usr\"#\"$sysroot/usr\"#g"
  # Only usr/ and lib/ (the dynamic loader's path) stay: qemu looks every absolute path up in
  # QEMU_LD_PREFIX first, so that the sysroot's dev/ptmx, dev/shm, etc/ or tmp/ would stand in
  # for the host's (posix_openpt failed on dev/ptmx, a dangling link there).
  local entry
  for entry in "$new"/* "$new"/.[!.]*; do
    case "${entry##*/}" in
      usr | lib | lib64 | bin | sbin) ;;
      *) "${as_root[@]}" rm -rf "$entry" ;;
    esac
  done
  echo "$stamp" | "${as_root[@]}" tee "$new/.idem-sysroot" >/dev/null
  "${as_root[@]}" rm -rf "$sysroot"
  "${as_root[@]}" mv "$new" "$sysroot"
}

step "sysroot $sysroot"
if [[ -f "$sysroot/.idem-sysroot" && "$(cat "$sysroot/.idem-sysroot")" == "$stamp" ]]; then
  echo "cross.sh: the sysroot is up to date"
else
  echo "cross.sh: making the sysroot (packages: ${target_packages[*]})"
  make_sysroot
fi

# ---- Build ------------------------------------------------------------------------------------
build_dir="$source_dir/build-cross-$arch"
# ccache, as scripts/test.sh: the paths below the tree are hashed relative to it.
launchers=()
if command -v ccache >/dev/null; then
  launchers=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="$source_dir" CCACHE_NOHASHDIR=1
fi
step "configure build-cross-$arch/"
IDEM_CROSS_SYSROOT="$sysroot" cmake -S . -B "$build_dir" -G Ninja \
  -DCMAKE_TOOLCHAIN_FILE="$source_dir/cmake/toolchains/$toolchain" \
  -DIDEM_CROSS_SYSROOT="$sysroot" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIDEM_BUILD_TESTS=ON \
  -DIDEM_BUILD_EXAMPLES=OFF -DIDEM_WERROR=ON "${launchers[@]}"

if [[ $quick == 1 ]]; then
  step "build the library, the idem command and the core tests"
  nice -n 10 cmake --build "$build_dir" -j "$jobs" --target idem idem_tool core_tests
else
  step "build everything"
  nice -n 10 cmake --build "$build_dir" -j "$jobs"
fi

# ---- Tests ------------------------------------------------------------------------------------
tmp=$(mktemp -d /dev/shm/idem-cross-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
chmod 1777 "$tmp"  # as /tmp: the tests that run a process as another user need to reach it
export TMPDIR="$tmp"
export QEMU_LD_PREFIX="$sysroot"
# Tests that stress processes for a while (kill storms, crowds of connections) do fewer rounds:
# under emulation each costs ten to fifty times as long.
export IDEM_UNDER_EMULATOR=1
ctest_args=(--test-dir "$build_dir" -j "$jobs" --output-on-failure --timeout 1800)
if [[ $quick == 1 ]]; then
  step "core tests under $qemu"
  ctest_args+=(-L '^core$')
elif [[ $postgres == 0 ]]; then
  step "all tests but PostgreSQL's under $qemu"
  ctest_args+=(-LE '^postgres$')
else
  step "all tests under $qemu"
fi
ctest "${ctest_args[@]}"

step "done"
echo "cross.sh: $arch: the tests passed ($((SECONDS - start)) s)"
