// How Options::memory_budget is divided among RocksDB's memory pools (applied by
// rocksdb_options.h, which the storage and the benchmark's raw-RocksDB anchor share).

#ifndef IDEM_STORAGE_ROCKSDB_MEMORY_SPLIT_H_
#define IDEM_STORAGE_ROCKSDB_MEMORY_SPLIT_H_

#include <algorithm>
#include <cstddef>

namespace idem::storage {

struct MemorySplit {
  std::size_t block_cache;        // LRU cache capacity; the memtables are charged to it too
  std::size_t write_buffers;      // WriteBufferManager limit: all memtables together
  std::size_t write_buffer_size;  // one memtable of the records column family
  // A records table file written by a compaction. Its index (partitions of about 4 KiB) stays
  // in memory, outside the block cache, until the file is finished: about 3-4% of the file's
  // size per running compaction (docs/design/speed.md, increment 15).
  std::size_t table_file_size;
};

// The budget is for the whole process (Options::memory_budget): a quarter is the block cache,
// which also accounts for the memtables, bounded by an eighth. The rest is for code (~15 MiB
// of idem, RocksDB and libc pages), compaction and scan buffers, and the allocator's arenas
// (docs/operations.md, "Memory").
constexpr MemorySplit SplitMemoryBudget(std::size_t budget) {
  constexpr std::size_t kMiB = 1 << 20;
  return {std::max(budget / 4, kMiB), std::max(budget / 8, kMiB),
          std::clamp(budget / 16, kMiB, 64 * kMiB), std::clamp(budget / 6, 8 * kMiB, 64 * kMiB)};
}

}  // namespace idem::storage

#endif  // IDEM_STORAGE_ROCKSDB_MEMORY_SPLIT_H_
