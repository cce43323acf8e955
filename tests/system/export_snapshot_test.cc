// `idem export` of a store in use is one moment of it (Store::ScanSnapshot): run while writers
// Complete records with table writes (tests/support/transfer_load.h), in another process that owns
// the store (the export reads through its socket) and in the export's own process; and, on every
// backend, while writers complete records in a chain (each after the one before it is done), so
// that a moment never holds a later one done without the earlier.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "export_format.h"
#include "idem/idem.h"
#include "support/backend.h"
#include "support/cli_run.h"
#include "support/file_text.h"
#include "support/sharing_worker.h"
#include "support/test_util.h"
#include "support/transfer_load.h"

namespace {

using idem_test::ReadFile;

using idem::Record;
using idem::State;
using idem_test::CliResult;
using idem_test::TempDir;
using namespace std::chrono_literals;

CliResult RunCli(const std::vector<std::string>& args) {
  return idem_test::RunCliOn(args, nullptr);
}

// An export's lines: its records by key, and its table values by table and key.
struct Exported {
  std::map<std::string, Record> records;
  std::map<std::string, std::map<std::string, std::string>> tables;
};

Exported Parse(const std::string& text) {
  Exported exported;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    auto parsed = idem::cli::ParseImportLine(line, std::chrono::system_clock::now());
    EXPECT_TRUE(parsed.ok()) << parsed.status().ToString() << ": " << line;
    if (!parsed.ok()) continue;
    if (const auto* value = std::get_if<idem::cli::ExportedTableValue>(&*parsed)) {
      exported.tables[value->table][value->key] = value->value;
      continue;
    }
    const auto& record = std::get<Record>(*parsed);
    exported.records.emplace(record.key, record);
  }
  return exported;
}

// What a moment of a store under transfer_load.h holds: each done transfer record has its note
// in kTransfers and each note a done record; the balances add up.
void ExpectTransfersAtOneMoment(const Exported& exported) {
  std::set<std::string> done;
  for (const auto& [key, record] : exported.records) {
    if (key.starts_with(idem_test::kTransferPrefix) && record.state == State::kDone) {
      done.insert(key);
    }
  }
  std::set<std::string> noted;
  const auto notes = exported.tables.find(idem_test::kTransfers);
  if (notes != exported.tables.end()) {
    for (const auto& [key, from] : notes->second) noted.insert(key);
  }
  std::vector<std::string> without_note, without_record;
  std::set_difference(done.begin(), done.end(), noted.begin(), noted.end(),
                      std::back_inserter(without_note));
  std::set_difference(noted.begin(), noted.end(), done.begin(), done.end(),
                      std::back_inserter(without_record));
  EXPECT_TRUE(without_note.empty())
      << without_note.size() << " done transfers without their table writes, first "
      << without_note.front();
  EXPECT_TRUE(without_record.empty())
      << without_record.size() << " transfers' table writes without their done record, first "
      << without_record.front();
  EXPECT_GT(done.size(), 0u);

  int64_t total = 0;
  int accounts = 0;
  const auto balances = exported.tables.find(idem_test::kBalances);
  ASSERT_NE(balances, exported.tables.end()) << "no balances exported";
  for (const auto& [account, balance] : balances->second) {
    total += std::stoll(balance);
    ++accounts;
  }
  EXPECT_EQ(accounts, idem_test::kAccounts);
  EXPECT_EQ(total, idem_test::kAccounts * idem_test::kOpeningBalance) << "money was made or lost";
}

uint64_t CountRecords(idem::Store& store, std::string_view prefix) {
  uint64_t count = 0;
  const idem::Status scanned = store.Scan({.prefix = prefix}, [&](const Record&) {
    ++count;
    return true;
  });
  EXPECT_TRUE(scanned.ok()) << scanned.ToString();
  return count;
}

// The writers' pace: the transfers the exports need to show at full speed, then about 600 a
// second (3 threads), for 5 seconds or more.
idem_test::Pace ExportPace() {
  const auto full_speed = static_cast<uint64_t>(idem_test::Scaled(3000, 500));
  return {.full_speed = full_speed, .pause = 5ms, .most = full_speed + 3000};
}

