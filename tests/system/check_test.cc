// Store::Check and `idem check`: a clean store is clean on every backend; in a store directory
// each kind of damage made behind idem's back (a table file's bytes, a record's bytes, the expiry
// index against the records, a table's value, the token ceiling) is a finding that names it; a
// store that another process owns is checked through a backup its owner takes.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "idem/idem.h"
#include "storage/rocksdb/layout.h"
#include "support/cli_run.h"
#include "support/damage.h"
#include "support/owner_process.h"
#include "support/raw_db.h"
#include "support/test_util.h"

namespace {

namespace fs = std::filesystem;
using idem::CheckFinding;
using idem::CheckReport;
using idem_test::Backend;
using idem_test::ClockedStore;
using idem_test::DamageLargestTableFile;
using idem_test::RunCliOn;
using idem_test::TempDir;
using idem_test::TestOptions;
using namespace std::chrono_literals;

// Writes `count` done records key-0... (results of 200 bytes) and a value of table "accounts".
void Fill(idem::Store& store, int count) {
  for (int i = 0; i < count; ++i) {
    const std::string key = "key-" + std::to_string(i);
    ASSERT_OK_AND_ASSIGN(idem::Claim claim, store.Begin(key));
    ASSERT_OK(store.Complete(key, claim.token, std::string(200, 'r')));
  }
}

// Store::Check of the store directory `path` opened read-only (no process owns it).
CheckReport CheckedFiles(const std::string& path) {
  idem::Options options = TestOptions();
  options.read_only = true;
  auto store = idem::Store::Open(path, options);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return {};
  idem::Result<CheckReport> report = (*store)->Check();
  EXPECT_TRUE(report.ok()) << report.status().ToString();
  return report.ok() ? *report : CheckReport{};
}

// The findings of `report` in part `part`.
std::vector<CheckFinding> In(const CheckReport& report, const std::string& part) {
  std::vector<CheckFinding> found;
  std::copy_if(report.findings.begin(), report.findings.end(), std::back_inserter(found),
               [&](const CheckFinding& finding) { return finding.part == part; });
  return found;
}

std::string Findings(const CheckReport& report) {
  std::string text;
  for (const CheckFinding& f : report.findings) {
    text += f.part + " " + f.subject + ": " + f.problem + "\n";
  }
  return text;
}

class Check : public idem_test::OnEachBackend {};

TEST_P(Check, AStoreWrittenOnlyByIdemIsClean) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  Fill(*s.store, 50);
  ASSERT_OK_AND_ASSIGN(idem::Claim pending, s.store->Begin("pending"));
  ASSERT_OK_AND_ASSIGN(idem::Claim failed, s.store->Begin("failed"));
  ASSERT_OK(s.store->Fail("failed", failed.token, "card declined", idem::Failure::kTerminal));
  ASSERT_OK_AND_ASSIGN(const CheckReport report, s.store->Check());
  EXPECT_TRUE(report.clean()) << Findings(report);
  EXPECT_EQ(report.records, 52u);
  if (GetParam() == Backend::kRocksDb) {
    EXPECT_EQ(report.index_entries, 52u);
  }
  static_cast<void>(pending);
}

TEST_P(Check, IsCleanWhileWritersChangeTheStore) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  Fill(*s.store, 100);
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; !stop.load(); ++i) {
        const std::string key = fmt::format("w{}-{}", w, i % 300);
        idem::Result<idem::Claim> claim = s.store->Begin(key);
        if (claim.ok() && claim->outcome == idem::Outcome::kAcquired) {
          EXPECT_OK(s.store->Complete(key, claim->token, "done"));
        } else if (claim.ok() && i % 3 == 0) {
          EXPECT_OK(s.store->Forget(key));
        }
      }
    });
  }
  for (int round = 0; round < 5; ++round) {
    ASSERT_OK_AND_ASSIGN(const CheckReport report, s.store->Check());
    EXPECT_TRUE(report.clean()) << Findings(report);
    EXPECT_GE(report.records, 100u);
  }
  stop = true;
  for (std::thread& writer : writers) writer.join();
}

IDEM_ON_EACH_BACKEND(Check);

TEST(CheckFiles, ATableFileWhoseBytesChangedIsNamed) {
  TempDir dir;
  const std::string backup = dir.Sub("backup");
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath());
    Fill(*store, 2000);
    ASSERT_OK(store->Backup(backup));  // flushes: the copy is table files
  }
  const CheckReport before = CheckedFiles(backup);
  EXPECT_TRUE(before.clean()) << Findings(before);
  ASSERT_GT(before.files, 0u);
  EXPECT_EQ(before.records, 2000u);

  const fs::path largest = DamageLargestTableFile(backup);
  ASSERT_FALSE(largest.empty());
  const CheckReport after = CheckedFiles(backup);
  const std::vector<CheckFinding> files = In(after, "file");
  ASSERT_EQ(files.size(), 1u) << Findings(after);
  EXPECT_EQ(files[0].subject, largest.filename().string());
  EXPECT_NE(files[0].problem.find("Corruption"), std::string::npos) << files[0].problem;
  EXPECT_EQ(after.files, before.files);
}

