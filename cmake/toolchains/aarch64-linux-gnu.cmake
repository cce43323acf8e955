# arm64 (64-bit ARM, Debian's arm64): see cross-common.cmake and docs/cross.md.
#   scripts/cross.sh arm64
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(IDEM_CROSS_TRIPLET aarch64-linux-gnu)
set(IDEM_CROSS_QEMU qemu-aarch64-static)
include(${CMAKE_CURRENT_LIST_DIR}/cross-common.cmake)
