// What opening a RocksDB store is given (RocksDbStorage::Open, Install): the directory, the
// mode, the memory and sync settings, the clock, and the tests' hooks.

#ifndef IDEM_STORAGE_ROCKSDB_ROCKSDB_CONFIG_H_
#define IDEM_STORAGE_ROCKSDB_ROCKSDB_CONFIG_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "idem/log.h"
#include "idem/options.h"

namespace rocksdb {
class Env;
}  // namespace rocksdb

namespace idem::storage {

struct RocksDbConfig {
  std::string path;  // the RocksDB directory
  bool create_if_missing = true;
  bool read_only = false;                // a read-only instance: reads only, never takes the LOCK
  std::size_t memory_budget = 96 << 20;  // Options::memory_budget
  // Options::sync_interval: writes made with Durability::kPeriodic are synced at most this long
  // after they return (PeriodicSync). Positive.
  std::chrono::milliseconds sync_interval{std::chrono::seconds(1)};
  // The time records are judged by (Storage's `now`), and the compaction filter's notion of
  // "expired". Not null.
  std::shared_ptr<const Clock> clock;
  // Test hook: the Env (and through it the FileSystem) RocksDB uses; null means the default.
  // The fault injection tests pass one whose writes and syncs fail on demand.
  std::shared_ptr<rocksdb::Env> env;
  // Test hook: how many tokens each persisted token ceiling reserves (kTokenBlock). The power-cut
  // tests make it small, so that cuts land while a ceiling is being written.
  uint64_t token_block = 0;  // 0: kTokenBlock
  // Receives what an operator must hear and no call returns: the store stopped writing after a
  // disk error, and started again (Options::log). Called from the caller's thread of a write,
  // never from RocksDB's. Null: dropped.
  LogSink log;
};

}  // namespace idem::storage

#endif  // IDEM_STORAGE_ROCKSDB_ROCKSDB_CONFIG_H_
