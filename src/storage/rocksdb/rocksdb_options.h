// The RocksDB settings of idem's storage that do not depend on what it stores. One definition,
// used by the storage and by the benchmark's raw-RocksDB anchor: the anchor runs the same
// engine, so a ratio against it measures idem's own work and not a difference in tuning.

#ifndef IDEM_STORAGE_ROCKSDB_ROCKSDB_OPTIONS_H_
#define IDEM_STORAGE_ROCKSDB_ROCKSDB_OPTIONS_H_

#include <rocksdb/options.h>
#include <rocksdb/perf_level.h>

#include <cstddef>
#include <memory>

namespace rocksdb {
class Cache;
class WriteBufferManager;
}  // namespace rocksdb

namespace idem::storage {

struct RocksDbOptions {
  std::shared_ptr<rocksdb::Cache> cache;  // the block cache; the memtables are charged to it
  std::shared_ptr<rocksdb::WriteBufferManager> write_buffers;
  rocksdb::DBOptions db;                 // background jobs and the write buffer manager
  rocksdb::ColumnFamilyOptions records;  // table format, memtable size and inserts, compaction
};

// Settings for a process whose whole footprint should stay near `memory_budget` bytes
// (Options::memory_budget; the split is memory_split.h).
RocksDbOptions MakeRocksDbOptions(std::size_t memory_budget);

// Turns RocksDB's per-thread performance counters off on the calling thread for its lifetime,
// then restores the thread's level. Nothing in idem reads them, and counting costs: every
// counter update looks up two thread-locals of the shared library (docs/design/speed.md,
// "Settings measured", N4). Restoring leaves a thread that counts for its own
// use of RocksDB as it was.
class ScopedPerfCountersOff {
 public:
  ScopedPerfCountersOff() : saved_(rocksdb::GetPerfLevel()) {
    if (saved_ != rocksdb::PerfLevel::kDisable) rocksdb::SetPerfLevel(rocksdb::PerfLevel::kDisable);
  }
  ~ScopedPerfCountersOff() {
    if (saved_ != rocksdb::PerfLevel::kDisable) rocksdb::SetPerfLevel(saved_);
  }
  ScopedPerfCountersOff(const ScopedPerfCountersOff&) = delete;
  ScopedPerfCountersOff& operator=(const ScopedPerfCountersOff&) = delete;

 private:
  const rocksdb::PerfLevel saved_;
};

}  // namespace idem::storage

#endif  // IDEM_STORAGE_ROCKSDB_ROCKSDB_OPTIONS_H_
