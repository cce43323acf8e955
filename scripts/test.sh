#!/usr/bin/env bash
# Installs the Debian packages, builds idem, and runs every test:
#   0. build-clang-tsa/  clang's thread-safety analysis over src/ and tools/ (compiled only)
#   1. build/       RelWithDebInfo: all tests (ctest); then build-shared/: the library as a
#                   shared library (BUILD_SHARED_LIBS=ON), only it, the idem command and the C
#                   API test built, and only the tests a shared build changes run (exports,
#                   C API, installed package); then the Debian packages (scripts/package.sh
#                   --test, in build-deb/); then each fuzzer for 15 s (scripts/fuzz.sh, in
#                   build-fuzz/) and a smoke run of the benchmark (scripts/bench.sh --smoke,
#                   in build-bench/); then the core tests cross-built for arm64 and run under
#                   qemu (scripts/cross.sh arm64 --quick, in build-cross-arm64/)
#   2. build-asan/  AddressSanitizer + UndefinedBehaviorSanitizer: all tests
#   3. build-tsan/  ThreadSanitizer: the tests labelled "concurrency" (only they are built)
# Each build is a preset of CMakePresets.json (clang-thread-safety, default, shared, asan, tsan);
# the default and shared builds treat warnings as errors (IDEM_WERROR; GCC's flow warnings
# misfire under the sanitizers), the clang one its thread-safety findings only. To reproduce one
# step by hand, `cmake --preset asan && cmake --build --preset asan -j2 && ctest --preset asan
# -j2`.
# Set IDEM_SKIP_SANITIZERS=1 to run steps 0 and 1 only. IDEM_JOBS sets build and test parallelism
# (default 2). Exits non-zero on the first failure.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
jobs="${IDEM_JOBS:-2}"
start=$SECONDS

step() { printf '\n=== %s (%d s so far)\n' "$*" $((SECONDS - start)); }

# The builds below take about 12 GB of disk (build/ 3 GB, build-asan/ 3 GB, build-tsan/ 1.2 GB,
# the shared, fuzz and cross builds 2 GB, the arm64 sysroot 0.3 GB) and ccache up to its 5 GB
# limit. Said up front, so that a run that fills the disk is plain from its first lines.
free_kib=$(df -Pk . | awk 'NR == 2 {print $4}')
echo "test.sh: $((free_kib / 1024 / 1024)) GB free here; the builds need about 12 GB, ccache up to 5 GB more"
if ((free_kib < 12 * 1024 * 1024)); then
  echo "test.sh: warning: less than 12 GB free: a build may fail with 'No space left on device'" >&2
fi

step "installing packages"
scripts/install-deps.sh

# ccache compiles each file once for build/ and build-shared/, whose compile commands are the
# same once ccache rewrites the paths below the tree as relative ones (CCACHE_BASEDIR; both
# build directories sit at the same depth, so the paths and the debug information's source
# paths still resolve) and leaves the working directory out of the hash (CCACHE_NOHASHDIR): the
# shared step then costs its links (measured on 2 busy cores: its build took 524 s with nothing
# cached, its links 13 s). CMake takes the launchers from these variables at the first configure.
if command -v ccache >/dev/null; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
fi

# First, as it takes a minute or two: a lock misused in src/ or tools/ fails here, before the
# long builds (clang's thread-safety analysis, src/util/mutex.h; nothing is linked or run).
step "build-clang-tsa/: clang -Wthread-safety over src/ and tools/"
cmake --preset clang-thread-safety >/dev/null
cmake --build --preset clang-thread-safety -j "$jobs"

step "build/: configure and build"
cmake --preset default
cmake --build --preset default -j "$jobs"

step "build/: all tests"
ctest --preset default -j "$jobs"

# The shared library: what distributions ship and other languages load. Only the library, the
# idem command and the C API test are built, and only what a shared build changes is tested:
# the exported symbols (the public API alone), the C API through libidem.so, and the installed
# package (soname links, the installed command's RPATH, C++, C-only and pkg-config consumers,
# Python's ctypes.util.find_library). The rest of the suite ran above on the same code.
step "build-shared/: the shared library, its exports and its installed package"
cmake --preset shared
cmake --build --preset shared -j "$jobs"
ctest --preset shared -j "$jobs"

# The Debian packages, from the shared build's objects (build-deb/, configured for /usr: ccache
# makes it links only): lintian must find no errors or warnings, and the packages are installed
# with apt in a clean Debian 12 chroot and used there (root; skipped with a message otherwise).
step "package: the Debian packages, lintian, and an install in a clean chroot"
scripts/package.sh --test

# A brief run of each libFuzzer target (clang, in build-fuzz/): any crash fails the run and is
# kept in fuzz/regressions/ (see fuzz/README.md).
step "fuzz: each target for 15 s"
scripts/fuzz.sh --seconds 15

# The benchmark is not timed here (shared machines make timings noise), but it must build and
# every workload must run: a tiny smoke run of each, against a Redis it starts and stops itself.
step "benchmark: smoke run of every workload"
scripts/bench.sh --smoke

# The library, the idem command and the core tests (ctest -L '^core$': the store API, the engine, the
# codecs, the storage and the portability tests) cross-built for 64-bit ARM and run under qemu
# user mode, in a sysroot of Debian's arm64 packages cached in /var/cache/idem-cross (docs/cross.md;
# the full passes, `scripts/cross.sh arm64` and `scripts/cross.sh armhf`, are not part of CI).
step "cross: arm64, the library and the core tests under qemu-aarch64"
scripts/cross.sh arm64 --quick

if [[ "${IDEM_SKIP_SANITIZERS:-0}" == 1 ]]; then
  step "sanitizer builds skipped (IDEM_SKIP_SANITIZERS=1)"
  echo "test.sh: all tests passed"
  exit 0
fi

# The sanitizer presets build Debug at -O1 (quick to compile, fast enough to run), without the
# examples, and discover tests at test time, so that the sanitized binaries run only under the
# options their test presets set (ASAN_OPTIONS, UBSAN_OPTIONS, TSAN_OPTIONS).
step "build-asan/: configure and build with -fsanitize=address,undefined"
cmake --preset asan
cmake --build --preset asan -j "$jobs"

step "build-asan/: all tests under ASan and UBSan"
ctest --preset asan -j "$jobs"

step "build-tsan/: configure and build with -fsanitize=thread"
cmake --preset tsan
cmake --build --preset tsan -j "$jobs"

# ThreadSanitizer cannot map its shadow memory under some kernels' high-entropy address
# randomization; running without randomization avoids that where the kernel allows it.
no_aslr=()
if setarch "$(uname -m)" -R true 2>/dev/null; then
  no_aslr=(setarch "$(uname -m)" -R)
fi

# The tsan test preset sets TSAN_OPTIONS. librocksdb and libstdc++ are not built with
# -fsanitize=thread, so TSan cannot see how they synchronize their own threads (RocksDB's group
# commit hands one thread's WriteBatch to another): ignore_noninstrumented_modules and
# tests/tsan.supp drop the false reports that this causes. Accesses made by idem's own
# (instrumented) code are still checked. No halt_on_error: a test runs to its end (and cleans up
# its child processes), and a process that saw a race exits 66, which fails the test.
# die_after_fork=0: the sharing tests start threads in a child of fork (Execute's lease
# renewal), which TSan otherwise kills.
step "build-tsan/: concurrency tests under TSan"
"${no_aslr[@]}" ctest --preset tsan -j "$jobs"

step "done"
echo "test.sh: all tests passed (plain, ASan+UBSan, TSan)"
