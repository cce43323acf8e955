#!/usr/bin/env bash
# tests/package/deb_install_test.sh DIRECTORY
#
# Installs the Debian packages in DIRECTORY (scripts/package.sh makes them) in a clean Debian 12
# chroot with apt, which fetches their dependencies from Debian's mirror as a user's apt would:
# a dependency the packages forget to declare is missing there, and what needs it fails. Then,
# in the chroot: the command runs from the library's package; its man page and bash completion
# are found; a program built against libidem-dev (outside, with pkg-config and with
# find_package, from the packages' files alone) runs with nothing but the runtime package; a
# store that program made is read with `idem dump`; the systemd units' ExecStart lines run as
# root and drop to the store's owner (a store refuses root). The units are checked with
# systemd-analyze verify, and the binaries for their hardening. Needs root (chroot, mounts);
# skips with a message otherwise.
#
# The base chroot (mmdebstrap --variant=apt) is cached as a tarball in
# ${IDEM_PACKAGE_CACHE:-/var/cache/idem-package}, made again when its recipe changes.
# IDEM_CROSS_MIRROR and IDEM_CROSS_SECURITY_MIRROR name the mirrors, as for scripts/cross.sh.
set -euo pipefail

if [[ $# -ne 1 || ! -d "$1" ]]; then
  echo "usage: tests/package/deb_install_test.sh DIRECTORY (the .debs, from scripts/package.sh)" >&2
  exit 2
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "deb_install_test: skipped: needs root (a chroot and its mounts)"
  exit 0
fi
source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
debs_dir=$(cd "$1" && pwd)
shopt -s nullglob
debs=("$debs_dir"/*.deb)
[[ ${#debs[@]} -gt 0 ]] || { echo "deb_install_test: no .deb in $debs_dir" >&2; exit 1; }

step() { printf 'deb_install_test: %s\n' "$*"; }
fail() { echo "deb_install_test: FAILED: $*" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/idem-deb-test.XXXXXX")
trap 'rm -rf --one-file-system "$work"' EXIT

# ---- The units, on the host's systemd --------------------------------------------------------
step "systemd-analyze verify the units"
dpkg-deb -x "$debs_dir"/idem_*.deb "$work/idem-files"
units="$work/idem-files/lib/systemd/system"
[[ -d $units ]] || fail "the idem package has no units in /lib/systemd/system"
mkdir -p "$work/units"
for kind in purge stats; do
  for type in service timer; do
    cp "$units/idem-$kind@.$type" "$work/units/idem-$kind@var-lib-app-idem.$type"
    # The units name /usr/bin/idem and /usr/libexec/idem/as-store-owner, which the host need not
    # have: verified with the package's files in their place.
    sed -i "s|/usr/|$work/idem-files/usr/|g" "$work/units/idem-$kind@var-lib-app-idem.$type"
  done
done
# It exits 0 on some findings (an unknown key is "ignored"): any line it prints fails the test.
if ! findings=$(cd "$work/units" &&
                SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --man=no ./*.timer ./*.service 2>&1) ||
   [[ -n $findings ]]; then
  fail "systemd-analyze verify found problems in the units: $findings"
fi

step "no RUNPATH on the command (Debian's policy; lintian's custom-library-search-path)"
# Outputs are read whole before grep -q looks at them: grep stops at its first match, and under
# pipefail the writer's SIGPIPE would fail the pipeline (ldd's output is long enough for that).
dynamic=$(readelf -d "$work/idem-files/usr/bin/idem")
if grep -Eq "RUNPATH|RPATH" <<<"$dynamic"; then
  fail "/usr/bin/idem has a RUNPATH: $(readelf -d "$work/idem-files/usr/bin/idem" | grep PATH)"
fi

# IDEM_HARDEN (CMakeLists.txt), as lintian's hardening checks look for it; lintian reports a
# missing one only as information, which scripts/package.sh does not fail on.
step "the shipped binaries are hardened (full RELRO, stack protector, _FORTIFY_SOURCE)"
dpkg-deb -x "$debs_dir"/libidem0.1_*.deb "$work/library-files"
for binary in "$work/idem-files/usr/bin/idem" "$work"/library-files/usr/lib/*/libidem.so.*.*.*; do
  # Read whole first: `grep -q` closing the pipe early would fail the pipeline (pipefail).
  dynamic=$(readelf -d "$binary")
  headers=$(readelf -lW "$binary")
  symbols=$(nm -D "$binary")
  grep -q "BIND_NOW" <<<"$dynamic" || fail "$binary: no BIND_NOW (-z now)"
  grep -q "GNU_RELRO" <<<"$headers" || fail "$binary: no RELRO (-z relro)"
  grep -q " U __stack_chk_fail" <<<"$symbols" || fail "$binary: no stack protector"
  grep -Eq " U __[a-z]+_chk@" <<<"$symbols" || fail "$binary: no fortified call (_FORTIFY_SOURCE)"
done

# ---- The base chroot -------------------------------------------------------------------------
mirror="${IDEM_CROSS_MIRROR:-http://deb.debian.org/debian}"
security_mirror="${IDEM_CROSS_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
base_packages=(man-db bash-completion)  # what a user has, that the packages do not depend on
recipe="base v1 bookworm apt ${base_packages[*]} $mirror $security_mirror"
cache="${IDEM_PACKAGE_CACHE:-/var/cache/idem-package}"
base="$cache/bookworm-apt.tar"
if [[ ! -f $base || "$(cat "$base.recipe" 2>/dev/null)" != "$recipe" ]]; then
  step "making the base chroot with mmdebstrap (cached in $cache)"
  mkdir -p "$cache"
  rm -rf "$base" "$base.recipe" "$cache/new.tar"
  include=$(IFS=,; echo "${base_packages[*]}")
  # The output's name ends in .tar: mmdebstrap picks the format from it.
  nice -n 10 mmdebstrap --quiet --variant=apt --include="$include" bookworm "$cache/new.tar" \
    "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
    "deb $security_mirror bookworm-security main"
  mv "$cache/new.tar" "$base"
  echo "$recipe" >"$base.recipe"
fi
root="$work/root"
mkdir -p "$root"
tar -C "$root" -xf "$base"

# ---- Programs built against libidem-dev, from the packages' files alone ------------------------
step "building consumers against libidem-dev (pkg-config, find_package)"
for deb in "$debs_dir"/libidem*.deb; do dpkg-deb -x "$deb" "$work/dev-files"; done
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
pc_dir="$work/dev-files/usr/lib/$multiarch/pkgconfig"
[[ -f $pc_dir/idem.pc ]] || fail "libidem-dev has no /usr/lib/$multiarch/pkgconfig/idem.pc"
# shellcheck disable=SC2046  # pkg-config's flags are words
g++ -std=c++20 -O1 -o "$work/consumer-pkg-config" "$source_dir/tests/package/consumer.cc" \
  $(PKG_CONFIG_PATH="$pc_dir" PKG_CONFIG_SYSROOT_DIR="$work/dev-files" pkg-config --cflags --libs idem)
cmake -S "$source_dir/tests/package" -B "$work/consumer-cmake" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/dev-files/usr" >/dev/null
cmake --build "$work/consumer-cmake" >/dev/null
mkdir -p "$root/opt/consumers"
cp "$work/consumer-pkg-config" "$work/consumer-cmake/consumer" "$root/opt/consumers/"
mkdir -p "$root/opt/debs"
cp "${debs[@]}" "$root/opt/debs/"

# ---- In the chroot ---------------------------------------------------------------------------
# A private mount namespace: its mounts (/proc, /dev) vanish with it, whatever happens.
step "installing the packages in the chroot with apt, and using them"
cp /etc/resolv.conf "$root/etc/resolv.conf"
cat >"$root/opt/inside.sh" <<'INSIDE'
#!/bin/bash
set -euo pipefail
fail() { echo "deb_install_test (in the chroot): FAILED: $*" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes
apt-get -qq update
apt-get -qq install -y --no-install-recommends /opt/debs/*.deb >/dev/null
dpkg -s idem libidem-dev >/dev/null

idem --version
[[ $(man -w idem) == /usr/share/man/man1/idem.1.gz ]] || fail "man -w idem: $(man -w idem)"
# /lib is /usr/lib on Debian 12 (merged /usr): ldconfig's cache may name either.
# Read whole first, as readelf's above: grep -q and pipefail.
loads=$(ldd /usr/bin/idem)
grep -Eq "libidem\.so\.[0-9.]+ => /(usr/)?lib/" <<<"$loads" ||
  fail "idem does not load the package's libidem: $loads"
bash -c 'source /usr/share/bash-completion/bash_completion
         _completion_loader idem
         complete -p idem' | grep -q "idem" || fail "bash completion for idem not found"

useradd --create-home app
install -d -o app -g app /var/lib/app
for consumer in /opt/consumers/*; do
  store=/var/lib/app/$(basename "$consumer")
  setpriv --reuid=app --regid=app --clear-groups "$consumer" "$store" | grep -q "ran 1 time" ||
    fail "$consumer did not run its request once"
  setpriv --reuid=app --regid=app --clear-groups idem dump "$store" | grep -q "order-1" ||
    fail "idem dump $store does not show order-1"
done

# The units' ExecStart lines, as systemd runs them: as root. The store refuses root, so these
# succeed only by dropping to its owner.
store=/var/lib/app/consumer
if idem purge "$store" >/dev/null 2>&1; then fail "root opened app's store (the units' premise)"; fi
/usr/libexec/idem/as-store-owner "$store" /usr/bin/idem purge "$store" | grep -q "^purged 0 records" ||
  fail "as-store-owner ... idem purge"
mkdir -p /var/lib/prometheus/node-exporter
/usr/libexec/idem/as-store-owner "$store" --output /var/lib/prometheus/node-exporter/idem-app.prom \
  /usr/bin/idem stats "$store" --format prometheus
grep -q '^idem_records{' /var/lib/prometheus/node-exporter/idem-app.prom ||
  fail "the stats unit's file has no idem_records"
ls /var/lib/prometheus/node-exporter | grep -qv '^idem-app.prom$' && fail "a temporary file was left"
echo "deb_install_test (in the chroot): all checks passed"
INSIDE
chmod +x "$root/opt/inside.sh"
unshare --mount --propagation private --fork bash -c '
  set -e
  mount -t proc proc "$1/proc"
  mount --rbind /dev "$1/dev"
  exec chroot "$1" /opt/inside.sh' unshare-chroot "$root" || fail "the checks in the chroot failed"
step "passed"