TEST(CheckFiles, ARecordThatDoesNotDecodeIsNamedAndTheRestIsChecked) {
  TempDir dir;
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath());
    Fill(*store, 10);
  }
  idem_test::PutRaw(dir.StorePath(), "default", "key-5", std::string("\x04garbage", 8));
  const CheckReport report = CheckedFiles(dir.StorePath());
  ASSERT_EQ(report.findings.size(), 1u) << Findings(report);
  EXPECT_EQ(report.findings[0].part, "record");
  EXPECT_EQ(report.findings[0].subject, "key-5");
  EXPECT_EQ(report.records, 10u);
}

TEST(CheckFiles, TheExpiryIndexIsMatchedWithTheRecords) {
  TempDir dir;
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath());
    Fill(*store, 10);
  }
  const int64_t far = int64_t{4102444800} * 1'000'000;  // 2100-01-01
  idem_test::WithRawDb(dir.StorePath(), "by_expiry", [&](rocksdb::DB& db, auto* index) {
    // key-3 loses its entry; key-4 gets a second one of another expiry; a key with no record
    // gets one.
    std::unique_ptr<rocksdb::Iterator> it(db.NewIterator({}, index));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      if (it->key().ToString().substr(8) == "key-3") {
        EXPECT_TRUE(db.Delete({}, index, it->key()).ok());
      }
    }
    EXPECT_TRUE(db.Put({}, index, idem::storage::ExpiryIndexKey(far, "key-4"), "").ok());
    EXPECT_TRUE(db.Put({}, index, idem::storage::ExpiryIndexKey(far, "ghost"), "").ok());
    // An expiry no date can show (a damaged entry's), said as a number.
    const int64_t never = std::numeric_limits<int64_t>::max();
    EXPECT_TRUE(db.Put({}, index, idem::storage::ExpiryIndexKey(never, "ghost-far"), "").ok());
  });
  const CheckReport report = CheckedFiles(dir.StorePath());
  const std::vector<CheckFinding> index = In(report, "index");
  ASSERT_EQ(index.size(), 4u) << Findings(report);
  EXPECT_EQ(report.findings.size(), 4u) << Findings(report);
  EXPECT_EQ(index[0].subject, "key-3");
  EXPECT_NE(index[0].problem.find("no expiry index entry"), std::string::npos);
  EXPECT_EQ(index[1].subject, "ghost");
  EXPECT_NE(index[1].problem.find("names no record"), std::string::npos);
  EXPECT_EQ(index[2].subject, "key-4");
  EXPECT_NE(index[2].problem.find("delete it early"), std::string::npos);
  EXPECT_EQ(index[3].subject, "ghost-far");
  EXPECT_NE(index[3].problem.find(" us since 1970 names no record"), std::string::npos)
      << index[3].problem;
  EXPECT_EQ(report.index_entries, 12u);
}

TEST(CheckFiles, ATableValueThatDoesNotDecodeIsNamed) {
  TempDir dir;
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath());
    ASSERT_OK_AND_ASSIGN(idem::Claim claim, store->Begin("order-1"));
    idem::WriteSet writes;
    writes.Put("accounts", "alice", "100");
    writes.Put("accounts", "bob", "50");
    ASSERT_OK(store->Complete("order-1", claim.token, "ok", writes));
  }
  idem_test::PutRaw(dir.StorePath(), "app.accounts", "bob", "\x07");
  const CheckReport report = CheckedFiles(dir.StorePath());
  ASSERT_EQ(report.findings.size(), 1u) << Findings(report);
  EXPECT_EQ(report.findings[0].part, "table");
  EXPECT_EQ(report.findings[0].subject, "bob");
  EXPECT_NE(report.findings[0].problem.find("accounts"), std::string::npos);
  EXPECT_EQ(report.table_values, 2u);
}

TEST(CheckFiles, ATokenAtOrAboveTheCeilingIsNamed) {
  TempDir dir;
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath());
    Fill(*store, 3);
  }
  const std::string one("\x01\0\0\0\0\0\0\0", 8);  // little-endian 1: below every token
  idem_test::PutRaw(dir.StorePath(), "meta", "token_ceiling", one);
  const CheckReport report = CheckedFiles(dir.StorePath());
  ASSERT_EQ(report.findings.size(), 1u) << Findings(report);
  EXPECT_EQ(report.findings[0].part, "tokens");
  EXPECT_NE(report.findings[0].problem.find("token ceiling 1"), std::string::npos);
}

