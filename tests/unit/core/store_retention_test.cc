// Tests of idem::Store through its public API: tokens (never reused), retention and purge.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "idem/idem.h"
#include "support/test_util.h"

namespace {

using namespace std::chrono_literals;
using idem::Outcome;
using idem_test::ClockedStore;
using idem_test::ManualClock;
using idem_test::ScanKeys;
using idem_test::TempDir;
using idem_test::TestOptions;

// ---- Tokens ----------------------------------------------------------------------------------

// Every test but the disk space one runs on each backend (backend.h).
class Store : public idem_test::OnEachBackend {};

TEST_P(Store, TokensIncreaseAcrossKeys) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  std::set<uint64_t> tokens;
  for (int i = 0; i < 20; ++i) {
    ASSERT_OK_AND_ASSIGN(auto claim, s.store->Begin("key-" + std::to_string(i)));
    ASSERT_EQ(claim.outcome, Outcome::kAcquired);
    EXPECT_TRUE(tokens.insert(claim.token).second) << "token reused: " << claim.token;
  }
}

TEST_P(Store, TokensAreNeverReusedAfterForget) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto first, s.store->Begin("k"));
  ASSERT_OK(s.store->Forget("k"));
  ASSERT_OK_AND_ASSIGN(auto gone, s.store->Get("k"));
  EXPECT_FALSE(gone.has_value());
  EXPECT_CODE(s.store->Complete("k", first.token, "x"), kNotFound);

  ASSERT_OK_AND_ASSIGN(auto second, s.store->Begin("k"));
  ASSERT_EQ(second.outcome, Outcome::kAcquired);
  EXPECT_GT(second.token, first.token);
  EXPECT_EQ(second.record.attempts, 1u);
  EXPECT_FALSE(second.took_over);
  EXPECT_CODE(s.store->Complete("k", first.token, "stale"), kLeaseLost);
  ASSERT_OK(s.store->Complete("k", second.token, "fresh"));
  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("k"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->result, "fresh");
}

TEST_P(Store, TokensAreNeverReusedAfterRetentionExpiry) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto first, s.store->Begin("k", {.retention = 1h}));
  s.clock->Advance(2h);
  ASSERT_OK_AND_ASSIGN(auto second, s.store->Begin("k", {.retention = 1h}));
  ASSERT_EQ(second.outcome, Outcome::kAcquired);
  EXPECT_GT(second.token, first.token);
  EXPECT_EQ(second.record.attempts, 1u);
  EXPECT_FALSE(second.took_over);
  EXPECT_CODE(s.store->Complete("k", first.token, "stale"), kLeaseLost);

  // And after a purge.
  s.clock->Advance(2h);
  ASSERT_OK_AND_ASSIGN(auto purged, s.store->Purge());
  EXPECT_EQ(purged, 1u);
  ASSERT_OK_AND_ASSIGN(auto third, s.store->Begin("k"));
  ASSERT_EQ(third.outcome, Outcome::kAcquired);
  EXPECT_GT(third.token, second.token);
  EXPECT_CODE(s.store->Complete("k", second.token, "stale"), kLeaseLost);
  EXPECT_CODE(s.store->Complete("k", first.token, "stale"), kLeaseLost);
}

TEST_P(Store, TokensAreNeverReusedAfterForgetAndReopen) {
  TempDir dir;
  auto clock = std::make_shared<ManualClock>();
  idem::Options options = TestOptions(clock);
  const std::string location = idem_test::NewStoreLocation(GetParam(), dir.StorePath(), &options);
  uint64_t first_token = 0;
  {
    IDEM_ASSERT_OPEN(store, location, options);
    ASSERT_OK_AND_ASSIGN(auto first, store->Begin("k"));
    first_token = first.token;
    ASSERT_OK(store->Forget("k"));
  }
  IDEM_ASSERT_OPEN(store, location, options);
  ASSERT_OK_AND_ASSIGN(auto second, store->Begin("k"));
  ASSERT_EQ(second.outcome, Outcome::kAcquired);
  EXPECT_GT(second.token, first_token);
  EXPECT_CODE(store->Complete("k", first_token, "stale"), kLeaseLost);
}

// ---- Retention and purge ----------------------------------------------------------------------

TEST_P(Store, RetentionExpiryHidesTheRecord) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto first, s.store->Begin("k", {.retention = 1h}));
  ASSERT_OK(s.store->Complete("k", first.token, "r"));
  ASSERT_OK_AND_ASSIGN(auto keep, s.store->Begin("keep", {.retention = 10h}));
  ASSERT_OK(s.store->Complete("keep", keep.token, "r"));

  s.clock->Advance(59min);
  ASSERT_OK_AND_ASSIGN(auto still, s.store->Get("k"));
  EXPECT_TRUE(still.has_value());

  s.clock->Advance(2min);
  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("k"));
  EXPECT_FALSE(got.has_value());
  EXPECT_EQ(ScanKeys(*s.store), std::vector<std::string>{"keep"});
  // An expired record behaves as absent for the token calls too: no live record to fence.
  EXPECT_NE(s.store->Complete("k", first.token, "r").code(), idem::Status::Code::kOk);

  ASSERT_OK_AND_ASSIGN(auto fresh, s.store->Begin("k", {.retention = 1h}));
  EXPECT_EQ(fresh.outcome, Outcome::kAcquired);
  EXPECT_FALSE(fresh.took_over);
  EXPECT_EQ(fresh.record.attempts, 1u);
  EXPECT_EQ(fresh.record.result, "");
  EXPECT_EQ(fresh.record.created, s.clock->Now());
  EXPECT_EQ(fresh.record.expires, s.clock->Now() + 1h);
}

