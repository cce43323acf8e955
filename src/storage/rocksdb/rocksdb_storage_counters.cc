// The owners' counters and latency histograms kept in the store (meta keys owner_counters and
// owner_latency, layout.h), so that the counts go on across owners: each owner saves them now and
// then and when it closes (EngineBackend); and the record counts an owner keeps at its clean close
// (meta key record_counts), so that the next owner need not scan the records.

#include <fmt/format.h>
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <set>

#include "storage/rocksdb/fs/rocksdb_status.h"
#include "storage/rocksdb/layout.h"
#include "storage/rocksdb/rocksdb_storage.h"

namespace idem::storage {

namespace {

// Counters as kept (layout.h, kOwnerCountersKey); false when `value` is not such a list.
bool DecodeKeptCounters(std::string_view value, Counters& counters) {
  constexpr std::size_t kField = 1 + 8;
  if (value.size() < 4) return false;
  const uint32_t count = util::GetFixed32(value.data());
  if (value.size() != 4 + std::size_t{count} * kField) return false;
  std::set<uint8_t> seen;
  for (uint32_t i = 0; i < count; ++i) {
    const char* field = value.data() + 4 + std::size_t{i} * kField;
    const auto number = static_cast<uint8_t>(field[0]);
    if (number == 0 || !seen.insert(number).second) return false;
    // A counter of a later release (a number past the table) is left out.
    if (number <= kCounterCount) {
      counters.*kCounters[number - 1].field = util::GetFixed64(field + 1);
    }
  }
  return true;
}

// Latency histograms as kept (layout.h, kOwnerLatencyKey); false when `value` is not such a list.
bool DecodeKeptLatencies(std::string_view value, Latencies& latencies) {
  if (value.size() < 4) return false;
  const uint32_t count = util::GetFixed32(value.data());
  std::size_t at = 4;
  std::set<uint8_t> seen;
  for (uint32_t i = 0; i < count; ++i) {
    if (value.size() - at < 2) return false;
    const auto number = static_cast<uint8_t>(value[at]);
    const auto buckets = static_cast<uint8_t>(value[at + 1]);
    at += 2;
    if (number == 0 || !seen.insert(number).second) return false;
    if (value.size() - at < (std::size_t{buckets} + 1) * 8) return false;
    // A histogram of a later release is left out, as is one whose buckets are not these (the
    // bounds never change: such a histogram is not one this release can read).
    if (number <= kLatencyCount && buckets == kLatencyBucketCount) {
      LatencyHistogram& histogram = latencies.*kLatencies[number - 1].field;
      for (std::size_t b = 0; b < buckets; ++b) {
        histogram.buckets[b] = util::GetFixed64(value.data() + at + b * 8);
      }
      histogram.sum_nanoseconds = util::GetFixed64(value.data() + at + std::size_t{buckets} * 8);
    }
    at += (std::size_t{buckets} + 1) * 8;
  }
  return at == value.size();
}

}  // namespace

Result<KeptCounters> RocksDbStorage::LoadCounters() {
  KeptCounters kept;
  // Each key alone: a value that cannot be read (damaged, or of a layout this release does not
  // know) starts its own figures again from zero, said once in the log, and leaves the other's.
  // Decoded into a copy, so that a value read part way leaves nothing of itself.
  const auto load = [&](const char* key, std::string_view what, auto& figures,
                        auto decode) -> Status {
    std::string value;
    const rocksdb::Status read = db_->Get(rocksdb::ReadOptions(), meta_, key, &value);
    if (read.IsNotFound()) return Status::OK();
    if (!read.ok()) return FromRocksDb(read, fmt::format("reading the {} of {}", what, path_));
    auto decoded = figures;
    if (decode(value, decoded)) {
      figures = decoded;
      return Status::OK();
    }
    const std::string message = fmt::format(
        "store {}: the saved {} (meta {}, {} bytes) cannot be read: they start again from zero",
        path_, what, key, value.size());
    Report({.severity = LogSeverity::kWarning,
            .event = "saved_counters_unreadable",
            .message = message});
    return Status::OK();
  };
  IDEM_RETURN_IF_ERROR(load(kOwnerCountersKey, "counters", kept.counters, DecodeKeptCounters));
  IDEM_RETURN_IF_ERROR(
      load(kOwnerLatencyKey, "latency histograms", kept.latencies, DecodeKeptLatencies));
  return kept;
}

Status RocksDbStorage::SaveCounters(const KeptCounters& kept) {
  static_assert(kCounterCount < 256 && kLatencyCount < 256 && kLatencyBucketCount < 256,
                "counters, histograms and buckets are numbered in one byte");
  std::string counters;
  util::PutFixed32(counters, static_cast<uint32_t>(kCounterCount));
  for (std::size_t row = 0; row < kCounterCount; ++row) {
    counters += static_cast<char>(row + 1);
    util::PutFixed64(counters, kept.counters.*kCounters[row].field);
  }
  std::string latencies;
  util::PutFixed32(latencies, static_cast<uint32_t>(kLatencyCount));
  for (std::size_t row = 0; row < kLatencyCount; ++row) {
    const LatencyHistogram& histogram = kept.latencies.*kLatencies[row].field;
    latencies += static_cast<char>(row + 1);
    latencies += static_cast<char>(kLatencyBucketCount);
    for (uint64_t bucket : histogram.buckets) util::PutFixed64(latencies, bucket);
    util::PutFixed64(latencies, histogram.sum_nanoseconds);
  }
  rocksdb::WriteBatch batch;
  IDEM_RETURN_IF_ERROR(
      FromRocksDb(batch.Put(meta_, kOwnerCountersKey, counters), "saving the counters"));
  IDEM_RETURN_IF_ERROR(
      FromRocksDb(batch.Put(meta_, kOwnerLatencyKey, latencies), "saving the latency histograms"));
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
