// Every store's export imports back: a property test over the whole range of every field the
// export format carries (docs/format.md, "Export format"). Records drawn at random from a seeded
// generator (keys and byte fields with NUL, bytes that are not UTF-8, multi-byte UTF-8, empty and
// at their limits; every state; tokens 1 to 2^63-1; attempts up to 2^32-1; times
// from 1678 to 2261, the epoch, before 1970 and past 2038; every holder field), and, in a store
// directory, application table values at versions 1 to kLargestVersion with deleted keys among
// them. Put in a store (Store::Import, Store::ImportValues), exported, the export must hold them
// as they were given; imported into a new store with `idem import` and exported again, the two
// exports must be the same bytes. On failure the seed is printed; IDEM_ROUNDTRIP_SEED=N runs
// that seed again.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "export_format.h"
#include "idem/idem.h"
#include "support/backend.h"
#include "support/cli_run.h"
#include "support/file_text.h"
#include "support/test_util.h"

namespace {

using idem_test::ReadFile;
using idem_test::WriteFile;

using idem::Record;
using idem::State;
using idem::TableValue;
using idem_test::CliResult;
using Micros = std::chrono::microseconds;
using TimePoint = Record::TimePoint;

// The largest token a store holds and Store::Import takes (include/idem/store.h).
constexpr uint64_t kLargestToken = (uint64_t{1} << 63) - 1;
// The times the export format writes: RFC 3339 from 1678 to 2261, in microseconds since 1970.
constexpr int64_t kEarliestMicros = -9214560000000000;  // 1678-01-01T00:00:00Z
constexpr int64_t kLatestMicros = 9214646399999999;     // 2261-12-31T23:59:59.999999Z
constexpr int64_t k2038Micros = int64_t{2147483647} * 1000000;
constexpr int kRecords = 150;
constexpr int kValues = 120;

// Draws the fields. Every choice comes from `random_`, seeded: a seed gives the same store.
class Generator {
 public:
  explicit Generator(uint64_t seed) : random_(seed) {}

  uint64_t Below(uint64_t bound) {
    return std::uniform_int_distribution<uint64_t>(0, bound - 1)(random_);
  }
  uint64_t Between(uint64_t low, uint64_t high) {
    return std::uniform_int_distribution<uint64_t>(low, high)(random_);
  }
  bool OneIn(uint64_t n) { return Below(n) == 0; }

  // Bytes of `size`: ASCII text, multi-byte UTF-8, or any bytes (NUL, 0x80-0xff: not UTF-8).
  std::string Bytes(std::size_t size) {
    std::string bytes;
    switch (Below(3)) {
      case 0:
        while (bytes.size() < size) bytes += static_cast<char>(Between(0x20, 0x7e));
        break;
      case 1: {
        static const char* const kPieces[] = {
            "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "a", "\"", "\\", "\n", "\x7f"};
        while (bytes.size() < size) {
          const std::string piece = kPieces[Below(std::size(kPieces))];
          if (bytes.size() + piece.size() > size) {
            bytes += 'x';
          } else {
            bytes += piece;
          }
        }
        break;
      }
      default:
        while (bytes.size() < size) bytes += static_cast<char>(Below(256));
        break;
    }
    return bytes;
  }
  // Mostly short, sometimes empty, sometimes exactly `limit`.
  std::string Field(std::size_t limit, bool may_be_empty = true) {
    if (may_be_empty && OneIn(6)) return "";
    if (OneIn(12)) return Bytes(limit);
    return Bytes(Between(1, std::min<std::size_t>(limit, 40)));
  }
  // Anywhere the format writes, with its edges drawn more often than their share.
  TimePoint Time() {
    switch (Below(8)) {
      case 0:
        return TimePoint();  // the epoch: a time never set
      case 1:
        return FromMicros(kEarliestMicros);
      case 2:
        return FromMicros(kLatestMicros);
      case 3:
        return FromMicros(k2038Micros + static_cast<int64_t>(Between(0, 2000000)) - 1000000);
      case 4:
        return FromMicros(-static_cast<int64_t>(Between(1, 86400000000)));  // just before 1970
      default:
        return FromMicros(static_cast<int64_t>(Between(0, kLatestMicros - kEarliestMicros)) +
                          kEarliestMicros);
    }
  }
  // After `now` (so that the record is live) and no later than the format writes.
  TimePoint Expiry(TimePoint now) {
    const int64_t from = ToMicros(now) + int64_t{3600} * 1000000;
    if (OneIn(4)) return FromMicros(kLatestMicros);
    return FromMicros(static_cast<int64_t>(Between(0, kLatestMicros - from)) + from);
  }
  uint64_t U64() { return Between(0, std::numeric_limits<uint64_t>::max()); }

