// The owners' counters kept in the store (meta key owner_counters, layout.h), so that the counts
// go on across owners: each owner saves them now and then and when it closes (EngineBackend);
// and the record counts an owner keeps at its clean close (meta key record_counts), so that the
// next owner need not scan the records.

#include <fmt/format.h>
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <set>

#include "storage/rocksdb/fs/rocksdb_status.h"
#include "storage/rocksdb/layout.h"
#include "storage/rocksdb/rocksdb_storage.h"

namespace idem::storage {

Result<Counters> RocksDbStorage::LoadCounters() {
  std::string value;
  const rocksdb::Status read = db_->Get(rocksdb::ReadOptions(), meta_, kOwnerCountersKey, &value);
  if (read.IsNotFound()) return Counters{};
  if (!read.ok()) return FromRocksDb(read, fmt::format("reading the counters of {}", path_));
  const auto damaged = [&] {
    return Status::Corruption(
        fmt::format("store {}: the saved counters ({} bytes) cannot be read", path_, value.size()));
  };
  constexpr std::size_t kField = 1 + 8;
  if (value.size() < 4) return damaged();
  const uint32_t count = util::GetFixed32(value.data());
  if (value.size() != 4 + std::size_t{count} * kField) return damaged();
  Counters counters;
  std::set<uint8_t> seen;
  for (uint32_t i = 0; i < count; ++i) {
    const char* field = value.data() + 4 + std::size_t{i} * kField;
    const auto number = static_cast<uint8_t>(field[0]);
    if (number == 0 || !seen.insert(number).second) return damaged();
    // A counter of a later release (a number past the table) is left out.
    if (number <= kCounterCount) {
      counters.*kCounters[number - 1].field = util::GetFixed64(field + 1);
    }
  }
  return counters;
}

Status RocksDbStorage::SaveCounters(const Counters& counters) {
  static_assert(kCounterCount < 256, "counters are numbered in one byte");
  std::string encoded;
  util::PutFixed32(encoded, static_cast<uint32_t>(kCounterCount));
  for (std::size_t row = 0; row < kCounterCount; ++row) {
    encoded += static_cast<char>(row + 1);
    util::PutFixed64(encoded, counters.*kCounters[row].field);
  }
  rocksdb::WriteBatch batch;
  IDEM_RETURN_IF_ERROR(
      FromRocksDb(batch.Put(meta_, kOwnerCountersKey, encoded), "saving the counters"));
  return Write(Durability::kBuffered, &batch, "saving the counters");
}

Status RocksDbStorage::KeepRecordCounts(std::string_view counts) {
  // Valid while the database's latest sequence number is the one this write gives it: one more
  // than now, as a batch of one Put takes one. Any write after it (and one that came between,
  // which would give this write a later number) makes it stale.
  std::string value;
  util::PutFixed64(value, db_->GetLatestSequenceNumber() + 1);
  value += counts;
  rocksdb::WriteBatch batch;
  IDEM_RETURN_IF_ERROR(
      FromRocksDb(batch.Put(meta_, kRecordCountsKey, value), "keeping the record counts"));
  return Write(Durability::kBuffered, &batch, "keeping the record counts");
}

std::optional<std::string> RocksDbStorage::TakeKeptRecordCounts() {
  std::string value;
  if (!db_->Get(rocksdb::ReadOptions(), meta_, kRecordCountsKey, &value).ok()) return std::nullopt;
  // Taken once: gone before anything else is written (stale or not, it would never be valid
  // again).
  rocksdb::WriteBatch batch;
  if (!batch.Delete(meta_, kRecordCountsKey).ok() ||
      !Write(Durability::kBuffered, &batch, "taking the kept record counts").ok()) {
    return std::nullopt;
  }
  if (value.size() < 8 || util::GetFixed64(value.data()) != opened_at_sequence_) {
    return std::nullopt;
  }
  return value.substr(8);
}

}  // namespace idem::storage
