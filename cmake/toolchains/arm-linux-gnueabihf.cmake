# armhf (32-bit ARMv7 with hardware floating point, Debian's armhf): see cross-common.cmake and
# docs/cross.md.   scripts/cross.sh armhf
set(CMAKE_SYSTEM_PROCESSOR armv7l)
set(IDEM_CROSS_TRIPLET arm-linux-gnueabihf)
set(IDEM_CROSS_QEMU qemu-arm-static)
include(${CMAKE_CURRENT_LIST_DIR}/cross-common.cmake)
# GCC's notes that the ARM calling convention of some C++ types changed in GCC 7.1 (-Wpsabi)
# concern mixing code built by GCC 6 and older with newer code: Debian 12's packages are all
# built by GCC 12.
add_compile_options(-Wno-psabi)