TEST(CheckCommand, SaysCleanOrListsTheProblemsWithItsExitCode) {
  TempDir dir;
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath());
    Fill(*store, 5);
  }
  const auto clean = RunCliOn({"check", dir.StorePath(), "--format", "table"}, nullptr);
  EXPECT_EQ(clean.code, 0) << clean.err;
  EXPECT_NE(clean.out.find(": clean (0 table files, 5 records, 5 index entries"), std::string::npos)
      << clean.out;

  idem_test::PutRaw(dir.StorePath(), "default", "key-2", "x");
  const auto damaged = RunCliOn({"check", dir.StorePath(), "--format", "table"}, nullptr);
  EXPECT_EQ(damaged.code, 7) << damaged.err << damaged.out;
  EXPECT_NE(damaged.out.find("1 problem found"), std::string::npos) << damaged.out;
  EXPECT_NE(damaged.out.find("  record key-2: "), std::string::npos) << damaged.out;

  const auto json = RunCliOn({"check", dir.StorePath(), "--format", "jsonl"}, nullptr);
  EXPECT_EQ(json.code, 7);
  EXPECT_NE(json.out.find(R"({"part":"record","subject":"key-2","problem":)"), std::string::npos)
      << json.out;
  // The raw write flushed the records into table files.
  EXPECT_NE(json.out.find(R"("clean":false,"problems":1,"files":)"), std::string::npos) << json.out;
  EXPECT_NE(json.out.find(R"(,"records":5,"index_entries":5,"table_values":0,)"), std::string::npos)
      << json.out;

  const auto missing = RunCliOn({"check", dir.Sub("nothing")}, nullptr);
  EXPECT_EQ(missing.code, 3) << missing.err;
  const auto bad_flag = RunCliOn({"check", dir.StorePath(), "--format", "xml"}, nullptr);
  EXPECT_EQ(bad_flag.code, 2);
}

TEST(CheckCommand, AStoreAnotherProcessOwnsIsCheckedThroughABackupItsOwnerTakes) {
  TempDir dir;
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath());
    Fill(*store, 20);
  }
  idem_test::OwnerProcess owner(dir.StorePath());
  ASSERT_TRUE(owner.ready());
  const auto checked = RunCliOn({"check", dir.StorePath(), "--format", "table"}, nullptr);
  EXPECT_EQ(checked.code, 0) << checked.err;
  EXPECT_NE(checked.out.find("20 records"), std::string::npos) << checked.out;
  EXPECT_NE(checked.out.find("a backup its owner took just now"), std::string::npos) << checked.out;
  // The copy is gone, and was made beside the store.
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().filename().string().find(".check-"), std::string::npos) << entry.path();
  }

  const auto nowhere =
      RunCliOn({"check", dir.StorePath(), "--scratch", dir.Sub("no/such/dir")}, nullptr);
  EXPECT_EQ(nowhere.code, 3);
  EXPECT_NE(nowhere.err.find("--scratch DIR"), std::string::npos) << nowhere.err;
}

TEST(CheckCommand, BackupVerifyChecksTheCopy) {
  TempDir dir;
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath());
    Fill(*store, 2000);
  }
  const auto clean = RunCliOn({"backup", dir.StorePath(), dir.Sub("first"), "--verify"}, nullptr);
  EXPECT_EQ(clean.code, 0) << clean.err;
  EXPECT_NE(clean.out.find("backed up"), std::string::npos) << clean.out;
  EXPECT_NE(clean.out.find(": clean ("), std::string::npos) << clean.out;
  EXPECT_NE(clean.out.find(" 2000 records"), std::string::npos) << clean.out;

  // The first backup flushed the records into table files; the next one links a damaged one,
  // and finds it in the copy, unless a compaction the backup's open started read it first: then
  // the backup itself is refused, naming it. Never a success.
  ASSERT_FALSE(DamageLargestTableFile(dir.StorePath()).empty());
  const auto damaged =
      RunCliOn({"backup", dir.StorePath(), dir.Sub("second"), "--verify"}, nullptr);
  if (damaged.code == 3) {
    EXPECT_NE(damaged.err.find("Corruption: "), std::string::npos) << damaged.err;
    EXPECT_FALSE(fs::exists(dir.Sub("second"))) << "a failed backup leaves nothing";
  } else {
    EXPECT_EQ(damaged.code, 7) << damaged.err << damaged.out;
    EXPECT_NE(damaged.out.find("  file "), std::string::npos) << damaged.out;
    EXPECT_TRUE(fs::exists(dir.Sub("second"))) << "a damaged copy is kept, to be looked at";
  }
}

}  // namespace
