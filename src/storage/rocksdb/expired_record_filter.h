// The compaction filter that drops records whose retention expired (docs/format.md, "The
// expiry index"): never one that expires after the persisted filter horizon.

#ifndef IDEM_STORAGE_ROCKSDB_EXPIRED_RECORD_FILTER_H_
#define IDEM_STORAGE_ROCKSDB_EXPIRED_RECORD_FILTER_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "idem/options.h"

namespace rocksdb {
class CompactionFilterFactory;
}

namespace idem::storage {

// Filters drop records that expired at or before min(clock's now, *horizon).
std::shared_ptr<rocksdb::CompactionFilterFactory> NewExpiredRecordFilterFactory(
    std::shared_ptr<const Clock> clock, std::shared_ptr<const std::atomic<int64_t>> horizon);

}  // namespace idem::storage

#endif  // IDEM_STORAGE_ROCKSDB_EXPIRED_RECORD_FILTER_H_