  static TimePoint FromMicros(int64_t micros) { return TimePoint(Micros(micros)); }
  static int64_t ToMicros(TimePoint time) {
    return std::chrono::duration_cast<Micros>(time.time_since_epoch()).count();
  }

 private:
  std::mt19937_64 random_;
};

Record DrawRecord(Generator& g, std::string key, TimePoint now, const idem::Options& limits) {
  Record r;
  r.key = std::move(key);
  r.type = g.Field(limits.max_label_size);
  r.state = static_cast<State>(g.Below(3));
  // A pending record has no result yet; done, its result; failed, its error.
  if (r.state != State::kPending) r.result = g.Field(limits.max_result_size);
  r.fingerprint = g.Field(limits.max_label_size);
  r.checkpoint = g.Field(limits.max_result_size);
  switch (g.Below(4)) {
    case 0:
      r.token = 1;
      break;
    case 1:
      r.token = kLargestToken;
      break;
    default:
      r.token = g.Between(1, kLargestToken);
  }
  switch (g.Below(4)) {
    case 0:
      r.attempts = 1;
      break;
    case 1:
      r.attempts = std::numeric_limits<uint32_t>::max();
      break;
    default:
      r.attempts = static_cast<uint32_t>(g.Between(1, std::numeric_limits<uint32_t>::max()));
  }
  r.retryable = r.state == State::kFailed && g.OneIn(2);
  // Only a pending record names its holder; every record may have taken over.
  if (r.state == State::kPending) {
    r.holder.pid = static_cast<uint32_t>(g.OneIn(4) ? std::numeric_limits<uint32_t>::max()
                                                    : g.Below(uint64_t{1} << 32));
    r.holder.process_start = g.OneIn(4) ? std::numeric_limits<uint64_t>::max() : g.U64();
    r.holder.pid_scope = g.OneIn(4) ? std::numeric_limits<uint64_t>::max() : g.U64();
    r.holder.request_id = g.OneIn(4) ? std::numeric_limits<uint64_t>::max() : g.U64();
  }
  r.holder.took_over = g.OneIn(2);
  r.created = g.Time();
  r.updated = g.Time();
  r.lease_deadline = g.Time();
  r.expires = g.Expiry(now);
  return r;
}

// Distinct keys: a byte or two (NUL among them), one at the size limit, the rest of any size.
std::vector<std::string> DrawKeys(Generator& g, std::size_t count, std::size_t limit) {
  std::set<std::string> keys = {std::string(1, '\0'), std::string("\xff", 1), g.Bytes(limit)};
  while (keys.size() < count) keys.insert(g.Field(limit, /*may_be_empty=*/false));
  return {keys.begin(), keys.end()};
}

std::vector<std::string> Command(const std::string& command, const idem_test::TestStore& store,
                                 const std::vector<std::string>& args = {}) {
  std::vector<std::string> all = {command};
  const std::vector<std::string> location = store.CommandArgs();
  all.insert(all.end(), location.begin(), location.end());
  all.insert(all.end(), args.begin(), args.end());
  return all;
}

// What an export holds, read back with the import's own parser.
struct Exported {
  std::map<std::string, Record> records;
  std::map<std::pair<std::string, std::string>, TableValue> values;
};

Exported Parse(const std::string& text) {
  Exported exported;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    auto parsed = idem::cli::ParseImportLine(line, std::chrono::system_clock::now());
    EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
    if (!parsed.ok()) continue;
    if (const auto* value = std::get_if<idem::cli::ExportedTableValue>(&*parsed)) {
      exported.values[{value->table, value->key}] =
          TableValue{.value = value->value, .version = value->version};
      continue;
    }
    const auto& record = std::get<Record>(*parsed);
    exported.records.emplace(record.key, record);
  }
  return exported;
}

uint64_t Seed() {
  if (const char* given = std::getenv("IDEM_ROUNDTRIP_SEED"))
    return std::strtoull(given, nullptr, 10);
  return std::random_device()() * uint64_t{0x100000000} + std::random_device()();
}

class ExportRoundTrip : public idem_test::OnEachBackend {};