// Progress comes as a purge goes (a report per batch: 32 records on RocksDB, 1000 on
// PostgreSQL), after the total expected, and its last report is the count; a dry run may count
// in one go.
TEST_P(Store, PurgeReportsProgressAsItGoes) {
  idem::Options buffered = TestOptions();
  buffered.durability = idem::Durability::kBuffered;
  ClockedStore s(GetParam(), buffered);
  ASSERT_NE(s.store, nullptr);
  constexpr int kExpiring = 2100;
  for (int i = 0; i < kExpiring; ++i) {
    const std::string key = "k-" + std::to_string(i);
    ASSERT_OK_AND_ASSIGN(auto claim, s.store->Begin(key, {.retention = 1h}));
    ASSERT_OK(s.store->Complete(key, claim.token, "r"));
  }
  s.clock->Advance(2h);
  for (bool dry_run : {true, false}) {
    std::vector<uint64_t> reports;
    std::vector<uint64_t> totals;
    idem::PurgeOptions options{.dry_run = dry_run};
    options.progress_total = [&](uint64_t total) {
      EXPECT_TRUE(reports.empty()) << "the total came after progress";
      totals.push_back(total);
    };
    options.progress = [&](uint64_t so_far) { reports.push_back(so_far); };
    ASSERT_OK_AND_ASSIGN(auto count, s.store->Purge(options));
    EXPECT_EQ(count, static_cast<uint64_t>(kExpiring));
    EXPECT_EQ(totals, std::vector<uint64_t>{count}) << "dry run " << dry_run;
    ASSERT_GE(reports.size(), dry_run ? 1u : 2u) << "dry run " << dry_run;
    EXPECT_TRUE(std::is_sorted(reports.begin(), reports.end()));
    EXPECT_EQ(reports.back(), count);
  }
}

TEST_P(Store, PurgeRemovesExpiredRecords) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  for (int i = 0; i < 10; ++i) {
    const std::string key = "short-" + std::to_string(i);
    ASSERT_OK_AND_ASSIGN(auto claim, s.store->Begin(key, {.retention = 1h}));
    if (i % 3 == 0) ASSERT_OK(s.store->Complete(key, claim.token, "r"));
    if (i % 3 == 1) ASSERT_OK(s.store->Fail(key, claim.token, "e", idem::Failure::kTerminal));
  }
  for (int i = 0; i < 5; ++i) {
    const std::string key = "long-" + std::to_string(i);
    ASSERT_OK_AND_ASSIGN(auto claim, s.store->Begin(key, {.retention = 100h}));
    ASSERT_OK(s.store->Complete(key, claim.token, "r"));
  }
  ASSERT_OK_AND_ASSIGN(auto nothing, s.store->Purge());
  EXPECT_EQ(nothing, 0u);

  s.clock->Advance(2h);
  ASSERT_OK_AND_ASSIGN(auto dry, s.store->Purge({.dry_run = true}));
  EXPECT_EQ(dry, 10u);
  ASSERT_OK_AND_ASSIGN(auto dry_again, s.store->Purge({.dry_run = true}));
  EXPECT_EQ(dry_again, 10u);
  EXPECT_EQ(s.store->GetCounters()->purged, 0u);

  ASSERT_OK_AND_ASSIGN(auto purged, s.store->Purge());
  EXPECT_EQ(purged, 10u);
  EXPECT_EQ(s.store->GetCounters()->purged, 10u);
  ASSERT_OK_AND_ASSIGN(auto again, s.store->Purge());
  EXPECT_EQ(again, 0u);
  ASSERT_OK_AND_ASSIGN(auto compacted, s.store->Purge({.compact = true}));
  EXPECT_EQ(compacted, 0u);

  EXPECT_EQ(ScanKeys(*s.store).size(), 5u);
  EXPECT_CODE(s.store->Forget("short-0"), kNotFound);
  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("long-0"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->result, "r");

  // The rest expire later.
  s.clock->Advance(200h);
  ASSERT_OK_AND_ASSIGN(auto rest, s.store->Purge({.compact = true}));
  EXPECT_EQ(rest, 5u);
  EXPECT_TRUE(ScanKeys(*s.store).empty());
}

