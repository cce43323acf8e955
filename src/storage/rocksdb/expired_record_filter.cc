#include "storage/rocksdb/expired_record_filter.h"

#include <rocksdb/compaction_filter.h>

#include <algorithm>
#include <string_view>

#include "storage/rocksdb/record_codec.h"

namespace idem::storage {
namespace {

// Drops records whose retention expired while RocksDB compacts. Reads only the fixed-offset
// expiry, never decodes. Runs on RocksDB's compaction threads: one instance per compaction, so
// no shared state; noexcept because RocksDB cannot handle exceptions from callbacks.
class ExpiredRecordFilter final : public rocksdb::CompactionFilter {
 public:
  explicit ExpiredRecordFilter(int64_t now_micros) : now_micros_(now_micros) {}

  bool Filter(int /*level*/, const rocksdb::Slice& /*key*/, const rocksdb::Slice& value,
              std::string* /*new_value*/, bool* /*value_changed*/) const noexcept override {
    // An unreadable header is kept: the reader reports it as corruption, never silently lost.
    const auto expires = PeekExpiresMicros(std::string_view(value.data(), value.size()));
    return expires.has_value() && *expires <= now_micros_;
  }
  const char* Name() const noexcept override { return "idem.ExpiredRecordFilter"; }

 private:
  const int64_t now_micros_;
};

class ExpiredRecordFilterFactory final : public rocksdb::CompactionFilterFactory {
 public:
  // Filters drop records that expired at or before min(now, *horizon): never one that expires
  // after the persisted filter horizon.
  ExpiredRecordFilterFactory(std::shared_ptr<const Clock> clock,
                             std::shared_ptr<const std::atomic<int64_t>> horizon)
      : clock_(std::move(clock)), horizon_(std::move(horizon)) {}

  std::unique_ptr<rocksdb::CompactionFilter> CreateCompactionFilter(
      const rocksdb::CompactionFilter::Context& /*context*/) noexcept override {
    return std::make_unique<ExpiredRecordFilter>(
        std::min(ToMicros(clock_->Now()), horizon_->load()));
  }
  const char* Name() const noexcept override { return "idem.ExpiredRecordFilterFactory"; }

 private:
  const std::shared_ptr<const Clock> clock_;
  const std::shared_ptr<const std::atomic<int64_t>> horizon_;
};

}  // namespace

std::shared_ptr<rocksdb::CompactionFilterFactory> NewExpiredRecordFilterFactory(
    std::shared_ptr<const Clock> clock, std::shared_ptr<const std::atomic<int64_t>> horizon) {
  return std::make_shared<ExpiredRecordFilterFactory>(std::move(clock), std::move(horizon));
}

}  // namespace idem::storage