TEST_P(ExportRoundTrip, ImportsBackToTheSameBytes) {
  const bool tables = GetParam() == idem_test::Backend::kRocksDb;  // PostgreSQL keeps none
  for (int round = 0; round < idem_test::Scaled(3, 1); ++round) {
    const uint64_t seed = Seed();
    SCOPED_TRACE("seed " + std::to_string(seed) +
                 " (run it again with IDEM_ROUNDTRIP_SEED=" + std::to_string(seed) + ")");
    Generator g(seed);
    const idem::Options limits;
    const TimePoint now = std::chrono::system_clock::now();

    std::vector<Record> records;
    for (std::string& key : DrawKeys(g, kRecords, limits.max_key_size)) {
      records.push_back(DrawRecord(g, std::move(key), now, limits));
    }
    const idem_test::TestStore source(GetParam());
    // The table values first: the records that delete some of them take tokens the store hands
    // out, and after the records' import (a token may be 2^63-1) the store may have none left.
    std::map<std::pair<std::string, std::string>, TableValue> values;
    if (tables) {
      auto store = source.Open();
      ASSERT_NE(store, nullptr);
      for (const std::string table : {"t", "a-Z.0_9"}) {
        std::vector<std::pair<std::string, TableValue>> written;
        for (std::string& key : DrawKeys(g, kValues / 2, limits.max_key_size)) {
          TableValue value{.value = g.Field(limits.max_result_size)};
          switch (g.Below(4)) {
            case 0:
              value.version = 1;
              break;
            case 1:
              value.version = TableValue::kLargestVersion;
              break;
            default:
              value.version = g.Between(1, TableValue::kLargestVersion - 1);
          }
          written.emplace_back(std::move(key), std::move(value));
        }
        auto imported = store->ImportValues(table, written);
        ASSERT_TRUE(imported.ok()) << imported.status().ToString();
        // Every fourth key below the largest version deleted: it keeps a version, no value, and
        // no export shows it.
        idem::WriteSet deletes;
        for (std::size_t i = 0; i < written.size(); ++i) {
          if (i % 4 == 0 && written[i].second.version < TableValue::kLargestVersion) {
            deletes.Delete(table, written[i].first);
          } else {
            values[{table, written[i].first}] = written[i].second;
          }
        }
        auto claim = store->Begin(std::string("deleter ") + table);
        ASSERT_TRUE(claim.ok()) << claim.status().ToString();
        ASSERT_TRUE(store->Complete(claim->record.key, claim->token, "deleted", deletes).ok());
      }
    }

    {
      auto store = source.Open();
      ASSERT_NE(store, nullptr);
      auto imported = store->Import(records);
      ASSERT_TRUE(imported.ok()) << imported.status().ToString();
      for (std::size_t i = 0; i < records.size(); ++i) {
        ASSERT_EQ((*imported)[i], idem::ImportOutcome::kImported) << "record " << i;
      }
    }
    const idem_test::TempDir files;
    const std::string first = files.Sub("first.jsonl");
    const CliResult exported =
        idem_test::RunCliOn(Command("export", source, {"--output", first}), nullptr);
    ASSERT_EQ(exported.code, 0) << exported.err;
    const std::string text = ReadFile(first);

    // The export holds every field as it was given.
    const Exported parsed = Parse(text);
    std::size_t matched = 0;
    for (const Record& record : records) {
      const auto it = parsed.records.find(record.key);
      ASSERT_NE(it, parsed.records.end()) << "record missing from the export";
      EXPECT_EQ(it->second, record) << idem::cli::RecordToExportJson(record) << "\nexported as\n"
                                    << idem::cli::RecordToExportJson(it->second);
      matched += it->second == record ? 1 : 0;
    }
    EXPECT_EQ(matched, records.size());
    EXPECT_EQ(parsed.records.size(), records.size() + (tables ? 2 : 0));  // and the deleters
    EXPECT_EQ(parsed.values.size(), values.size());
    for (const auto& [where, value] : values) {
      const auto it = parsed.values.find(where);
      ASSERT_NE(it, parsed.values.end()) << "value missing from the export, table " << where.first;
      EXPECT_EQ(it->second, value) << "table " << where.first;
    }

    // Imported into a new store and exported again: the same bytes.
    const idem_test::TestStore copy(GetParam());
    const CliResult imported =
        idem_test::RunCliOn(Command("import", copy, {first, "--create"}), nullptr);
    ASSERT_EQ(imported.code, 0) << imported.err;
    const CliResult again = idem_test::RunCliOn(Command("export", copy), nullptr);
    ASSERT_EQ(again.code, 0) << again.err;
    EXPECT_TRUE(again.out == text) << "the second export differs from the first";
    if (again.out != text) {
      WriteFile(files.Sub("second.jsonl"), again.out);
      std::istringstream a(text), b(again.out);
      std::string line_a, line_b;
      for (int line = 1; std::getline(a, line_a) && std::getline(b, line_b); ++line) {
        if (line_a != line_b) {
          ADD_FAILURE() << "line " << line << " first:\n"
                        << line_a.substr(0, 2000) << "\nsecond:\n"
                        << line_b.substr(0, 2000);
          break;
        }
      }
    }
  }
}

IDEM_ON_EACH_BACKEND(ExportRoundTrip);

}  // namespace
