#!/usr/bin/env bash
# Installs the Debian 12 (bookworm) packages that idem's build, tests, tools and demo need.
# Idempotent: when every package is already installed it only checks and exits (no apt-get).
# Runs apt-get as root, or through sudo when not root.
set -euo pipefail

packages=(
  build-essential   # g++ 12, make, and libasan/libubsan/libtsan for the sanitizer builds
  cmake
  ccache            # scripts/test.sh: build-shared/ reuses build/'s compilations
  clang             # build-clang-tsa/ (-Wthread-safety) and the fuzzers
  g++
  pkg-config
  librocksdb-dev    # the storage engine (7.8.3)
  libssl-dev        # libcrypto: SHA-256 for Fingerprint
  libfmt-dev        # messages and the idem command's tables (header-only use)
  libgtest-dev
  libcli11-dev      # the idem command's argument parser
  nlohmann-json3-dev  # the idem command's JSON Lines output
  libcpp-httplib-dev  # the HTTP service example (examples/http_service)
  curl              # drives the HTTP service example in its test
  python3           # the shared library's package test loads it with ctypes
  libpq-dev         # libpq, for the PostgreSQL tests (and the PostgreSQL store)
  postgresql-15     # initdb and postgres: the tests start throwaway servers (tests/support/pg_server.h);
                    # the package's own cluster, if it makes one, is not used
  pgbouncer         # PgBouncer in transaction pooling mode in front of those servers
  groff-base        # the man_page test renders docs/idem.1 with groff -man -ww
  # scripts/package.sh: CPack's DEB generator needs dpkg-shlibdeps (dpkg-dev) and file; lintian
  # checks the packages; mmdebstrap makes the clean chroot they are installed in (also the
  # cross builds' sysroots); systemd-analyze (systemd) verifies the units
  dpkg-dev
  file
  lintian
  mmdebstrap
  systemd
  # runtime_socket_test mounts a file system without socket inodes: a kernel vfat image
  # (mkfs.vfat) where the kernel has vfat, else an exFAT image through FUSE (mkfs.exfat and
  # mount.exfat-fuse; CI's kernel has no vfat)
  dosfstools
  exfatprogs
  exfat-fuse
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$package")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages are installed"
  exit 0
fi

if [[ $(id -u) -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "install-deps: missing packages: ${missing[*]}" >&2
  echo "install-deps: not root and sudo is not available; install them as root" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
"${as_root[@]}" apt-get update
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y --no-install-recommends "${missing[@]}"