TEST_P(Store, PurgeKeepsARecordReacquiredAfterExpiry) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto first, s.store->Begin("k", {.retention = 1h}));
  ASSERT_OK(s.store->Complete("k", first.token, "old"));
  s.clock->Advance(2h);
  ASSERT_OK_AND_ASSIGN(auto second, s.store->Begin("k", {.retention = 1h}));
  ASSERT_EQ(second.outcome, Outcome::kAcquired);
  ASSERT_OK_AND_ASSIGN(auto purged, s.store->Purge());
  EXPECT_EQ(purged, 0u);
  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("k"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->token, second.token);
  ASSERT_OK(s.store->Complete("k", second.token, "new"));
}

TEST_P(Store, AutoPurgeRemovesExpiredRecords) {
  TempDir dir;
  auto clock = std::make_shared<ManualClock>();
  idem::Options options = TestOptions(clock);
  options.auto_purge_interval = 50ms;
  const std::string location = idem_test::NewStoreLocation(GetParam(), dir.StorePath(), &options);
  IDEM_ASSERT_OPEN(store, location, options);
  for (int i = 0; i < 20; ++i) {
    const std::string key = "k" + std::to_string(i);
    ASSERT_OK_AND_ASSIGN(auto claim, store->Begin(key, {.retention = 1h}));
    ASSERT_OK(store->Complete(key, claim.token, "r"));
  }
  ASSERT_OK_AND_ASSIGN(auto keep, store->Begin("keep", {.retention = 100h}));
  clock->Advance(2h);
  const bool purged = idem_test::WaitFor([&] { return store->GetCounters()->purged >= 20; });
  EXPECT_TRUE(purged) << "purged " << store->GetCounters()->purged;
  EXPECT_EQ(store->GetCounters()->purged, 20u);
  ASSERT_OK_AND_ASSIGN(auto left, store->Purge({.dry_run = true}));
  EXPECT_EQ(left, 0u);
  ASSERT_OK_AND_ASSIGN(auto got, store->Get("keep"));
  EXPECT_TRUE(got.has_value());
  EXPECT_OK(store->Complete("keep", keep.token, "r"));
}

// ---- Disk space ------------------------------------------------------------------------------

// The bytes of the store's table files and of its log files.
struct DiskUse {
  uintmax_t tables = 0;
  uintmax_t logs = 0;
};
DiskUse MeasureDiskUse(const std::string& store_path) {
  DiskUse use;
  for (const auto& entry : std::filesystem::directory_iterator(store_path + "/db")) {
    const std::string extension = entry.path().extension().string();
    if (extension == ".sst") use.tables += entry.file_size();
    if (extension == ".log") use.logs += entry.file_size();
  }
  return use;
}

// Writes `count` completed records with a result of `result_size` random letters (the table
// files compress what repeats); every other one (if `half_short`) with a one-minute retention.
void WriteRecords(idem::Store& store, int count, std::size_t result_size, bool half_short) {
  std::mt19937 random(42);
  std::string result(result_size, ' ');
  for (int i = 0; i < count; ++i) {
    for (char& c : result) c = static_cast<char>('a' + random() % 26);
    const std::string key = "order-" + std::to_string(i * 7919 % count);
    idem::BeginOptions options;
    if (half_short && i % 2 == 0) options.retention = 1min;
    ASSERT_OK_AND_ASSIGN(auto claim, store.Begin(key, options));
    ASSERT_OK(store.Complete(key, claim.token, result));
  }
}

// A purge gives the space of what it removed back at once: the table files shrink with the
// records removed, and no log file keeps the deletes.
TEST(StoreOnDisk, PurgeGivesTheSpaceBackAtOnce) {
  TempDir dir;
  auto clock = std::make_shared<ManualClock>();
  idem::Options options = TestOptions(clock);
  options.durability = idem::Durability::kBuffered;
  options.memory_budget = 16 << 20;
  auto store = idem_test::OpenStore(dir.StorePath(), options);
  ASSERT_NE(store, nullptr);
  WriteRecords(*store, 20'000, 400, /*half_short=*/true);
  // Reopening flushes what the log holds into table files: the records are all in tables.
  store.reset();
  store = idem_test::OpenStore(dir.StorePath(), options);
  ASSERT_NE(store, nullptr);
  const DiskUse before = MeasureDiskUse(dir.StorePath());
  ASSERT_GT(before.tables, 20'000u * 400 / 2) << "the records are not in table files";

  clock->Advance(2min);
  ASSERT_OK_AND_ASSIGN(uint64_t purged, store->Purge({.compact = true}));
  EXPECT_EQ(purged, 10'000u);
  const DiskUse after = MeasureDiskUse(dir.StorePath());
  // Half the records went: their results were nearly all of the bytes.
  EXPECT_LT(after.tables, before.tables * 6 / 10)
      << "tables: " << before.tables << " -> " << after.tables << " bytes";
  EXPECT_EQ(after.logs, 0u) << "a log file still holds " << after.logs << " bytes";
}

IDEM_ON_EACH_BACKEND(Store);

}  // namespace
