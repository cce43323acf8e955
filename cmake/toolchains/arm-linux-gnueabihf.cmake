# armhf (32-bit ARMv7 with hardware floating point, Debian's armhf): see cross-common.cmake and
# docs/cross.md.   scripts/cross.sh armhf
set(CMAKE_SYSTEM_PROCESSOR armv7l)
set(IDEM_CROSS_TRIPLET arm-linux-gnueabihf)
set(IDEM_CROSS_QEMU qemu-arm-static)
include(${CMAKE_CURRENT_LIST_DIR}/cross-common.cmake)