// Exports `store` (a directory) three times while `reader` sees transfers being made, checks
// each export is one moment, and that transfers were made while at least one ran.
void ExportWhileTransfersRun(const std::string& store, idem::Store& reader, const TempDir& dir) {
  ASSERT_TRUE(idem_test::WaitFor(
      [&] { return CountRecords(reader, idem_test::kTransferPrefix) >= ExportPace().full_speed; },
      120s))
      << "the writers made too few transfers";
  bool overlapped = false;
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("export " + std::to_string(round));
    const std::string file = dir.Sub("export-" + std::to_string(round) + ".jsonl");
    const uint64_t before = CountRecords(reader, idem_test::kTransferPrefix);
    const CliResult exported = RunCli({"export", store, "--output", file});
    const uint64_t after = CountRecords(reader, idem_test::kTransferPrefix);
    ASSERT_EQ(exported.code, 0) << exported.err;
    overlapped |= after > before;
    ExpectTransfersAtOneMoment(Parse(ReadFile(file)));
  }
  EXPECT_TRUE(overlapped) << "no transfer was made while an export ran: the test showed nothing";
}

// The owner is another process (sharing_worker transfer): the export, a read-only handle, reads
// through the owner's socket in pages.
TEST(LiveExport, ThroughTheOwnersSocketIsOneMoment) {
  TempDir dir;
  const std::string store = dir.StorePath();
  const idem_test::Pace pace = ExportPace();
  idem_test::Worker owner({"transfer", store, "3", std::to_string(pace.full_speed),
                           std::to_string(pace.pause.count()), std::to_string(pace.most)});
  ASSERT_EQ(owner.ReadLine(60s), "ready");
  idem::Options options;
  options.read_only = true;
  auto reader = idem::Store::Open(store, options);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  ASSERT_TRUE((*reader)->GetOwnerCounters().ok());  // a client of the worker, not a file reader
  ASSERT_TRUE((*reader)->GetOwnerCounters()->live);
  ExportWhileTransfersRun(store, **reader, dir);
  EXPECT_EQ(owner.ReadLine(0ms), "") << "the owner's transfers failed";
}

// The export runs in the process that owns the store, beside its writers.
TEST(LiveExport, InTheOwnersProcessIsOneMoment) {
  TempDir dir;
  const std::string store = dir.StorePath();
  idem::Options options;
  options.durability = idem::Durability::kBuffered;
  auto owner = idem::Store::Open(store, options);
  ASSERT_TRUE(owner.ok()) << owner.status().ToString();
  ASSERT_TRUE(idem_test::OpenAccounts(**owner).ok());
  {
    idem_test::TransferLoad load(**owner, "local", 3, ExportPace());
    ExportWhileTransfersRun(store, **owner, dir);
    EXPECT_FALSE(load.failed()) << load.error();
  }
}

// A snapshot's view is released with the export: after many exports, none is left open (the
// owner allows 16 at once).
TEST(LiveExport, ReleasesItsSnapshot) {
  TempDir dir;
  auto store = idem_test::OpenStore(dir.StorePath());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Execute("k", [](idem::Attempt&) { return std::string("r"); }).ok());
  for (int i = 0; i < 40; ++i) {
    int seen = 0;
    const idem::Status scanned = store->ScanSnapshot(
        [&](const Record&) {
          ++seen;
          return true;
        },
        [](std::string_view, std::string_view, const idem::TableValue&) { return true; });
    ASSERT_TRUE(scanned.ok()) << i << ": " << scanned.ToString();
    EXPECT_EQ(seen, 1);
  }
}

// An exporter that dies mid-export pins nothing: the owner ends its snapshot with its connection.
// 16 clients stalled in a snapshot use up what the owner allows at once; once they are killed,
// the owner takes new ones.
TEST(LiveExport, OfAnExporterThatDiedIsReleasedWithItsConnection) {
  TempDir dir;
  const std::string store = dir.StorePath();
  auto owner = idem_test::OpenStore(store);
  ASSERT_NE(owner, nullptr);
  ASSERT_TRUE(owner->Execute("k", [](idem::Attempt&) { return std::string("r"); }).ok());
  const auto scan_snapshot = [&] {
    return owner->ScanSnapshot(
        [](const Record&) { return true; },
        [](std::string_view, std::string_view, const idem::TableValue&) { return true; });
  };
  std::vector<std::unique_ptr<idem_test::Worker>> exporters;
  for (int i = 0; i < 16; ++i) {
    exporters.push_back(
        std::make_unique<idem_test::Worker>(std::vector<std::string>{"snapshot", store}));
    ASSERT_EQ(exporters.back()->ReadLine(), "in snapshot") << i;
  }
  const idem::Status refused = scan_snapshot();
  EXPECT_EQ(refused.code(), idem::Status::Code::kBusy) << refused.ToString();
  for (auto& exporter : exporters) exporter->Kill();
  EXPECT_TRUE(idem_test::WaitFor([&] { return scan_snapshot().ok(); }, 10s))
      << scan_snapshot().ToString();
}

