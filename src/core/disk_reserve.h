// The disk reserve of a store: PATH/reserve, a file of kReserveBytes of allocated space that a
// read-write open keeps, and spends when the disk is too full for the open itself (RocksDB
// writes a MANIFEST, an OPTIONS file and a new log while it opens). The operator then has a
// store that works, and time to free space; the next open with room makes the reserve again.
// Anchor: CockroachDB's emergency ballast file.

#ifndef IDEM_CORE_DISK_RESERVE_H_
#define IDEM_CORE_DISK_RESERVE_H_

#include <cstddef>
#include <filesystem>

#include "idem/status.h"

namespace idem::core {

inline constexpr char kReserveFile[] = "reserve";
// A store reopened on a full disk needs a few tens of kilobytes to recover its logs
// (docs/operations.md, "A full or failing disk"); a megabyte covers an open many times over.
inline constexpr std::size_t kReserveBytes = 1 << 20;

// Whether `status` failed because the disk was full (ENOSPC).
bool IsNoSpace(const Status& status);

// Deletes the reserve of the store in `directory`; true when there was one.
bool SpendReserve(const std::filesystem::path& directory);

// Makes the reserve of the store in `directory` when it has none: written whole under
// reserve.new, synced, then renamed, so that a reserve is never a short file. Without room for
// it nothing is left behind, and the next open tries again.
void KeepReserve(const std::filesystem::path& directory);

}  // namespace idem::core

#endif  // IDEM_CORE_DISK_RESERVE_H_
