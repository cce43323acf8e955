// The bodies of the owner's answers (protocol_answers.h): a claim, a record, pages of a scan, table
// values, counters, stats, a job's progress. The requests and the frames are in protocol.cc.

#include "sharing/protocol_answers.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sharing/wire_codec.h"

namespace idem::sharing {

std::string EncodeClaim(const Claim& claim) {
  Writer w;
  w.U8(static_cast<uint8_t>(claim.outcome));
  w.U64(claim.token);
  w.U8(claim.took_over ? 1 : 0);
  w.Millis(claim.retry_after);
  w.RecordFields(claim.record);
  return std::move(w.buffer());
}

Result<Claim> DecodeClaim(std::string_view body) {
  Reader r(body);
  bool bad = false;
  Claim claim;
  claim.outcome = EnumField(r, Outcome::kMismatch, bad);
  claim.token = r.U64();
  const uint8_t took_over = r.U8();
  claim.retry_after = r.Millis();
  claim.record = r.RecordFields();
  if (!r.done() || bad || took_over > 1) return Status::Unavailable("malformed claim from owner");
  claim.took_over = took_over == 1;
  return claim;
}

std::string EncodeOptionalRecord(const std::optional<Record>& record) {
  Writer w;
  w.U8(record ? 1 : 0);
  if (record) w.RecordFields(*record);
  return std::move(w.buffer());
}

Result<std::optional<Record>> DecodeOptionalRecord(std::string_view body) {
  Reader r(body);
  const uint8_t present = r.U8();
  std::optional<Record> record;
  if (present == 1) record = r.RecordFields();
  if (!r.done() || present > 1) return Status::Unavailable("malformed record from owner");
  return record;
}

std::string EncodeScanPage(const engine::ScanPage& page) {
  Writer w;
  w.U32(static_cast<uint32_t>(page.records.size()));
  for (const Record& record : page.records) w.RecordFields(record);
  w.U8(page.more ? 1 : 0);
  return std::move(w.buffer());
}

Result<engine::ScanPage> DecodeScanPage(std::string_view body) {
  Reader r(body);
  engine::ScanPage page;
  const uint32_t count = r.U32();
  for (uint32_t i = 0; i < count && !r.failed(); ++i) page.records.push_back(r.RecordFields());
  const uint8_t more = r.U8();
  if (!r.done() || more > 1) return Status::Unavailable("malformed scan page from owner");
  page.more = more == 1;
  return page;
}

std::string EncodeTableValue(const TableValue& value) {
  Writer w;
  w.U8(value.value ? 1 : 0);
  if (value.value) w.Bytes(*value.value);
  w.U64(value.version);
  return std::move(w.buffer());
}

namespace {
TableValue ReadTableValue(Reader& r, bool& bad) {
  TableValue value;
  const uint8_t present = r.U8();
  if (present == 1) value.value = std::string(r.Bytes());
  value.version = r.U64();
  if (present > 1) bad = true;
  return value;
}
}  // namespace

Result<TableValue> DecodeTableValue(std::string_view body) {
  Reader r(body);
  bool bad = false;
  TableValue value = ReadTableValue(r, bad);
  if (!r.done() || bad) return Status::Unavailable("malformed table value from owner");
  return value;
}

std::string EncodeTablePage(const engine::TablePage& page) {
  Writer w;
  w.U32(static_cast<uint32_t>(page.values.size()));
  for (const auto& [key, value] : page.values) {
    w.Bytes(key);
    w.buffer() += EncodeTableValue(value);
  }
  w.U8(page.more ? 1 : 0);
  return std::move(w.buffer());
}

Result<engine::TablePage> DecodeTablePage(std::string_view body) {
  Reader r(body);
  bool bad = false;
  engine::TablePage page;
  const uint32_t count = r.U32();
  for (uint32_t i = 0; i < count && !r.failed(); ++i) {
    std::string key(r.Bytes());
    page.values.emplace_back(std::move(key), ReadTableValue(r, bad));
  }
  const uint8_t more = r.U8();
  if (!r.done() || bad || more > 1) return Status::Unavailable("malformed table page from owner");
  page.more = more == 1;
  return page;
}

std::string EncodeTableNames(const std::vector<std::string>& names) {
  Writer w;
  w.U32(static_cast<uint32_t>(names.size()));
  for (const std::string& name : names) w.Bytes(name);
  return std::move(w.buffer());
}

std::string EncodeGranted(bool granted) {
  Writer w;
  w.U8(granted ? 1 : 0);
  return std::move(w.buffer());
}

Result<bool> DecodeGranted(std::string_view body) {
  Reader r(body);
  const uint8_t granted = r.U8();
  if (!r.done() || granted > 1)
    return Status::Unavailable("malformed reservation answer from owner");
  return granted == 1;
}

std::string EncodeViewId(uint64_t view) {
  Writer w;
  w.U64(view);
  return std::move(w.buffer());
}

Result<uint64_t> DecodeViewId(std::string_view body) {
  Reader r(body);
  const uint64_t view = r.U64();
  if (!r.done() || view == engine::Backend::kLatest) {
    return Status::Unavailable("malformed read view id from owner");
  }
  return view;
}

Result<std::vector<std::string>> DecodeTableNames(std::string_view body) {
  Reader r(body);
  std::vector<std::string> names;
  const uint32_t count = r.U32();
  for (uint32_t i = 0; i < count && !r.failed(); ++i) names.emplace_back(r.Bytes());
  if (!r.done()) return Status::Unavailable("malformed table names from owner");
  return names;
}

std::string EncodeCounters(const OwnerCounters& c) {
  Writer w;
  w.CounterFields(c.counters);
  w.Time(c.since);
  // The histograms in kLatencies' order, each its buckets then its sum: the exact version match
  // makes both ends agree on how many of each.
  for (const LatencyInfo& latency : kLatencies) {
    const LatencyHistogram& histogram = c.latencies.*latency.field;
    for (uint64_t bucket : histogram.buckets) w.U64(bucket);
    w.U64(histogram.sum_nanoseconds);
  }
  return std::move(w.buffer());
}

Result<OwnerCounters> DecodeCounters(std::string_view body) {
  Reader r(body);
  OwnerCounters c;
  c.counters = r.CounterFields();
  c.since = r.Time();
  for (const LatencyInfo& latency : kLatencies) {
    LatencyHistogram& histogram = c.latencies.*latency.field;
    for (uint64_t& bucket : histogram.buckets) bucket = r.U64();
    histogram.sum_nanoseconds = r.U64();
  }
  if (!r.done()) return Status::Unavailable("malformed counters from owner");
  return c;
}

namespace {

void WriteCountMap(Writer& w, const std::map<std::string, uint64_t, std::less<>>& counts) {
  w.U32(static_cast<uint32_t>(counts.size()));
  for (const auto& [name, count] : counts) {
    w.Bytes(name);
    w.U64(count);
  }
}

// A map written by WriteCountMap: its names in ascending order, each once (one encoding).
bool ReadCountMap(Reader& r, std::map<std::string, uint64_t, std::less<>>& counts) {
  const uint32_t size = r.U32();
  for (uint32_t i = 0; i < size && !r.failed(); ++i) {
    const std::string_view name = r.Bytes();
    const uint64_t count = r.U64();
    if (!counts.empty() && name <= counts.rbegin()->first) return false;
    counts.emplace_hint(counts.end(), name, count);
  }
  return !r.failed();
}

}  // namespace

std::string EncodeStats(const engine::Backend::Stats& answer) {
  Writer w;
  const StoreStats& stats = answer.stats;
  w.Bool(answer.counted);
  if (answer.counted) {
    w.U64(stats.records);
    WriteCountMap(w, stats.by_state);
    WriteCountMap(w, stats.by_type);
    w.Bool(stats.oldest_pending.has_value());
    if (stats.oldest_pending) {
      w.Bytes(stats.oldest_pending->key);
      w.Time(stats.oldest_pending->created);
    }
    w.Time(stats.at);
    w.Millis(stats.precision);
  }
  w.Bool(stats.engine.has_value());
  if (stats.engine) {
    w.Bool(stats.engine->writes_stopped);
    w.U64(stats.engine->pending_compaction_bytes);
    w.U64(stats.engine->live_table_bytes);
    w.U64(stats.engine->total_table_bytes);
    w.U64(stats.engine->damaged_table_files);
    w.Bytes(stats.engine->damage);
  }
  return std::move(w.buffer());
}

Result<engine::Backend::Stats> DecodeStats(std::string_view body) {
  Reader r(body);
  engine::Backend::Stats answer;
  StoreStats& stats = answer.stats;
  const auto flag = [&r](bool& bad) {
    const uint8_t value = r.U8();
    if (value > 1) bad = true;
    return value == 1;
  };
  bool bad = false;
  answer.counted = flag(bad);
  if (answer.counted) {
    stats.records = r.U64();
    if (!ReadCountMap(r, stats.by_state) || !ReadCountMap(r, stats.by_type)) bad = true;
    if (flag(bad)) {
      Record& oldest = stats.oldest_pending.emplace();
      oldest.key = r.Bytes();
      oldest.created = r.Time();
    }
    stats.at = r.Time();
    stats.precision = r.Millis();
    if (stats.precision.count() < 0) bad = true;
  }
  if (flag(bad)) {
    EngineHealth& engine = stats.engine.emplace();
    engine.writes_stopped = flag(bad);
    engine.pending_compaction_bytes = r.U64();
    engine.live_table_bytes = r.U64();
    engine.total_table_bytes = r.U64();
    engine.damaged_table_files = r.U64();
    engine.damage = r.Bytes();
  }
  if (bad || !r.done()) return Status::Unavailable("malformed stats from owner");
  return answer;
}

std::string EncodePurgeProgress(const PurgeProgress& progress) {
  Writer w;
  w.U64(progress.count);
  w.U8(progress.done ? 1 : 0);
  w.U8(progress.total ? 1 : 0);
  if (progress.total) w.U64(*progress.total);
  return std::move(w.buffer());
}

Result<PurgeProgress> DecodePurgeProgress(std::string_view body) {
  Reader r(body);
  PurgeProgress progress;
  progress.count = r.U64();
  const uint8_t done = r.U8();
  const uint8_t has_total = r.U8();
  if (has_total == 1) progress.total = r.U64();
  if (!r.done() || done > 1 || has_total > 1) {
    return Status::Unavailable("malformed purge progress from owner");
  }
  progress.done = done == 1;
  return progress;
}

}  // namespace idem::sharing