// ---- A chain of records, on every backend ------------------------------------------------------

// Writer w completes "a-w-i", then "z-w-i", then "a-w-(i+1)"...: each only after the one before is
// done. An export reads every "a-" key before any "z-" key, with filler records between them; a
// moment never holds "z-w-i" done without "a-w-i" done, nor "a-w-(i+1)" without "z-w-i" done.
class ChainExport : public idem_test::OnEachBackend {};

std::string ChainKey(char region, int writer, int step) {
  return std::string(1, region) + "-" + std::to_string(writer) + "-" + std::to_string(step);
}

void ExpectChainAtOneMoment(const Exported& exported, int writers) {
  const auto done = [&](const std::string& key) {
    const auto it = exported.records.find(key);
    return it != exported.records.end() && it->second.state == State::kDone;
  };
  std::vector<std::string> broken;  // what no moment holds
  int checked = 0;
  for (int w = 0; w < writers; ++w) {
    for (int i = 0; exported.records.contains(ChainKey('a', w, i)); ++i, ++checked) {
      if (done(ChainKey('z', w, i)) && !done(ChainKey('a', w, i))) {
        broken.push_back(ChainKey('z', w, i) + " done, " + ChainKey('a', w, i) + " not");
      }
      if (exported.records.contains(ChainKey('a', w, i + 1)) && !done(ChainKey('z', w, i))) {
        broken.push_back(ChainKey('a', w, i + 1) + " begun, " + ChainKey('z', w, i) + " not done");
      }
    }
  }
  for (const auto& [key, record] : exported.records) {
    if (!key.starts_with("z-")) continue;
    const std::string a_key = "a-" + key.substr(2);
    if (!exported.records.contains(a_key)) broken.push_back(key + " without " + a_key);
  }
  EXPECT_TRUE(broken.empty()) << broken.size() << " records out of order, first: " << broken[0];
  EXPECT_GT(checked, 0);
}

TEST_P(ChainExport, IsOneMomentWhileWritersComplete) {
  const idem_test::TestStore store(GetParam());
  idem::Options options = idem_test::TestOptions();
  options.durability = idem::Durability::kBuffered;
  auto handle = store.Open(options);
  ASSERT_NE(handle, nullptr);
  const bool local = GetParam() == idem_test::Backend::kRocksDb;
  // Pages of the scan between the two regions: 1024 records a page in a store directory, 256 in
  // PostgreSQL.
  const int filler = local ? 4000 : 1000;
  for (int i = 0; i < filler; ++i) {
    ASSERT_TRUE(
        handle->Execute("m-" + std::to_string(i), [](idem::Attempt&) { return std::string("f"); })
            .ok());
  }
  constexpr int kWriters = 3;
  constexpr int kMostSteps = 2000;  // a writer's; 2 seconds or more
  std::atomic<bool> stop{false};
  std::atomic<int> steps{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; !stop.load() && i < kMostSteps; ++i) {
        for (const char region : {'a', 'z'}) {
          const auto done = handle->Execute(ChainKey(region, w, i),
                                            [](idem::Attempt&) { return std::string("c"); });
          ASSERT_TRUE(done.ok()) << done.status().ToString();
        }
        steps.fetch_add(1);
        // Paced and bounded: a store directory completes a step in microseconds, and an export
        // takes longer the more the store holds, so writers as fast as the export would make
        // each of the three exports longer than the one before.
        if (local) std::this_thread::sleep_for(1ms);
      }
    });
  }
  // Stopped and joined however the test ends (an ASSERT below returns early).
  struct Joiner {
    std::atomic<bool>& stop;
    std::vector<std::thread>& threads;
    ~Joiner() {
      stop.store(true);
      for (std::thread& thread : threads) thread.join();
    }
  } joiner{stop, writers};
  ASSERT_TRUE(idem_test::WaitFor([&] { return steps.load() >= 20; }, 60s));
  bool overlapped = false;
  for (int round = 0; round < 3; ++round) {
    const int before = steps.load();
    std::vector<std::string> args = {"export"};
    const std::vector<std::string> location = store.CommandArgs();
    args.insert(args.end(), location.begin(), location.end());
    const CliResult exported = RunCli(args);
    overlapped |= steps.load() > before;
    ASSERT_EQ(exported.code, 0) << exported.err;
    ExpectChainAtOneMoment(Parse(exported.out), kWriters);
  }
  EXPECT_TRUE(overlapped) << "no record was completed while an export ran";
}

IDEM_ON_EACH_BACKEND(ChainExport);

}  // namespace
