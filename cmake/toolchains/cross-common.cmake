# Shared by the toolchain files of this folder (aarch64-linux-gnu.cmake, arm-linux-gnueabihf.cmake):
# a Linux target built with Debian's cross compiler (crossbuild-essential-<arch>) against a
# sysroot that holds the target's Debian packages (scripts/cross.sh makes it with mmdebstrap),
# and run under qemu user mode. The including file sets IDEM_CROSS_TRIPLET and IDEM_CROSS_QEMU.
#
# IDEM_CROSS_SYSROOT (a cache variable, or the environment variable of that name): the sysroot.

set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_C_COMPILER ${IDEM_CROSS_TRIPLET}-gcc)
set(CMAKE_CXX_COMPILER ${IDEM_CROSS_TRIPLET}-g++)

if(NOT IDEM_CROSS_SYSROOT AND DEFINED ENV{IDEM_CROSS_SYSROOT})
  set(IDEM_CROSS_SYSROOT "$ENV{IDEM_CROSS_SYSROOT}")
endif()
if(NOT IDEM_CROSS_SYSROOT OR NOT IS_DIRECTORY "${IDEM_CROSS_SYSROOT}/usr/include")
  message(FATAL_ERROR "IDEM_CROSS_SYSROOT (\"${IDEM_CROSS_SYSROOT}\") is not a sysroot with "
                      "usr/include: scripts/cross.sh makes one")
endif()
set(IDEM_CROSS_SYSROOT "${IDEM_CROSS_SYSROOT}" CACHE PATH "The target's root file system")
# try_compile projects see these too.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES IDEM_CROSS_SYSROOT)

set(CMAKE_SYSROOT "${IDEM_CROSS_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH "${IDEM_CROSS_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)  # programs run on the build machine
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${IDEM_CROSS_SYSROOT}")
set(ENV{PKG_CONFIG_LIBDIR}
    "${IDEM_CROSS_SYSROOT}/usr/lib/${IDEM_CROSS_TRIPLET}/pkgconfig:${IDEM_CROSS_SYSROOT}/usr/share/pkgconfig")

# 64-bit file offsets and times on every target (a no-op on 64-bit ones; on armhf, glibc 2.34+
# switches off_t and time_t to 64 bits). No time_t crosses RocksDB's ABI in idem (docs/cross.md),
# so that Debian's armhf RocksDB, built with a 32-bit time_t, links safely.
add_compile_definitions(_FILE_OFFSET_BITS=64 _TIME_BITS=64)

# Tests, and gtest_discover_tests, run the target's programs under qemu; the programs they start
# themselves (the idem command, worker processes) run through binfmt_misc, which scripts/cross.sh
# enables, with QEMU_LD_PREFIX naming the sysroot (qemu passes its environment on).
find_program(IDEM_CROSS_QEMU_PROGRAM ${IDEM_CROSS_QEMU} REQUIRED)
set(CMAKE_CROSSCOMPILING_EMULATOR
    /usr/bin/env QEMU_LD_PREFIX=${IDEM_CROSS_SYSROOT} IDEM_UNDER_EMULATOR=1
    ${IDEM_CROSS_QEMU_PROGRAM})
