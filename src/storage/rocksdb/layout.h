// How the store lays its data out in RocksDB (docs/format.md): the column families, the keys
// of the meta column family, and the expiry index's keys. Shared by the files of RocksDbStorage.

#ifndef IDEM_STORAGE_ROCKSDB_LAYOUT_H_
#define IDEM_STORAGE_ROCKSDB_LAYOUT_H_

#include <rocksdb/options.h>
#include <rocksdb/slice.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "idem/options.h"
#include "idem/status.h"
#include "idem/tables.h"
#include "util/coding.h"

namespace idem::storage {

// The records are in RocksDB's default column family; beside them:
inline constexpr char kByExpiryFamily[] = "by_expiry";
inline constexpr char kMetaFamily[] = "meta";
// Each application table (idem/tables.h) is a column family named this and the table's name.
inline constexpr char kTableFamilyPrefix[] = "app.";
// Keys of the meta column family.
inline constexpr char kFormatVersionKey[] = "format_version";
inline constexpr char kTokenCeilingKey[] = "token_ceiling";
inline constexpr char kTokenLeadKey[] = "token_lead";
// The directory the files were last opened in (st_dev, st_ino): another one means a copy.
inline constexpr char kHomeDeviceKey[] = "home_device";
inline constexpr char kHomeInodeKey[] = "home_inode";
inline constexpr char kFilterHorizonKey[] = "filter_horizon";
// The owners' counters (idem/counters.h), kept for the next owner: u32 count, then count times
// (u8 number, u64 value), a counter's number its row in kCounters from 1 (as on the wire).
inline constexpr char kOwnerCountersKey[] = "owner_counters";
// Their latency histograms, beside: u32 count, then count times (u8 number, u8 bucket count,
// that many u64 buckets, u64 sum of nanoseconds), a histogram's number its row in kLatencies
// from 1.
inline constexpr char kOwnerLatencyKey[] = "owner_latency";
// The record counts of the owner's clean close (RecordCounts::Encode), after the sequence number
// the database has once they are written (u64): valid while it has that one still.
inline constexpr char kRecordCountsKey[] = "record_counts";
// Never written: only deleted, unlogged, to keep a memtable non-empty after a resume.
inline constexpr char kResumeGuardKey[] = "resume_guard";

inline rocksdb::Slice AsSlice(std::string_view bytes) { return {bytes.data(), bytes.size()}; }

// Expiry index key: the expiry as big-endian microseconds with the sign bit flipped (so that
// byte order is time order, pre-1970 included), then the record key.
inline void ExpiryIndexKeyInto(int64_t expires_micros, std::string_view key, std::string& out) {
  const uint64_t biased = static_cast<uint64_t>(expires_micros) ^ (uint64_t{1} << 63);
  out.resize(8 + key.size());
  util::StoreBigEndian(out.data(), biased);
  if (!key.empty()) std::memcpy(out.data() + 8, key.data(), key.size());  // data() may be null
}

inline std::string ExpiryIndexKey(int64_t expires_micros, std::string_view key) {
  std::string out;
  ExpiryIndexKeyInto(expires_micros, key, out);
  return out;
}

inline int64_t ExpiryOfIndexKey(std::string_view index_key) {
  const uint64_t biased = util::GetBigEndian<uint64_t>(index_key.data());
  return static_cast<int64_t>(biased ^ (uint64_t{1} << 63));
}

// An application table's value with its version (docs/format.md, "Application table values"),
// and back: kCorruption naming the table and key when it is not one (rocksdb_storage_tables.cc).
std::string EncodeTableValue(const std::optional<std::string>& value, uint64_t version);
Result<TableValue> DecodeTableValue(std::string_view encoded, std::string_view table,
                                    std::string_view key);

inline rocksdb::WriteOptions WriteOptionsFor(Durability durability) {
  rocksdb::WriteOptions options;
  options.sync = durability == Durability::kSync;
  return options;
}

}  // namespace idem::storage

#endif  // IDEM_STORAGE_ROCKSDB_LAYOUT_H_
